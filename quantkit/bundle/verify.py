"""Verify a deployment bundle on the target: digests, binding, then each runtime (:mod:`quantkit.bundle.target`).

Order of checks (each becomes one or more :class:`Check` rows; per-runtime rows carry the runtime's name):

1. ``archive``: the file name's content digest (``quantkit-bundle-<sha256[:16]>.tar``) matches the bytes; safe
   extraction (:func:`quantkit.bundle.archive.safe_extract`); the manifest is a valid bundle manifest.
2. ``digest``: every member's SHA-256 and size equal the manifest's. Any failure so far stops verification:
   nothing from a tampered bundle is loaded into a runtime.
3. ``binding``: record.json loads with its own typed loader and has the manifest's fingerprint; thresholds.json
   loads, has the manifest's fingerprint and is bound to that record and to model_int8.onnx
   (:meth:`ThresholdSet.check_binding`).
4. ``profile`` (with ``target``): the model against a documentation-derived capability profile
   (:func:`quantkit.intake.support.check_support`), for a runtime that is not installed here.
5. per runtime (``runtimes``; ``all`` = every installed one): ``runtime``, ``support``, ``output``, ``decision``,
   ``precision``, ``latency``, ``patterns`` and, after a failure, ``layer`` (see :mod:`quantkit.bundle.target`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from .._io import read_json, sha256_file
from ..config import Config
from ..artifacts.verification import Verdict
from ..errors import ConfigError, InputFileError, QuantkitError, VerificationError
from .archive import ExtractedBundle, safe_extract
from .manifest import BUNDLE_NAME, POINTER_NAME, BundleManifest
from .target import RuntimeRun, verify_on
from .typed import CalibrationRecord, ThresholdSet
from .._io import scratch_dir

Status = Literal["pass", "fail", "warn", "skip"]

NUMERIC_KINDS = ("output", "layer", "decision")
"""Failed checks that compare with the QDQ simulation (tensors, and decisions vs the simulation's): they do not by
themselves make a bundle undeployable; its decisions' agreement with FP32 decides (:attr:`VerificationReport.deployable`)."""


@dataclasses.dataclass(frozen=True)
class VerifyConfig(Config):
    """Options of ``quantkit verify`` (params.yaml section ``bundle.verify``).

    runtimes: runtimes to verify on (registry names; ``all`` = every installed one), each at its deployment settings.
    providers: ORT execution providers, in priority order.
    target: a capability profile (path or packaged name: ``tensorrt``, ``npu-generic``) checked as well (``""`` = none).
    tolerance_steps / max_mismatch: override the bundle's tolerance (0 / None = the bundle's).
    require_same_runtime: fail (instead of warn) when a runtime's version differs from the build machine's.
    decision_min_agreement: decisions agree when the task's decision metric (box F1 at the task's match IoU,
        top-1, exact text) of the target's decisions vs the golden ones is at least this (1.0 = the same decisions).
    latency_repeats: timed runs per golden input (after the comparison run).
    threads: intra-op threads of every runtime (0 = each runtime's default).
    localize: after a failure, cut the model to name the first diverging tensor.
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True

    runtimes: tuple[str, ...] = ("onnxruntime",)
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    target: str = ""
    tolerance_steps: float = 0.0
    max_mismatch: float | None = None
    require_same_runtime: bool = False
    decision_min_agreement: float = 1.0
    latency_repeats: int = 3
    threads: int = 0
    localize: bool = True

    def validate(self) -> None:
        if not self.runtimes:
            raise ConfigError("verify.runtimes: name at least one runtime (onnxruntime, openvino or all)")
        if not self.providers:
            raise ConfigError("verify.providers: name at least one execution provider, e.g. CPUExecutionProvider")
        if self.tolerance_steps < 0:
            raise ConfigError(f"verify.tolerance_steps: {self.tolerance_steps} must be >= 0 (0 = the bundle's)")
        if self.max_mismatch is not None and not 0 <= self.max_mismatch < 1:
            raise ConfigError(f"verify.max_mismatch: {self.max_mismatch} must be in [0, 1)")
        if not 0 < self.decision_min_agreement <= 1:
            raise ConfigError(f"verify.decision_min_agreement: {self.decision_min_agreement} must be in (0, 1]")
        if self.latency_repeats < 0 or self.threads < 0:
            raise ConfigError("verify.latency_repeats / verify.threads: must be >= 0")

    def resolved_runtimes(self) -> tuple[str, ...]:
        """``runtimes`` with ``all`` expanded to the installed runtimes.

        Raises:
            ConfigError: a name no plug-in is registered for.
        """
        from ..runtimes import resolve_runtime_names

        return resolve_runtime_names(self.runtimes)


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the verification table; ``runtime`` is empty for checks of the bundle itself."""

    kind: str
    name: str
    status: Status
    detail: str
    runtime: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"Check({self.runtime + ' ' if self.runtime else ''}{self.kind}:{self.name} {self.status})"


def _agreement(r: RuntimeRun) -> str:
    """One run's decision figures in words."""
    return f"{r.decisions_agree} of {r.decisions} decisions as simulated" + (
        f", agreement with FP32 {r.fp32_agreement:.3f} (bound {r.fp32_bound:.3f})" if r.fp32_agreement is not None and r.fp32_bound is not None else "")


def run_deployable(r: RuntimeRun) -> bool:
    """One runtime's decisions agree with FP32's golden decisions within the bound interval
    (``fp32_agreement >= fp32_bound``); without FP32 golden decisions (older bundles), every decision agrees with
    the simulation's."""
    if r.fp32_agreement is not None and r.fp32_bound is not None:
        return r.fp32_agreement >= r.fp32_bound - 1e-9
    return r.decisions > 0 and r.decisions_agree == r.decisions


@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """Result of :func:`verify_bundle`: the checks, the runs and, from them, :attr:`verdict` (whether to deploy, with
    reasons and warnings), which ``quantkit verify`` prints and exits by. ``ok``: no check failed at all (warnings and
    skips allowed), comparisons with the simulation included; a bundle can be deployable and not ``ok``."""

    bundle: str
    checks: tuple[Check, ...]
    runs: tuple[RuntimeRun, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def divergence(self) -> Any:
        """The first runtime's localised divergence, if any."""
        return next((r.divergence for r in self.runs if r.divergence is not None), None)

    @property
    def deployable(self) -> bool:
        """:attr:`verdict`'s ``deployable``."""
        return self.verdict.deployable

    @property
    def verdict(self) -> Verdict:
        """Whether to deploy, the one answer of the library, ``quantkit verify`` and its ``--out`` stage: deployable when
        every runtime ran, no check failed except comparisons with the QDQ simulation (:data:`NUMERIC_KINDS`), and on every
        runtime the decisions agree with FP32's golden decisions within the bound interval (``fp32_agreement >=
        fp32_bound``, :func:`quantkit.bundle.target.fp32_bound`; for a bundle without FP32 golden decisions, every
        decision agrees with the simulation's). Reasons and warnings keep the order of the checks."""
        def line(c: Check) -> str:
            return f"{c.runtime + ' ' if c.runtime else ''}[{c.kind}] {c.name}: {c.detail}"

        runs = [r for r in self.runs if r.info is not None]
        blocking = [c for c in self.failures if c.kind not in NUMERIC_KINDS]
        reasons = [line(c) for c in blocking]
        for r in runs:
            if not run_deployable(r) and not any(c.runtime == r.runtime for c in blocking):
                div = f"; first diverging tensor {r.divergence.tensor!r} ({r.divergence.op_type} {r.divergence.node!r})" if r.divergence else ""
                reasons.append(f"{r.info.label}: the decisions do not agree with FP32 within the bound interval ({_agreement(r)}){div}")  # type: ignore[union-attr]
        if not runs and not blocking:
            reasons.append("no runtime ran the bundle")
        warnings = tuple(line(c) for c in self.checks if c.status == "warn" or (c.status == "fail" and c.kind in NUMERIC_KINDS))
        why = "; ".join(f"{r.info.label}: {_agreement(r)}" for r in runs)  # type: ignore[union-attr]
        numeric = [c for c in self.failures if c.kind in NUMERIC_KINDS]
        if reasons:
            answer = f"Deploy: NO. {reasons[0]}."
        elif not numeric:
            answer = f"Deploy: YES. Every check passed ({why})."
        else:
            div = self.divergence
            where = f"; first diverging tensor {div.tensor!r} ({div.op_type} {div.node!r})" if div else ""
            answer = (f"Deploy: YES. The decisions agree with FP32 within the bound interval ({why}). Warning: {len(numeric)} check(s) "
                      f"found numbers that differ from the QDQ simulation{where}; an engineer may look, the decisions are not affected.")
        return Verdict(not reasons, answer, tuple(reasons), warnings, bool(blocking) and blocking[0].kind in ("support", "profile"))

    def answer(self) -> str:
        """Whether to deploy, in one plain sentence (:attr:`verdict`; the verification table is for engineers)."""
        return self.verdict.answer

    def error(self) -> QuantkitError | None:
        """The exception ``quantkit verify`` exits with (:meth:`Verdict.error`): ``None`` when deployable (numbers that
        differ from the simulation alone are warnings), TargetSupportError (exit 5) when the first reason is an operator the
        target lacks, else VerificationError (exit 4)."""
        err = self.verdict.error(self.bundle)
        div = self.divergence
        if err is not None and div is not None and repr(div.tensor) not in str(err):
            err = type(err)(f"{err}; first diverging tensor {div.tensor!r} ({div.op_type} {div.node!r})")
        return err

    def table(self) -> Any:
        """The checks as a pandas DataFrame (columns runtime, kind, name, status, detail)."""
        import pandas as pd

        return pd.DataFrame([c.to_dict() for c in self.checks], columns=["runtime", "kind", "name", "status", "detail"])

    def to_dict(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "ok": self.ok, "verdict": self.verdict.to_dict(), "checks": [c.to_dict() for c in self.checks],
                "runs": [r.to_dict() for r in self.runs]}

    def __repr__(self) -> str:
        v = self.verdict
        return (f"VerificationReport({Path(self.bundle).name}, deployable={v.deployable}, {len(v.warnings)} warning(s), "
                f"{len(self.checks)} checks, {len(self.failures)} failed)")


def resolve_bundle(path: str | Path) -> Path:
    """The archive a path names: the archive itself, a ``bundle.json`` pointer, or its folder.

    Raises:
        InputFileError: nothing there, or the pointer names a missing archive.
    """
    p = Path(path)
    if p.is_dir():
        p = p / POINTER_NAME
    if p.name == POINTER_NAME:
        data = read_json(p, "bundle pointer")
        name = data.get("bundle") if isinstance(data, dict) else None
        if not isinstance(name, str) or "/" in name or not BUNDLE_NAME.match(name):
            raise InputFileError(f"{p}: does not name a quantkit bundle; rebuild with 'quantkit bundle'")
        p = p.parent / name
    if not p.is_file():
        raise InputFileError(f"{p}: bundle not found; copy the .tar from dist/ or pass its path")
    return p


def verify_bundle(bundle: str | Path, config: VerifyConfig | None = None) -> VerificationReport:
    """Verify ``bundle`` (archive, ``bundle.json`` or its folder) on this machine's runtimes.

    Returns:
        :class:`VerificationReport`; check failures are rows, not exceptions.

    Raises:
        InputFileError: the bundle or the capability profile does not exist.
        ConfigError: a malformed capability profile, an unknown target or runtime name.
    """
    from ..intake.support import resolve_target

    cfg = config or VerifyConfig()
    path = resolve_bundle(bundle)
    runtimes = cfg.resolved_runtimes()
    if cfg.target:
        resolve_target(cfg.target)
    v = _Verifier(path, cfg)
    with scratch_dir("verify") as tmp:
        v.run(Path(tmp), runtimes)
    return VerificationReport(str(path), tuple(v.checks), tuple(v.runs))


_TAR_METHODS = re.compile(r"file could not be opened successfully:(?:\s*- method \w+: \w+\('[^']*'\))+")


def _one_line(text: str) -> str:
    text = _TAR_METHODS.sub("not a tar, tar.gz, tar.bz2 or tar.xz file", text)
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _digest_detail(d: Any) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", d.actual_sha256):
        return f"{d.actual_sha256}: size {d.actual_size} B != manifest {d.expected_size} B; member tampered or corrupt"
    return f"sha256 {d.actual_sha256[:12]} ({d.actual_size} B) != manifest {d.expected_sha256[:12]} ({d.expected_size} B); member tampered or corrupt"


class _Verifier:
    def __init__(self, path: Path, cfg: VerifyConfig) -> None:
        self.path, self.cfg = path, cfg
        self.checks: list[Check] = []
        self.runs: list[RuntimeRun] = []

    def add(self, kind: str, name: str, status: Status, detail: str, runtime: str = "") -> bool:
        self.checks.append(Check(kind, name, status, detail, runtime))
        return status != "fail"

    def run(self, tmp: Path, runtimes: tuple[str, ...]) -> None:
        ok = self._archive_name()
        try:
            ex = safe_extract(self.path, tmp / "bundle")
            man = BundleManifest.from_dict(ex.manifest)
        except VerificationError as e:
            self.add("archive", "extraction", "fail", _one_line(str(e).split(": ", 1)[-1]))
            return
        self.add("archive", "extraction", "pass", f"{len(ex.digests)} members, regular files only, none outside the folder (schema {man.schema_version})")
        bad = [d for d in ex.digests if not d.ok]
        for d in bad:
            self.add("digest", d.name, "fail", _digest_detail(d))
        if not bad:
            self.add("digest", "members", "pass", f"{len(ex.digests)} members match manifest.json")
        if not ok or bad:
            self.add("output", "golden", "skip", "not run: the bundle failed its digest checks")
            return
        thresholds = self._binding(ex, man)
        try:
            import onnx

            model = onnx.load(str(ex.path("model_int8.onnx")), load_external_data=False)
        except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends
            self.add("runtime", "model_int8.onnx", "fail", f"not a loadable ONNX model ({type(e).__name__}); rebuild the bundle")
            return
        if self.cfg.target:
            self._profile(model)
        for rt in runtimes:
            self.runs.append(verify_on(rt, ex, man, model, thresholds, self.cfg,
                                       lambda kind, name, status, detail, rt=rt: self.add(kind, name, status, detail, rt)))

    def _archive_name(self) -> bool:
        m = BUNDLE_NAME.match(self.path.name)
        if not m:
            return self.add("archive", "content digest", "warn", f"name {self.path.name!r} is not content-addressed; archive digest not checked")
        actual = sha256_file(self.path)
        if actual[:16] != m.group(1):
            return self.add("archive", "content digest", "fail", f"sha256 {actual[:16]} != {m.group(1)} in the name; archive truncated or tampered, copy it again")
        return self.add("archive", "content digest", "pass", f"sha256 {actual[:16]} matches the name")

    def _binding(self, ex: ExtractedBundle, man: BundleManifest) -> Any:
        """Typed loads and binding; returns the threshold set (for decisions) or None when it cannot be used."""
        def clean(e: Exception) -> str:
            return str(e).replace(f"{ex.root}/", "").replace(str(ex.root), "BUNDLE")

        try:
            record = CalibrationRecord.load(ex.path("record.json"))
        except QuantkitError as e:
            self.add("binding", "record.json", "fail", clean(e))
            return None
        self.add("binding", "record.json", "pass" if record.fingerprint == man.record_fingerprint else "fail",
                 f"fingerprint {record.fingerprint[:12]}" + ("" if record.fingerprint == man.record_fingerprint else f" != manifest {man.record_fingerprint[:12]}"))
        model_sha = next((d.actual_sha256 for d in ex.digests if d.name == "model_int8.onnx"), "")
        want = record.quantized_model_digest
        self.add("binding", "model_int8.onnx", "pass" if want == model_sha else "fail",
                 f"sha256 {model_sha[:12]} as recorded" if want == model_sha else f"sha256 {model_sha[:12]} != record.json quantized_model_digest {want[:12]}; model file swapped")
        try:
            ts = ThresholdSet.load(ex.path("thresholds.json"))
        except QuantkitError as e:
            self.add("binding", "thresholds.json", "fail", clean(e))
            return None
        fp = ts.fingerprint or ts.content_fingerprint()
        try:
            ts.check_binding(ex.path("record.json"), model_path=ex.path("model_int8.onnx"), source="thresholds.json")
        except QuantkitError as e:
            self.add("binding", "thresholds.json", "fail", f"{clean(e)}; thresholds from another calibration or a swapped model file")
            return None
        if fp != man.threshold_fingerprint:
            self.add("binding", "thresholds.json", "fail", f"fingerprint {fp[:12]} != manifest {man.threshold_fingerprint[:12]}")
            return None
        self.add("binding", "thresholds.json", "pass", f"bound to record {record.fingerprint[:12]} and model_int8.onnx {man.model_sha256[:12]}")
        return ts if ts.adapter else None

    def _profile(self, model: Any) -> None:
        from ..intake.support import check_support

        rep = check_support(model, self.cfg.target)
        kinds = sorted({f"{(i.domain + '::') if i.domain else ''}{i.op_type} ({i.kind})" for i in rep.issues})
        self.add("profile" if rep.provenance != "runtime" else "support", f"target {Path(self.cfg.target).stem}", "fail" if rep.issues else "pass",
                 f"{len(rep.issues)} node(s) the target cannot run: {', '.join(kinds[:6])}{', ...' if len(kinds) > 6 else ''}; "
                 f"first: {rep.issues[0].node}: {rep.issues[0].detail} ({rep.source})"
                 if rep.issues else f"all {rep.nodes_checked} nodes supported ({rep.source})")

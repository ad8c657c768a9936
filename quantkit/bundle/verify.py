"""Verify a deployment bundle on the target: digests, runtime, operator support, golden outputs.

Order of checks (each becomes one or more :class:`Check` rows):

1. ``archive``: the file name's content digest (``quantkit-bundle-<sha256[:16]>.tar``) matches the
   bytes; safe extraction (:func:`quantkit.bundle.archive.safe_extract`).
2. ``digest``: every member's SHA-256 and size equal the manifest's. Any failure so far stops
   verification: nothing from a tampered bundle is loaded into the runtime.
3. ``binding``: record and threshold fingerprints equal the manifest's; the thresholds are bound to
   the record (:func:`quantkit.bundle.build.binding_problem`); the model's digest equals the record's
   ``quantized_model_digest``.
4. ``runtime``: onnxruntime version vs the manifest's (a difference warns unless
   ``require_same_runtime``); requested execution providers available; model opset per domain <= the
   highest ``since_version`` in onnxruntime's operator schemas.
5. ``support``: every ``domain:op`` of the model has a kernel in this onnxruntime build for the
   requested providers (or CPU fallback) at the model's opset (``get_all_opkernel_def``); and, with
   ``target``, the model passes :func:`quantkit.intake.support.check_support` for that target (a
   packaged profile name such as ``npu-generic``, an ORT execution provider name, or a profile JSON in
   the ``quantkit/profiles`` format), or a simple profile (:func:`load_profile`).
6. ``output``: each golden input through the target runtime; per output, max abs difference to the
   golden INT8 output <= the manifest's tolerance (``tolerance.steps`` quantization steps).
7. ``decision``: the task adapter's decision equals the golden decision (counts exact, coordinates
   within ``decision_atol`` pixels, scores within ``score_atol``); skipped when
   ``quantkit.thresholds.adapters`` is unavailable.
8. ``layer`` (only after an output or decision failure): the INT8 model is run with the recorded
   activations marked as outputs (Polygraphy's ``ModifyOutputs``) and compared with the golden FP32
   activations; a tensor diverges when ``max|int8 - fp32| > baseline + atol``, where ``baseline`` is
   the build machine's INT8-vs-FP32 error on the same elements and ``atol`` its tolerance in
   quantization steps. By the triangle inequality a runtime within ``atol`` of the build runtime
   never exceeds that bound, so the first tensor (FP32 topological order) that does is named.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._io import read_json, sha256_file
from ..config import Config
from ..errors import (
    ConfigError,
    InputFileError,
    ModelError,
    QuantkitError,
    TargetSupportError,
    VerificationError,
)
from ..progress import progress
from ..runner import OrtRunner, with_outputs
from .archive import ExtractedBundle, safe_extract
from .build import (
    BUNDLE_NAME,
    POINTER_NAME,
    binding_problem,
    decision_json,
    make_task_adapter,
    model_ops,
    model_opsets,
    owner_checks,
    subsample_indices,
    threshold_fingerprint,
)

log = logging.getLogger(__name__)

Status = Literal["pass", "fail", "warn", "skip"]
_ACT_CHUNK = 64
_NO_KERNEL = frozenset({"ai.onnx:Constant"})  # ORT turns Constant nodes into initializers at load; no kernel exists


@dataclasses.dataclass(frozen=True)
class VerifyConfig(Config):
    """Options of ``quantkit verify`` (params.yaml section ``bundle.verify``).

    providers: ORT execution providers to verify, in priority order.
    target: capability of the target runtime (``""`` = none): a profile JSON path (``quantkit/profiles``
        format, or the simple format of :class:`CapabilityProfile`), a packaged profile name
        (``tensorrt``, ``openvino``, ``npu-generic``) or an execution provider name.
    tolerance_steps: overrides the bundle's tolerance in quantization steps (0 = use the bundle's).
    require_same_runtime: fail (instead of warn) when onnxruntime's version differs from the build's.
    decision_atol: allowed difference of decision coordinates, in model-input pixels.
    score_atol: allowed difference of decision scores (probability units).
    localize: after a failure, compare layer by layer to name the first diverging tensor.
    """

    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    target: str = ""
    tolerance_steps: float = 0.0
    require_same_runtime: bool = False
    decision_atol: float = 1.0
    score_atol: float = 0.01
    localize: bool = True

    def validate(self) -> None:
        if not self.providers:
            raise ConfigError("verify.providers: name at least one execution provider, e.g. CPUExecutionProvider")
        if self.tolerance_steps < 0:
            raise ConfigError(f"verify.tolerance_steps: {self.tolerance_steps} must be >= 0 (0 = the bundle's)")
        if self.decision_atol < 0 or self.score_atol < 0:
            raise ConfigError("verify.decision_atol / score_atol: must be >= 0")


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the verification table."""

    kind: str
    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"Check({self.kind}:{self.name} {self.status})"


@dataclasses.dataclass(frozen=True)
class LayerDivergence:
    """First tensor whose target-vs-FP32 error exceeds ``baseline + atol`` (same units as the tensor)."""

    sample: str
    tensor: str
    topo_index: int
    max_abs_error: float
    baseline: float
    atol: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"LayerDivergence({self.tensor!r} at node {self.topo_index}, {self.max_abs_error:.3g} > {self.baseline + self.atol:.3g})"


@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """Result of :func:`verify_bundle`. ``ok`` when no check failed (warnings and skips allowed)."""

    bundle: str
    providers: tuple[str, ...]
    checks: tuple[Check, ...]
    divergence: LayerDivergence | None = None
    runtime: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def error(self) -> QuantkitError | None:
        """The exception the CLI raises: TargetSupportError when the first failure is an unsupported
        operator or opset (exit 5), else VerificationError (exit 4); ``None`` when verification passed."""
        if self.ok:
            return None
        first = self.failures[0]
        cls = TargetSupportError if first.kind == "support" else VerificationError
        where = f"; first diverging tensor {self.divergence.tensor!r}" if self.divergence else ""
        return cls(f"{self.bundle}: {len(self.failures)} check(s) failed, first [{first.kind}] {first.name}: {first.detail}{where}")

    def table(self) -> Any:
        """The checks as a pandas DataFrame (columns kind, name, status, detail)."""
        import pandas as pd

        return pd.DataFrame([c.to_dict() for c in self.checks], columns=["kind", "name", "status", "detail"])

    def to_dict(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "ok": self.ok, "providers": list(self.providers), "runtime": dict(self.runtime),
                "checks": [c.to_dict() for c in self.checks], "divergence": self.divergence.to_dict() if self.divergence else None}

    def __repr__(self) -> str:
        return f"VerificationReport({Path(self.bundle).name}, ok={self.ok}, {len(self.checks)} checks, {len(self.failures)} failed)"


# -- capability profiles ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CapabilityProfile:
    """What a target runtime supports.

    JSON form: ``{"name": "board-x", "opset": {"ai.onnx": 17}, "ops": {"Conv": [1, 21],
    "com.microsoft:QLinearConv": [1, 1]}}``. ``ops`` keys are ``op_type`` (default domain) or
    ``domain:op_type``; values ``[min_opset, max_opset]`` inclusive, the opset versions of the op's
    domain at which the target runs it. ``opset`` (optional) caps each domain's opset.
    """

    name: str
    ops: dict[str, tuple[int, int]]
    opset: dict[str, int]

    def problems(self, model_ops: Sequence[str], model_opsets: Mapping[str, int]) -> list[str]:
        """Human-readable reasons this profile cannot run a model (empty when it can)."""
        out = []
        for domain, v in sorted(model_opsets.items()):
            cap = self.opset.get(domain)
            if cap is not None and v > cap:
                out.append(f"opset {domain} {v} > {cap}")
        for key in model_ops:
            domain, op = key.split(":", 1)
            rng = self.ops.get(key) or (self.ops.get(op) if domain == "ai.onnx" else None)
            v = model_opsets.get(domain, 1)
            if rng is None:
                out.append(f"operator {op if domain == 'ai.onnx' else key} not supported")
            elif not rng[0] <= v <= rng[1]:
                out.append(f"operator {op if domain == 'ai.onnx' else key} supported at opset {rng[0]}..{rng[1]}, model uses {v}")
        return out


def resolve_target(target: str) -> CapabilityProfile | str | None:
    """Validate ``target`` before anything runs: a simple :class:`CapabilityProfile`, or the target
    string for :func:`quantkit.intake.support.check_support` (when that module is installed).

    Raises:
        InputFileError: a profile path that does not exist or is not JSON.
        ConfigError: a malformed profile or an unknown target name.
    """
    if not target:
        return None
    p = Path(target)
    if p.suffix == ".json" or p.is_file():
        data = read_json(p, "capability profile")
        ops = data.get("ops") if isinstance(data, dict) else None
        if isinstance(ops, dict) and "schema_version" not in data and all(isinstance(v, list) for v in ops.values()):
            return load_profile(p)
    try:
        from ..intake import support
    except ImportError as e:
        if not (e.name or "").startswith("quantkit.intake"):
            raise
        return load_profile(p)
    if not (target.endswith("ExecutionProvider") or target.lower() in support.ORT_ALIASES):
        support.load_profile(target)
    return target


def load_profile(path: str | Path) -> CapabilityProfile:
    """Read a capability profile JSON (format in :class:`CapabilityProfile`).

    Raises:
        InputFileError: missing file or invalid JSON.
        ConfigError: a field has the wrong shape (message names the file and field).
    """
    p = Path(path)
    data = read_json(p, "capability profile")
    if not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
        raise ConfigError(f"{p}: a capability profile needs an 'ops' mapping {{op: [min_opset, max_opset]}}; see docs/deploy.md")
    ops = {}
    for k, v in data["ops"].items():
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(i, int) and not isinstance(i, bool) for i in v) and v[0] <= v[1]):
            raise ConfigError(f"{p}: ops.{k} must be [min_opset, max_opset] integers, got {v!r}")
        ops[str(k)] = (int(v[0]), int(v[1]))
    opset = data.get("opset", {})
    if not isinstance(opset, dict) or not all(isinstance(v, int) for v in opset.values()):
        raise ConfigError(f"{p}: 'opset' must map domain to an integer opset, e.g. {{\"ai.onnx\": 17}}")
    opset = {("ai.onnx" if k in ("", "ai.onnx") else k): int(v) for k, v in opset.items()}
    return CapabilityProfile(str(data.get("name") or p.stem), ops, opset)


# -- entry point -----------------------------------------------------------------------------------

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
    """Verify ``bundle`` (archive, ``bundle.json`` or its folder) on this machine's onnxruntime.

    Returns:
        :class:`VerificationReport`; check failures are rows, not exceptions.

    Raises:
        InputFileError: the bundle or the capability profile does not exist.
        ConfigError: a malformed capability profile or unknown target name.
    """
    cfg = config or VerifyConfig()
    path = resolve_bundle(bundle)
    v = _Verifier(path, cfg, resolve_target(cfg.target))
    with tempfile.TemporaryDirectory(prefix="quantkit-verify-") as tmp:
        v.run(Path(tmp))
    return VerificationReport(str(path), cfg.providers, tuple(v.checks), v.divergence, v.runtime)


_TAR_METHODS = re.compile(r"file could not be opened successfully:(?:\s*- method \w+: \w+\('[^']*'\))+")


def _one_line(text: str) -> str:
    """A failure detail on one line: tarfile's per-compression-method list ("- method gz: ...") becomes
    one phrase, and any other line break a space."""
    text = _TAR_METHODS.sub("not a tar, tar.gz, tar.bz2 or tar.xz file", text)
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _digest_detail(d: Any) -> str:
    """Detail of a member whose digest or size differs from ``manifest.json``. A member whose size differs
    is not extracted (:func:`quantkit.bundle.archive.safe_extract`), so it has no digest to show."""
    if not re.fullmatch(r"[0-9a-f]{64}", d.actual_sha256):
        return f"{d.actual_sha256}: size {d.actual_size} B != manifest {d.expected_size} B; member tampered or corrupt"
    return f"sha256 {d.actual_sha256[:12]} ({d.actual_size} B) != manifest {d.expected_sha256[:12]} ({d.expected_size} B); member tampered or corrupt"


class _Verifier:
    def __init__(self, path: Path, cfg: VerifyConfig, profile: CapabilityProfile | str | None) -> None:
        self.path, self.cfg, self.profile = path, cfg, profile
        self.checks: list[Check] = []
        self.divergence: LayerDivergence | None = None
        self.runtime: dict[str, str] = {}
        self.opsets: dict[str, int] = {}
        self.ops: list[str] = []

    def add(self, kind: str, name: str, status: Status, detail: str) -> bool:
        self.checks.append(Check(kind, name, status, detail))
        return status != "fail"

    # 1-2
    def run(self, tmp: Path) -> None:
        ok = self._archive_name()
        try:
            ex = safe_extract(self.path, tmp / "bundle")
        except VerificationError as e:
            self.add("archive", "extraction", "fail", _one_line(str(e).split(": ", 1)[-1]))
            return
        self.add("archive", "extraction", "pass", f"{len(ex.digests)} members, regular files only, none outside the folder")
        bad = [d for d in ex.digests if not d.ok]
        for d in bad:
            self.add("digest", d.name, "fail", _digest_detail(d))
        if not bad:
            self.add("digest", "members", "pass", f"{len(ex.digests)} members match manifest.json")
        if not ok or bad:
            self.add("output", "golden", "skip", "not run: the bundle failed its digest checks")
            return
        self._binding(ex)
        try:  # operator inventory from the (digest-checked) model itself, not from the manifest
            import onnx

            model = onnx.load(str(ex.path("model_int8.onnx")), load_external_data=False)
            self.opsets, self.ops = model_opsets(model), model_ops(model)
        except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends
            self.add("runtime", "model_int8.onnx", "fail", f"not a loadable ONNX model ({type(e).__name__}); rebuild the bundle")
            return
        if not self._runtime(ex):
            return
        self._support(ex)
        failing = self._golden(ex)
        if failing is not None and self.cfg.localize:
            self._localize(ex, failing)

    def _archive_name(self) -> bool:
        m = BUNDLE_NAME.match(self.path.name)
        if not m:
            return self.add("archive", "content digest", "warn", f"name {self.path.name!r} is not content-addressed; archive digest not checked")
        actual = sha256_file(self.path)
        if actual[:16] != m.group(1):
            return self.add("archive", "content digest", "fail", f"sha256 {actual[:16]} != {m.group(1)} in the name; archive truncated or tampered, copy it again")
        return self.add("archive", "content digest", "pass", f"sha256 {actual[:16]} matches the name")

    # 3
    def _binding(self, ex: ExtractedBundle) -> None:
        man = ex.manifest
        record, ts = _json_member(ex, "record.json"), _json_member(ex, "thresholds.json")
        if record is None or ts is None:
            self.add("binding", "record/thresholds", "fail", "record.json or thresholds.json is not a JSON object")
            return
        rec_fp = (man.get("record") or {}).get("fingerprint")
        self.add("binding", "record.json", "pass" if record.get("fingerprint") == rec_fp else "fail",
                 f"fingerprint {str(record.get('fingerprint'))[:12]}" + ("" if record.get("fingerprint") == rec_fp else f" != manifest {str(rec_fp)[:12]}"))
        th_fp, man_th = threshold_fingerprint(ts), (man.get("thresholds") or {}).get("fingerprint")
        problem = binding_problem(record, ts)
        if th_fp != man_th:
            problem = (problem + "; " if problem else "") + f"fingerprint {th_fp[:12]} != manifest {str(man_th)[:12]}"
        self.add("binding", "thresholds.json", "fail" if problem else "pass",
                 f"{problem}; thresholds from another calibration" if problem else f"bound to record {str(record.get('fingerprint'))[:12]}")
        model_sha = next((d.actual_sha256 for d in ex.digests if d.name == "model_int8.onnx"), "")
        b = ts.get("binding")
        binding: dict[str, Any] = b if isinstance(b, dict) else {}
        candidates = {"record.json": record.get("quantized_model_digest"), "thresholds.json": binding.get("quantized_model_digest")}
        wants: dict[str, str] = {k: v for k, v in candidates.items() if isinstance(v, str) and v}
        wrong = [f"{k} quantized_model_digest {v[:12]}" for k, v in wants.items() if v != model_sha]
        if not wants:
            self.add("binding", "model_int8.onnx", "skip", "neither record.json nor thresholds.json gives quantized_model_digest")
        else:
            self.add("binding", "model_int8.onnx", "fail" if wrong else "pass",
                     f"sha256 {str(model_sha)[:12]} != {', '.join(wrong)}; model file swapped" if wrong else f"sha256 {str(model_sha)[:12]} as recorded")
        try:
            used = owner_checks(ex.path("record.json"), ex.path("thresholds.json"), ex.path("model_int8.onnx"))
        except QuantkitError as e:
            self.add("binding", "record/thresholds loaders", "fail", str(e).replace(f"{ex.root}/", "").replace(str(ex.root), "BUNDLE"))
        else:
            self.add("binding", "record/thresholds loaders", "pass" if used else "skip",
                     ", ".join(used) if used else "quantkit.quantize / quantkit.thresholds not installed; JSON checks only")

    # 4
    def _runtime(self, ex: ExtractedBundle) -> bool:
        try:
            import onnxruntime as ort
        except ImportError:
            want = (ex.manifest.get("runtime") or {}).get("onnxruntime", "")
            return self.add("runtime", "onnxruntime", "fail", f"not installed; pip install onnxruntime=={want}")
        built = (ex.manifest.get("runtime") or {}).get("onnxruntime")
        self.runtime = {"onnxruntime": ort.__version__, "built_with": str(built)}
        if built == ort.__version__:
            self.add("runtime", "onnxruntime", "pass", f"{ort.__version__} (same as the build)")
        else:
            self.add("runtime", "onnxruntime", "fail" if self.cfg.require_same_runtime else "warn",
                     f"{ort.__version__} here, bundle built with {built}; golden comparison decides")
        avail = ort.get_available_providers()
        missing = [p for p in self.cfg.providers if p not in avail]
        if missing:
            return self.add("runtime", "providers", "fail", f"{missing[0]} not in this onnxruntime build (available: {', '.join(avail)})")
        self.add("runtime", "providers", "pass", ", ".join(self.cfg.providers))
        opsets = self.opsets
        max_opsets = _ort_max_opsets()
        if not max_opsets:
            self.add("runtime", "opset", "skip", "this onnxruntime build does not list its operator schemas")
            return True
        over = [f"{d} {v} > {max_opsets[d]}" for d, v in sorted(opsets.items()) if d in max_opsets and v > max_opsets[d]]
        unknown = [d for d in sorted(opsets) if d not in max_opsets]
        if over or unknown:
            detail = "; ".join(over + [f"domain {d} unknown" for d in unknown])
            return self.add("support", "opset", "fail", f"{detail} (onnxruntime {ort.__version__}); upgrade onnxruntime or re-export at a lower opset")
        self.add("runtime", "opset", "pass", ", ".join(f"{d} {v}" for d, v in sorted(opsets.items())))
        return True

    # 5
    def _support(self, ex: ExtractedBundle) -> None:
        ops, opsets = self.ops, self.opsets
        kernels = _ort_kernels()
        if kernels:
            eps = set(self.cfg.providers) | {"CPUExecutionProvider"}
            missing = []
            for key in ops:
                if key in _NO_KERNEL:
                    continue
                domain, _ = key.split(":", 1)
                v = opsets.get(domain, 1)
                if not any(p in eps and lo <= v <= hi for p, lo, hi in kernels.get(key, ())):
                    missing.append(f"{key}@{v}")
            self.add("support", "onnxruntime kernels", "fail" if missing else "pass",
                     f"no kernel for {', '.join(missing)}" if missing else f"{len(ops)} operator types have kernels")
        if isinstance(self.profile, str):
            from ..intake.support import check_support

            rep = check_support(str(ex.path("model_int8.onnx")), self.profile)
            kinds = sorted({f"{(i.domain + '::') if i.domain else ''}{i.op_type} ({i.kind})" for i in rep.issues})
            self.add("support", f"target {Path(self.profile).stem}", "fail" if rep.issues else "pass",
                     f"{len(rep.issues)} node(s) the target cannot run: {', '.join(kinds[:6])}{', ...' if len(kinds) > 6 else ''}; see 'quantkit support'"
                     if rep.issues else f"all {rep.nodes_checked} nodes supported ({rep.source})")
        elif self.profile is not None:
            problems = self.profile.problems(ops, opsets)
            self.add("support", f"profile {self.profile.name}", "fail" if problems else "pass",
                     "; ".join(problems) + "; the target runtime is missing operators" if problems else f"all {len(ops)} operator types supported")

    # 6-7
    def _golden(self, ex: ExtractedBundle) -> str | None:
        man = ex.manifest
        model = man.get("model") or {}
        in_meta, outs = model.get("input") or {}, model.get("outputs") or []
        samples = (man.get("golden") or {}).get("samples") or []
        tol = man.get("tolerance") or {}
        steps = self.cfg.tolerance_steps or float(tol.get("steps", 1.0))
        ts = _json_member(ex, "thresholds.json") or {}
        adapter, adapter_note = None, "no adapter named in thresholds.json"
        try:
            adapter = make_task_adapter(ts, "values")
            if adapter is None and ts.get("adapter"):
                adapter_note = "quantkit.thresholds.adapters unavailable; tensor-level comparison only"
        except QuantkitError as e:
            adapter_note = f"adapter unavailable ({e})"
        runner = OrtRunner(ex.path("model_int8.onnx"), providers=self.cfg.providers, name="model_int8.onnx")
        try:
            runner.activate()
        except ModelError as e:
            self.add("runtime", "session", "fail", str(e))
            return None
        first_fail = None
        try:
            for s in progress(samples, total=len(samples), desc="golden inputs"):
                sid = str(s.get("id"))
                x = _load_npy(ex, s.get("input"))
                if x is None or x.dtype != np.float32 or list(x.shape) != list(in_meta.get("shape", x.shape)):
                    self.add("output", sid, "fail", f"golden input {s.get('input')} is not float32 {in_meta.get('shape')}")
                    first_fail = first_fail or sid
                    continue
                got = runner.infer({in_meta.get("name", runner.input_names[0]): x})
                for k, o in enumerate(outs):
                    name = o["name"]
                    golden = _load_npy(ex, (s.get("int8") or [None] * len(outs))[k])
                    atol = steps * o["scale"] if o.get("scale") else float(o.get("atol", tol.get("fallback_atol", 0.0)))
                    if not self._compare_output(sid, name, got.get(name), golden, atol, o.get("tolerance_source", "")):
                        first_fail = first_fail or sid
                if adapter is not None and s.get("decision_int8") is not None:
                    diff = _decision_diff(s["decision_int8"], decision_json(adapter.decide(got)), self.cfg)
                    if not self.add("decision", sid, "fail" if diff else "pass", diff or f"{adapter!r}: same decision as golden"):
                        first_fail = first_fail or sid
                elif adapter is None:
                    self.add("decision", sid, "skip", adapter_note)
        finally:
            runner.deactivate()
        return first_fail

    def _compare_output(self, sid: str, name: str, got: Any, golden: np.ndarray | None, atol: float, source: str) -> bool:
        row = f"{sid} {name}"
        if got is None or golden is None:
            return self.add("output", row, "fail", "output missing from the model or the bundle")
        got = np.asarray(got)
        if got.shape != golden.shape:
            return self.add("output", row, "fail", f"shape {list(got.shape)} != golden {list(golden.shape)}")
        diff = float(np.max(np.abs(got.astype(np.float64) - golden.astype(np.float64)))) if got.size else 0.0
        if not np.isfinite(diff) or diff > atol * (1 + 1e-6) + 1e-12:
            return self.add("output", row, "fail", f"max abs diff {diff:.4g} > {atol:.4g} ({source})")
        return self.add("output", row, "pass", f"max abs diff {diff:.4g} <= {atol:.4g}")

    # 8
    def _localize(self, ex: ExtractedBundle, sid: str) -> None:
        import onnx

        man = ex.manifest
        acts = man.get("activations") or []
        sample = next((s for s in (man.get("golden") or {}).get("samples", []) if str(s.get("id")) == sid), None)
        if not acts or sample is None or not sample.get("activations"):
            self.add("layer", sid, "skip", "the bundle holds no golden activations")
            return
        steps = self.cfg.tolerance_steps or float((man.get("tolerance") or {}).get("steps", 1.0))
        max_elements = int((man.get("tolerance") or {}).get("activation_max_elements", 0))
        model = onnx.load(str(ex.path("model_int8.onnx")))
        produced = {o for n in model.graph.node for o in n.output}
        x = _load_npy(ex, sample.get("input"))
        if x is None:
            self.add("layer", sid, "skip", "golden input cannot be read")
            return
        in_name = (man.get("model") or {}).get("input", {}).get("name", "x")
        order = sorted(range(len(acts)), key=lambda j: (acts[j].get("topo_index", 0), j))
        for start in range(0, len(order), _ACT_CHUNK):
            chunk = order[start:start + _ACT_CHUNK]
            names = [_int8_name(acts[j]) for j in chunk if _int8_name(acts[j]) in produced]
            got: dict[str, np.ndarray] = {}
            if names:
                with OrtRunner(with_outputs(model, names).SerializeToString(), providers=self.cfg.providers, name="model_int8.onnx (layer-wise)") as r:
                    got = r.infer({in_name: x}, names)
            for j in chunk:
                a = acts[j]
                if _int8_name(a) not in got:
                    self._diverged(sid, a, float("inf"), 0.0, 0.0, "is not produced by model_int8.onnx (a different model?)")
                    return
                ref = _load_npy(ex, sample["activations"][j]) if sample["activations"][j] else None
                base = (sample.get("activation_baseline") or [None] * len(acts))[j]
                if ref is None or base is None:
                    continue
                flat = np.asarray(got[_int8_name(a)], dtype=np.float32).reshape(-1)
                idx = subsample_indices(flat.size, max_elements)
                if flat.size != int(np.prod(a.get("shape") or [flat.size])) or idx.size != ref.size:
                    self._diverged(sid, a, float("inf"), base, 0.0, f"has {flat.size} elements, golden shape {a.get('shape')}")
                    return
                err = float(np.max(np.abs(flat[idx].astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
                atol = steps * a["scale"] if a.get("scale") else float(a.get("atol", 0.0))
                if not np.isfinite(err) or err > (base + atol) * (1 + 1e-6) + 1e-12:
                    self._diverged(sid, a, err, base, atol, "")
                    return
        self.add("layer", sid, "warn", f"none of {len(acts)} recorded activations diverges; the difference arises after them or in the golden outputs")

    def _diverged(self, sid: str, a: Mapping[str, Any], err: float, base: float, atol: float, why: str) -> None:
        self.divergence = LayerDivergence(sid, a["name"], int(a.get("topo_index", -1)), err, base, atol)
        detail = f"first diverging tensor {a['name']!r} (FP32 node #{a.get('topo_index')})"
        detail += f" {why}" if why else f": max|int8-fp32| {err:.4g} > baseline {base:.4g} + {atol:.4g}"
        self.add("layer", sid, "fail", detail)


# -- helpers ---------------------------------------------------------------------------------------

def _int8_name(act: Mapping[str, Any]) -> str:
    """Where the INT8 model carries activation ``act`` (its DequantizeLinear output; see build)."""
    return str(act.get("int8_tensor") or act["name"])


def _json_member(ex: ExtractedBundle, name: str) -> dict[str, Any] | None:
    try:
        data = json.loads(ex.path(name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _load_npy(ex: ExtractedBundle, name: Any) -> np.ndarray | None:
    """A member array via ``np.load(allow_pickle=False)``; ``None`` when absent or not a plain .npy."""
    if not isinstance(name, str) or name not in ex.manifest["members"]:
        return None
    try:
        return np.load(ex.path(name), allow_pickle=False)
    except (OSError, ValueError):
        return None


def _ort_max_opsets() -> dict[str, int]:
    """``{domain: highest since_version}`` over onnxruntime's registered operator schemas."""
    try:
        from onnxruntime.capi import _pybind_state as C

        schemas = C.get_all_operator_schema()
    except (ImportError, AttributeError, RuntimeError):
        return {}
    out: dict[str, int] = {}
    for s in schemas:
        d = s.domain or "ai.onnx"
        out[d] = max(out.get(d, 0), int(s.since_version))
    return out


def _ort_kernels() -> dict[str, list[tuple[str, int, int]]]:
    """``{"domain:op": [(provider, first_opset, last_opset)]}`` of this onnxruntime build's kernels."""
    try:
        from onnxruntime.capi import _pybind_state as C

        defs = C.get_all_opkernel_def()
    except (ImportError, AttributeError, RuntimeError):
        return {}
    out: dict[str, list[tuple[str, int, int]]] = {}
    for k in defs:
        lo, hi = k.version_range
        out.setdefault(f"{k.domain or 'ai.onnx'}:{k.op_name}", []).append((k.provider, int(lo), int(hi)))
    return out


def _decision_diff(golden: Any, got: Any, cfg: VerifyConfig, path: str = "decision") -> str | None:
    """First difference between two decision JSONs, or ``None``; lengths exact, numbers within tolerance."""
    if isinstance(golden, dict) and isinstance(got, dict):
        if path == "decision" and isinstance(golden.get("scores"), list) and isinstance(got.get("scores"), list) \
                and len(golden["scores"]) != len(got["scores"]):
            return f"{len(got['scores'])} detections, golden has {len(golden['scores'])}"
        for k in sorted(set(golden) | set(got)):
            if k not in golden or k not in got:
                return f"{path}.{k}: present in only one decision"
            d = _decision_diff(golden[k], got[k], cfg, f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(golden, list) and isinstance(got, list):
        if len(golden) != len(got):
            return f"{path}: {len(got)} items, golden has {len(golden)}"
        for i, (a, b) in enumerate(zip(golden, got)):
            d = _decision_diff(a, b, cfg, f"{path}[{i}]")
            if d:
                return d
        return None
    num = (int, float)
    if isinstance(golden, num) and isinstance(got, num) and not isinstance(golden, bool) and not isinstance(got, bool):
        tol = cfg.score_atol if "score" in path else cfg.decision_atol
        return None if abs(float(golden) - float(got)) <= tol else f"{path}: {got} vs golden {golden} (tolerance {tol})"
    return None if golden == got else f"{path}: {got!r} vs golden {golden!r}"

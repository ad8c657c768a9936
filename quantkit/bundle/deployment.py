"""The main job's ``verify`` stage: a deployed bundle on its target runtime, and its agreement with FP32 per site set.

The main job builds one bundle per target runtime (``params.yaml: targets``) and verifies each on its own runtime
(``quantkit verify --runtime R --out``); by hand, one bundle may be verified on several. For each runtime named
(``--runtime``, else ``params.yaml: verify.runtimes``) that is installed:

1. the bundle is verified on it (:func:`quantkit.bundle.verify.verify_bundle`: golden outputs and decisions,
   precision, latency);
2. on each site set (the first ``max_images`` images), the bundle's INT8 model runs on that runtime and the FP32
   intake model on ONNX Runtime; the task adapter's decisions (at the bundle's thresholds for INT8, at the FP32
   thresholds for FP32, :func:`quantkit.bundle.decisions.decide`) are compared by the task's own agreement counts,
   pooled over the set into its decision metric (:func:`quantkit.bundle.decisions.pooled`).

The result is one artifact, :class:`quantkit.artifacts.verification.DeploymentVerification`
(``work/models/<model>/targets/<runtime>/verify.json`` in the main job), that the shift report reads. Latency is printed, not stored: it depends on the
machine (``quantkit measure`` keeps it beside the report).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from .._io import sha256_file
from ..config import Config
from ..errors import ConfigError, InputFileError
from ..progress import progress
from ..runtimes import available_runtimes, make_runtime, resolve_runtime_names
from .archive import safe_extract
from ..artifacts.verification import DeploymentVerification, RuntimeResult, SiteAgreement
from .decisions import agreement, decide, pooled
from .target import runtime_options
from .typed import ThresholdSet
from .verify import NUMERIC_KINDS, VerifyConfig, resolve_bundle, run_deployable, verify_bundle
from .._io import scratch_dir


@dataclasses.dataclass(frozen=True)
class DeploymentVerifyConfig(Config):
    """``params.yaml: verify``. runtimes: the target runtimes (registry names); a runtime that is not installed is
    recorded as such; a name no plug-in is registered for (a typo) is refused. max_images: site images per set (0 = all). threads: intra-op threads of every runtime (0 = the
    runtime's default), so latencies compare. fail: exit non-zero when a check fails (false: the report shows it)."""

    PARAMS_OPTIONAL: ClassVar[bool] = True

    runtimes: tuple[str, ...] = ("onnxruntime", "openvino")
    max_images: int = 16
    threads: int = 0
    fail: bool = False

    def validate(self) -> None:
        if not self.runtimes:
            raise ConfigError("verify.runtimes: name at least one runtime (onnxruntime, openvino)")
        if self.max_images < 0 or self.threads < 0:
            raise ConfigError("verify.max_images / verify.threads: must be >= 0")


def verify_deployment(bundle: str | Path, fp32: str | Path, site_sets: Sequence[str | Path], config: DeploymentVerifyConfig | None = None) -> DeploymentVerification:
    """Verify ``bundle`` on each target runtime and measure its decision agreement with FP32 per site set.

    Args:
        bundle: the bundle (archive, ``bundle.json`` or ``dist/``).
        fp32: the intake folder (``model.onnx``): the FP32 reference.
        site_sets: set folders (``images/`` + ``manifest.json``).

    Returns:
        :class:`DeploymentVerification`, with the bundle's :class:`~quantkit.artifacts.verification.Verdict` on these
        runtimes: the verdict of ``verify_bundle(bundle, VerifyConfig(runtimes=..., threads=...))``, so the stage and
        ``quantkit verify BUNDLE --runtime R`` answer alike (a runtime that is registered but not installed here is
        recorded as not installed and makes the bundle not deployable here, as it does there).

    Raises:
        InputFileError: the bundle, the FP32 model or a set is missing. ConfigError: bad config, or a runtime name no
            plug-in is registered for (the message names the registered ones), before anything runs.
    """
    from ..calibset import CalibrationSet

    cfg = config or DeploymentVerifyConfig()
    path = resolve_bundle(bundle)
    fp32_model = Path(fp32) / "model.onnx"
    if not fp32_model.is_file():
        raise InputFileError(f"{fp32_model}: FP32 intake model not found; run 'quantkit intake' first")
    names = resolve_runtime_names(cfg.runtimes)
    sets = [CalibrationSet.load(s, verify=True) for s in site_sets]
    installed = set(available_runtimes())
    report = verify_bundle(path, VerifyConfig(runtimes=names, threads=cfg.threads))  # a runtime not installed fails there, as in 'quantkit verify'
    results = []
    with scratch_dir("deploy") as tmp:
        ex = safe_extract(path, Path(tmp) / "b")
        from ..note import ExportNote

        note = ExportNote.load(ex.path("export_note.json"))
        ts = ThresholdSet.load(ex.path("thresholds.json"))
        digest = sha256_file(fp32_model)
        if ts.binding.model_digest != digest:
            raise InputFileError(f"{fp32_model}: not the FP32 model this bundle was quantized from (its thresholds are bound to "
                                 f"{ts.binding.model_digest[:12]}, this file is {digest[:12]}); pass the model's own intake folder as --fp32")
        fp32_dec = {s.name: _decisions("onnxruntime", fp32_model, s, note.preprocessing, ts, cfg, fp32=True) for s in sets}
        for name in names:
            if name not in installed:
                results.append(RuntimeResult(name, False))
                continue
            run = next(r for r in report.runs if r.runtime == name)
            fails = tuple(f"[{c.kind}] {c.name}: {c.detail}" for c in report.failures if c.runtime in ("", name))[:3]
            if any(c.kind in ("output", "decision", "layer") and c.runtime == name for c in report.failures):
                fails += likely_causes(report, name)
            sites = tuple(_site(s, ts, fp32_dec[s.name], _decisions(name, ex.path("model_int8.onnx"), s, note.preprocessing, ts, cfg)) for s in sets)
            info = run.info
            div = run.divergence
            results.append(RuntimeResult(name, True, info.version if info else "", info.label if info else "", dict(info.options) if info else {},
                                         not fails, fails, run.precision.integer_share if run.precision else None, sites,
                                         _deployable(report, run), f"{div.tensor!r} ({div.op_type} {div.node!r})" if div else ""))
        man = ex.manifest
    return DeploymentVerification(path.name, sha256_file(path), str(man["record"]["fingerprint"]), str(man["thresholds"]["fingerprint"]),
                                  ts.adapter, tuple(results), report.verdict)


def _deployable(report: Any, run: Any) -> bool:
    """The bundle may be deployed on ``run``'s runtime: it ran, nothing but comparisons with the simulation failed there
    (or for the bundle itself), and its decisions agree with FP32 within the bound interval
    (:attr:`quantkit.bundle.verify.VerificationReport.deployable`, per runtime)."""
    if run.info is None or any(c.kind not in NUMERIC_KINDS for c in report.failures if c.runtime in ("", run.runtime)):
        return False
    return run_deployable(run)


def likely_causes(report: Any, runtime: str) -> tuple[str, ...]:
    """``[likely cause]`` lines for a runtime whose outputs or decisions failed: the model's risky patterns that this
    runtime gets wrong on this machine (the ``patterns`` check, :func:`quantkit.bundle.target.verify_on`), at most two."""
    parts = [p for c in report.checks if c.kind == "patterns" and c.runtime == runtime for p in c.detail.split(" | ") if " here on " in p]
    return (f"[likely cause] {' | '.join(parts[:2])}",) if parts else ()


def _decisions(runtime: str, model: Path, cset: Any, pre: Any, ts: Any, cfg: DeploymentVerifyConfig, fp32: bool = False) -> list[dict[str, Any]]:
    from ..calibset import CalibrationSetReader

    opts = runtime_options(runtime, cfg.threads)
    reader = CalibrationSetReader(cset, pre, batch_size=1)
    n = len(reader) if cfg.max_images == 0 else min(cfg.max_images, len(reader))
    reader.set_range(0, n)
    out = []
    from ..modelio import load_model

    proto = load_model(model, load_external_data=False)
    with make_runtime(runtime, model, name=f"{model.name} on {runtime}", **opts) as rt:
        for _, x in progress(reader.iter_batches(), total=n, desc=f"{cset.name} on {runtime}"):
            out.append(decide(ts, rt.infer({pre.input_name: x}), fp32=fp32, model=proto))
    return out


def _site(cset: Any, ts: Any, fp32: list[dict[str, Any]], int8: list[dict[str, Any]]) -> SiteAgreement:
    a = pooled(ts, list(zip(fp32, int8)))
    identical = sum(agreement(ts, g, t).value == 1.0 for g, t in zip(fp32, int8))
    return SiteAgreement(cset.name, cset.set_id, len(fp32), a.metric, round(a.value, 6), a.golden, a.target, identical)

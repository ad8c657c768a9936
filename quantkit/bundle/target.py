"""Verification on one runtime: support, session, golden outputs and decisions, precision, latency, localisation.

For each runtime asked for (``quantkit verify --runtime onnxruntime|openvino|all``), with the model at its
deployment settings (ORT level ``all``; OpenVINO f32, pinned and recorded):

* ``runtime``: installed, version vs the build machine's (a difference warns unless ``require_same_runtime``);
* ``support``: the runtime loads the model and runs it (:func:`quantkit.intake.support.check_support`);
* ``output``: per golden input and output, elements more than ``tolerance.steps`` quantization steps off the golden
  INT8 value (the QDQ simulation) must be at most ``tolerance.max_mismatch`` of the output;
* ``decision``: the task adapter's decisions on the target's outputs match the golden ones
  (:func:`quantkit.bundle.decisions.agreement`, the task's decision metric >= ``decision_min_agreement``);
* ``precision``: share of Conv/MatMul MACs the runtime executed in int8/uint8, by its own account;
* ``latency``: median wall time per golden input (machine-dependent; informational);
* ``patterns``: the risky patterns the model uses (:mod:`quantkit.patterns`), each run on this runtime on this
  machine, where the golden outputs are checked: one the runtime gets wrong here is a warning naming the nodes, the
  CPU and the fix (e.g. ``saturation_u8s8`` on x86 without VNNI); so is one it got wrong on the building machine;
* ``layer`` (after an output or decision failure): :func:`quantkit.runtimes.localize.localize` names the first node
  whose output codes differ on their own (each node fed ONNX Runtime's QDQ simulation of its inputs, run here on the
  bundle's model and checked against the golden activations first), else, cutting the model, the first tensor
  where the runtime diverges from the golden activations; then confirms it on the unmodified model's outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..progress import progress
from ..runtimes import RuntimeInfo, deployment_options, make_runtime, runtime_class
from ..tasks import make_adapter
from ..runtimes.base import first_line
from ..runtimes.divergence import compare_tensor
from ..runtimes.localize import Divergence, RuntimeReference, StoredReference, bound_target, localize
from ..runtimes.precision import PrecisionSummary, integer_share
from .archive import ExtractedBundle
from .decisions import agreement, decide, pooled
from .manifest import BundleManifest, subsample_indices

log = logging.getLogger(__name__)
SUPPORT_TARGET = {"onnxruntime": "cpu", "openvino": "openvino"}


@dataclasses.dataclass(frozen=True)
class RuntimeRun:
    """What verification measured on one runtime. ``latency_ms``: median per golden input (this machine only)."""

    runtime: str
    info: RuntimeInfo | None
    latency_ms: float | None
    precision: PrecisionSummary | None
    divergence: Divergence | None
    ok: bool
    decisions_agree: int = 0
    decisions: int = 0
    fp32_agreement: float | None = None
    """The task's decision metric of this runtime's decisions vs FP32's golden decisions, pooled over the golden inputs."""
    fp32_bound: float | None = None
    """The least ``fp32_agreement`` that still agrees with FP32 within the bound interval (:func:`fp32_bound`)."""

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "info": self.info.to_dict() if self.info else None, "latency_ms": self.latency_ms,
                "latency_note": "machine-dependent", "precision": self.precision.to_dict() if self.precision else None,
                "divergence": self.divergence.to_dict() if self.divergence else None, "ok": self.ok,
                "decisions_agree": self.decisions_agree, "decisions": self.decisions,
                "fp32_agreement": self.fp32_agreement, "fp32_bound": self.fp32_bound}


def runtime_options(runtime: str, threads: int = 0) -> dict[str, Any]:
    """The deployment options of ``runtime`` (:func:`quantkit.runtimes.deployment_options`)."""
    return deployment_options(runtime, threads)


def load_npy(ex: ExtractedBundle, name: str | None) -> np.ndarray | None:
    """A member array via ``np.load(allow_pickle=False)``; ``None`` when absent or not a plain .npy."""
    if not isinstance(name, str) or name not in ex.manifest["members"]:
        return None
    try:
        return np.load(ex.path(name), allow_pickle=False)
    except (OSError, ValueError):
        return None


def verify_on(runtime: str, ex: ExtractedBundle, man: BundleManifest, model: Any, thresholds: Any, cfg: Any,
              add: Callable[[str, str, str, str], bool]) -> RuntimeRun:
    """Every per-runtime check (module docstring) as rows through ``add(kind, name, status, detail)``."""
    from ..intake.support import check_support

    opts = runtime_options(runtime, cfg.threads)
    if runtime == "onnxruntime":
        opts["providers"] = tuple(cfg.providers)
    cls = runtime_class(runtime)
    if not cls.is_available():
        add("runtime", runtime, "fail", f"not installed here; pip install {'quantkit[openvino]' if runtime == 'openvino' else runtime}")
        return RuntimeRun(runtime, None, None, None, None, False)
    built = man.versions.get(runtime)
    here = cls.version()
    same = built == here
    add("runtime", runtime, "pass" if same else ("fail" if cfg.require_same_runtime else "warn"),
        f"{here} (same as the build)" if same else f"{here} here, bundle built with {built or 'it not installed'}; golden comparison decides")
    if runtime in SUPPORT_TARGET and (runtime != "onnxruntime" or tuple(cfg.providers) == ("CPUExecutionProvider",)):
        rep = check_support(model, SUPPORT_TARGET[runtime])
        kinds = sorted({f"{(i.domain + '::') if i.domain else ''}{i.op_type} ({i.kind})" for i in rep.issues})
        if not add("support", runtime, "fail" if rep.issues else "pass",
                   f"{len(rep.issues)} node(s) refused: {'; '.join(i.detail for i in rep.issues[:2])} [{', '.join(kinds[:4])}]" if rep.issues
                   else f"loads and runs all {rep.nodes_checked} nodes ({rep.source})"):
            return RuntimeRun(runtime, rep.runtime, None, None, None, False)
    rt = make_runtime(runtime, ex.path("model_int8.onnx"), name="model_int8.onnx", **opts)
    try:
        rt.activate()
    except ModelError as e:
        add("runtime", f"{runtime} session", "fail", str(e))
        return RuntimeRun(runtime, None, None, None, None, False)
    try:
        return _golden(runtime, rt, opts, ex, man, model, thresholds, cfg, add)
    finally:
        rt.deactivate()


def _golden(runtime: str, rt: Any, opts: dict[str, Any], ex: ExtractedBundle, man: BundleManifest, model: Any, thresholds: Any, cfg: Any,
            add: Callable[[str, str, str, str], bool]) -> RuntimeRun:
    info = rt.info()
    tol = man.tolerance
    steps = cfg.tolerance_steps or tol.steps
    max_mismatch = tol.max_mismatch if cfg.max_mismatch is None else cfg.max_mismatch
    first_fail: tuple[str, dict[str, np.ndarray]] | None = None
    first_feed: dict[str, np.ndarray] | None = None
    times: list[float] = []
    agree = n_dec = 0
    vs_fp32: list[tuple[Any, Any]] = []  # (FP32's golden decision, this runtime's)
    sim_fp32: list[tuple[Any, Any]] = []  # (FP32's golden decision, the simulation's)
    for s in progress(man.samples, total=len(man.samples), desc=f"golden inputs on {runtime}"):
        x = load_npy(ex, s.input)
        if x is None or x.dtype != np.float32 or tuple(x.shape) != man.input_shape:
            add("output", s.id, "fail", f"golden input {s.input} is not float32 {list(man.input_shape)}")
            continue
        feed = {man.input_name: x}
        first_feed = first_feed or feed
        got = rt.infer(feed)
        for _ in range(max(cfg.latency_repeats, 1)):
            rt.infer(feed)
            times.append(rt.inference_times[-1])
        ok = True
        for o in man.outputs:
            golden = load_npy(ex, s.int8[o.index] if o.index < len(s.int8) else None)
            atol = steps * o.scale if o.scale else o.atol
            ok &= _output_row(add, s.id, o.name, got.get(o.name), golden, atol, max_mismatch, o.tolerance_source if not cfg.tolerance_steps else f"{steps:g} step(s)")
        if thresholds is not None and s.decision_int8 is not None:
            mine = decide(thresholds, got, model=model)
            if s.decision_fp32 is not None:
                vs_fp32.append((s.decision_fp32, mine))
                sim_fp32.append((s.decision_fp32, s.decision_int8))
            a = agreement(thresholds, s.decision_int8, mine)
            n_dec += 1
            agree += a.value >= cfg.decision_min_agreement
            ok &= add("decision", s.id, "pass" if a.value >= cfg.decision_min_agreement else "fail", str(a))
        elif thresholds is None:
            add("decision", s.id, "skip", "no task adapter in the bundle; tensor-level comparison only")
        if not ok and first_fail is None:
            first_fail = (s.id, feed)
    prec = _precision(rt, first_feed, model, add)
    latency = 1000 * statistics.median(times) if times else None
    if latency is not None:
        add("latency", runtime, "pass", f"{latency:.1f} ms median over {len(times)} runs of the golden inputs (this machine; {info.label})")
    _pattern_warnings(runtime, man, add, tuple(getattr(cfg, "providers", ("CPUExecutionProvider",))))
    div = None
    if first_fail is not None and cfg.localize:
        div = _localize(runtime, opts, ex, man, model, first_fail, steps, max_mismatch, add)
    fp32_agree = pooled(thresholds, vs_fp32).value if vs_fp32 else None
    return RuntimeRun(runtime, info, latency, prec, div, first_fail is None, agree, n_dec, fp32_agree,
                      fp32_bound(thresholds, pooled(thresholds, sim_fp32).value) if vs_fp32 else None)


def fp32_bound(thresholds: Any, simulated: float) -> float:
    """The least agreement with FP32's golden decisions that is still "within the bound interval": the lower end of the
    interval ``bind`` measured for the chosen thresholds on the reference set (its operating point's primary agreement
    metric, a bootstrap/Clopper-Pearson interval, :mod:`quantkit.thresholds.stats`) when that metric is the task's
    decision metric; else the QDQ simulation's own agreement with FP32 on the golden inputs (the runtime must do at
    least as well as what was bound)."""
    op = getattr(thresholds, "operating_point", None)
    est = op.primary() if op is not None else None
    metric = make_adapter(thresholds.adapter, thresholds.adapter_options()).decision_metric().name
    if est is not None and op.primary_metric == metric:
        return min(float(est.ci[0]), simulated)
    return simulated


def _output_row(add: Callable[..., bool], sid: str, name: str, got: Any, golden: np.ndarray | None, atol: float, max_mismatch: float, source: str) -> bool:
    row = f"{sid} {name}"
    if got is None or golden is None:
        return add("output", row, "fail", "output missing from the model or the bundle")
    got = np.asarray(got)
    if got.shape != golden.shape:
        return add("output", row, "fail", f"shape {list(got.shape)} != golden {list(golden.shape)}")
    c = compare_tensor(name, got, golden, None, atol, max_mismatch)
    detail = f"{100 * c.mismatch:.2f}% of elements beyond {atol:.4g} ({source}; allowed {100 * max_mismatch:g}%), worst {c.max_steps * atol:.4g}"
    return add("output", row, "fail" if c.diverged else "pass", detail)


def _precision(rt: Any, feed: dict[str, np.ndarray] | None, model: Any, add: Callable[..., bool]) -> PrecisionSummary | None:
    nodes = rt.node_precisions(feed) if feed is not None else ()
    if not nodes:
        add("precision", rt.NAME, "skip", "this runtime does not report per-node precision" if feed is not None else "no golden input ran")
        return None
    summary = integer_share(model, nodes)
    add("precision", rt.NAME, "pass", str(summary))
    return summary


PATTERN_FIXES = {
    "saturation": "this CPU has no VNNI: the runtime sums pairs of 8-bit products in 16 bits (x86 vpmaddubsw), which "
                  "saturate; quantize with reduce_range: true (7-bit weights) or weight_type: uint8 (U8U8), or deploy on a CPU "
                  "with VNNI (ONNX Runtime docs, 'Quantize ONNX models': U8S8 saturation on AVX2/AVX-512 without VNNI; "
                  "int8 activations take the same path and do not help)",
    "resize": "the runtime computes this Resize differently (coordinates, or interpolated values on or near half a step rounded "
              "the other way); run 'quantkit compare' on the model before trusting thresholds downstream of it",
    "concat_scales": "the runtime requantizes the Concat inputs to one scale; give them one range (quantize's "
                     "tensor_overrides) or keep the Concat in float (fallback)",
    "elementwise": "the runtime's integer kernel rounds differently from the QDQ simulation; keep the node in float "
                   "(quantize's nodes_to_exclude, or fallback) if its output decides",
    "activation_16bit": "the runtime computes 16-bit QDQ in lower precision; use 8-bit activations there or keep the "
                        "nodes in float",
}
"""Fix hint per pattern family (:attr:`quantkit.patterns.Pattern.family`) shown with a pattern the target gets wrong."""


def _pattern_warnings(runtime: str, man: BundleManifest, add: Callable[..., bool], providers: Sequence[str] = ("CPUExecutionProvider",)) -> None:
    """Run each pattern the model uses on ``runtime`` here (tiny models, milliseconds each; CPU only, as the check
    runs on the CPU provider) and warn for those it gets wrong here or got wrong on the building machine. A
    pattern that cannot run here (an older onnx's reference evaluator, ...) is a ``skip`` row, never an exception."""
    from ..patterns import PatternMatrix, get_pattern, run_pattern, runtime_variants
    from ..runtimes.precision import cpu_isa, cpu_label

    used = [(p, [str(n) for n in nodes or ()]) for p, nodes in (man.patterns.get("used") or []) if isinstance(p, str)]
    if not used:
        return
    cpu_only = runtime != "onnxruntime" or tuple(providers) == ("CPUExecutionProvider",)
    variant = next((v for v in runtime_variants([runtime]) if v.deployment), None) if cpu_only else None
    built = PatternMatrix.from_dict(man.patterns["matrix"]) if man.patterns.get("matrix") else None
    isa = cpu_isa()
    machine = cpu_label(isa)
    no_vnni_x86 = isa["machine"] in ("x86_64", "AMD64") and not {"avx512_vnni", "avx_vnni"} & set(isa["flags"])
    lines = []  # (share of outputs off here, text); the worst first
    for name, nodes in used:
        try:
            pattern = get_pattern(name)
        except KeyError:  # a pattern this quantkit does not know (a newer bundle): only the build matrix speaks
            pattern = None
        at = ", ".join(nodes[:3]) + (f" (+{len(nodes) - 3})" if len(nodes) > 3 else "")
        r = None
        if pattern is not None and variant is not None:
            try:
                r = run_pattern(pattern, variant)
            except Exception as e:  # noqa: BLE001 - a check that cannot run here is a row, not a traceback
                add("patterns", runtime, "skip", f"{name} not run here: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
                continue
        if r is not None and r.verdict != "agree":
            fix = PATTERN_FIXES.get(pattern.family, "") if r.verdict == "disagree" else ""
            if pattern.family == "saturation" and not no_vnni_x86:
                fix = ""  # the VNNI explanation does not apply on this CPU: say what the runtime did, nothing more
            lines.append((r.mismatch if r.mismatch is not None else 1.0,
                          f"{name} {r.verdict} here on {machine}: {r.detail or 'refused'}; used at {at}" + (f"; {fix}" if fix else "")))
            continue
        b = built.verdict(name, runtime) if built is not None else None
        if b is not None and b.verdict != "agree":
            lines.append((-1.0, f"{name} ({b.verdict} on the building machine, {b.variant}; " +
                          ("agrees here" if r is not None else "not run here") + f") at {at}"))
    if lines:
        add("patterns", runtime, "warn", " | ".join(t for _, t in sorted(lines, key=lambda x: -x[0])[:4]))


def _localize(runtime: str, opts: dict[str, Any], ex: ExtractedBundle, man: BundleManifest, model: Any, failing: tuple[str, dict[str, np.ndarray]],
              steps: float, max_mismatch: float, add: Callable[..., bool]) -> Divergence | None:
    sid, feed = failing
    sample = next(s for s in man.samples if s.id == sid)
    if not man.activations or not sample.activations:
        add("layer", f"{runtime} {sid}", "skip", "the bundle holds no golden INT8 activations (schema 1 or activation_max_elements 0)")
        return None
    stored: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    tolerance: dict[str, float] = {}
    for a, member in zip(man.activations, sample.activations):
        ref = load_npy(ex, member)
        if ref is not None:
            stored[a.name] = (ref, subsample_indices(int(np.prod(a.shape)) if a.shape else ref.size, man.tolerance.activation_max_elements))
            tolerance[a.name] = steps * a.scale if a.scale else a.atol
    for o in man.outputs:
        ref = load_npy(ex, sample.int8[o.index])
        if ref is not None:
            stored[o.name] = (ref, None)
            tolerance[o.name] = steps * o.scale if o.scale else o.atol
    cands = [a.name for a in man.activations] + [o.name for o in man.outputs]
    qsteps = {a.name: a.scale for a in man.activations if a.scale} | {o.name: o.scale for o in man.outputs if o.scale}
    simulation = RuntimeReference(model, feed, "onnxruntime", graph_optimization_level="disable")  # whole tensors for the nodes on their own
    try:
        div = localize(model, feed, bound_target(runtime, feed, **opts), StoredReference(stored), tolerance=tolerance, max_mismatch=max_mismatch,
                       candidates=cands, steps=qsteps, simulation=simulation)
    except Exception as e:  # noqa: BLE001 - a diagnosis only: a runtime that cannot compile a cut model (OpenVINO: "Port for tensor
        # name ... was not found" on a YOLOv8 Split) must not turn the verification it explains into an internal error
        log.info("localization on %s failed", runtime, exc_info=True)
        add("layer", f"{runtime} {sid}", "skip", f"could not cut the model on {runtime} to name the first diverging tensor: {first_line(e)}")
        return None
    if div is None:
        add("layer", f"{runtime} {sid}", "warn", "no recorded activation or output diverges when cut; the difference arises only in the full compiled model")
    else:
        add("layer", f"{runtime} {sid}", "fail", div.describe())
    return div

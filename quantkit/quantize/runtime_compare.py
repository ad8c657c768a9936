"""Three-way comparison: FP32, the QDQ simulation, and each runtime's deployment execution of the same INT8 file.

* **FP32**: the FP32 model on ONNX Runtime with optimizations disabled.
* **QDQ simulation**: the quantized model on ONNX Runtime with optimizations disabled: every
  QuantizeLinear/DequantizeLinear runs as written, float kernels in between. This is what ONNX's operator
  definitions say the model computes, and what the per-tensor table of :func:`quantkit.quantize.compare.compare_layers`
  measures.
* **Each runtime at its deployment settings** (:func:`quantkit.patterns.runtime_variants`: ORT at level ``all``,
  OpenVINO at f32, any registered plug-in): fused integer kernels.

Per graph output (always, every output): SQNR and cosine against FP32, and against the simulation
``max_steps`` (worst element in quantization steps of the output) and ``mismatch`` (share of elements more than
``tolerance_steps`` steps off). Intermediate tensors are observed on FP32 and the simulation only: exposing them
on a fusing runtime changes what it compiles. Where a runtime's outputs part from the simulation (``mismatch >
max_mismatch``), :func:`quantkit.runtimes.localize.localize` names, on the input where they part most, the first
node whose output codes differ from the simulation's when fed the simulation's inputs (more than
:data:`quantkit.runtimes.divergence.MAX_CODE_SHARE` of them, even by one code, or beyond the tolerance), before
the consumer that amplifies them; else, cutting the graph, the first tensor where they part.

The output's quantization step is the scale of the DequantizeLinear producing it; for a float output (no
DequantizeLinear) one 8-bit step of the simulation's output range, ``(max - min) / 255``, is used.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..progress import progress
from ..runtimes import RuntimeInfo, make_runtime
from ..runtimes.localize import Divergence, RuntimeReference, bound_target, dq_scales, localize

log = logging.getLogger(__name__)
SIMULATION = "onnxruntime[disable]"


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    """One graph output on one runtime variant. SQNR in dB (``inf`` when identical), ``cosine`` against FP32;
    ``max_steps`` / ``mismatch`` against the QDQ simulation (module docstring); ``n`` elements over all inputs."""

    output: str
    runtime: str
    sqnr_vs_fp32_db: float
    cosine_vs_fp32: float
    sqnr_vs_simulation_db: float
    max_steps: float
    mismatch: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class RuntimeComparison:
    """Result of :func:`compare_runtimes`: per output and variant rows, the runtimes, and where each runtime
    parts from the simulation (``None``: it does not part, or localisation was not asked for)."""

    outputs: tuple[OutputComparison, ...]
    runtimes: tuple[RuntimeInfo, ...]
    parts: tuple[tuple[str, Divergence | None], ...]
    tolerance_steps: float
    max_mismatch: float
    images: int
    refused: tuple[tuple[str, str], ...] = ()

    def table(self) -> Any:
        """The output rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([o.to_dict() for o in self.outputs], columns=[f.name for f in dataclasses.fields(OutputComparison)])

    def to_dict(self) -> dict[str, Any]:
        return {"images": self.images, "tolerance_steps": self.tolerance_steps, "max_mismatch": self.max_mismatch,
                "runtimes": [r.to_dict() for r in self.runtimes], "outputs": [o.to_dict() for o in self.outputs],
                "parts": {k: (d.to_dict() if d else None) for k, d in self.parts}, "refused": dict(self.refused)}


class _Acc:
    """Streaming sums for SQNR / cosine (x = reference, y = candidate) and step mismatch counts."""

    def __init__(self) -> None:
        self.xx = self.yy = self.xy = self.ee = 0.0
        self.worst = 0.0
        self.bad = self.n = 0
        self.shape_differs = False

    def add(self, x: np.ndarray, y: np.ndarray, step: float | None = None) -> float:
        x64, y64 = np.asarray(x, np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
        if x64.shape != y64.shape:  # data-dependent shape (NonZero -> GatherND ...): no element-wise statistics
            self.shape_differs = True
            self.bad += max(x64.size, y64.size)
            self.n += max(x64.size, y64.size)
            self.worst = float("inf")
            return 1.0
        e = x64 - y64
        self.xx += float(x64 @ x64)
        self.yy += float(y64 @ y64)
        self.xy += float(x64 @ y64)
        self.ee += float(e @ e)
        self.n += x64.size
        if step:
            steps = np.abs(e) / step
            self.worst = max(self.worst, float(steps.max()) if steps.size else 0.0)
            bad = int(np.count_nonzero(steps > 1 + 1e-3))
            self.bad += bad
            return bad / max(x64.size, 1)
        return 0.0

    def sqnr(self) -> float:
        if self.shape_differs:
            return float("nan")
        return float(10 * np.log10(self.xx / self.ee)) if self.ee > 0 else float("inf")

    def cosine(self) -> float:
        if self.shape_differs:
            return float("nan")
        return float(self.xy / np.sqrt(self.xx * self.yy)) if self.xx > 0 and self.yy > 0 else float("nan")


def _variants(runtimes: Sequence[str] | None) -> list[tuple[str, dict[str, Any]]]:
    from ..patterns import runtime_variants

    return [(v.runtime, dict(v.options)) for v in runtime_variants(runtimes) if v.deployment]


def compare_runtimes(fp32_model: Any, quant_model: Any, batches: Iterable[dict[str, np.ndarray]], *, runtimes: Sequence[str] | None = None,
                     tolerance_steps: float = 1.0, max_mismatch: float = 0.01, localize_parts: bool = True,
                     total: int | None = None) -> RuntimeComparison:
    """Compare FP32, the QDQ simulation and every installed runtime on ``batches`` (feed dicts), per graph output.

    Args:
        fp32_model / quant_model: ``onnx.ModelProto`` (the FP32 intake model and its quantized model).
        runtimes: runtime names (default every installed one) run at their deployment settings.
        tolerance_steps / max_mismatch: when a runtime's output "parts" from the simulation (module docstring).
        localize_parts: name the first node where a parting runtime diverges (module docstring).

    Raises:
        ModelError: ONNX Runtime refuses the FP32 model or the simulation. A deployment runtime that refuses the INT8
            model is listed in :attr:`RuntimeComparison.refused` with its reason, and the others are compared.
    """
    outputs = [o.name for o in quant_model.graph.output]
    steps = dq_scales(quant_model)
    variants = _variants(runtimes)
    fp = make_runtime("onnxruntime", fp32_model, graph_optimization_level="disable", name="fp32")
    sim = make_runtime("onnxruntime", quant_model, graph_optimization_level="disable", name="simulation")
    rts = [make_runtime(name, quant_model, name=f"{name} (deployment)", **opts) for name, opts in variants]
    vs_fp: dict[tuple[str, str], _Acc] = {}
    vs_sim: dict[tuple[str, str], _Acc] = {}
    worst_feed: dict[str, tuple[float, dict[str, np.ndarray]]] = {}
    infos: list[RuntimeInfo] = []
    images = 0
    refused: list[tuple[str, str]] = []
    with fp, sim:
        kept = []
        for (name, opts), r in zip(variants, rts):
            try:
                r.activate()
                kept.append(((name, opts), r))
            except ModelError as e:  # the runtime refuses the INT8 model: recorded, the others still compared
                refused.append((name, str(e)))
        variants, rts = [v for v, _ in kept], [r for _, r in kept]
        try:
            infos = [sim.info()] + [r.info() for r in rts]
            fp_out = [o for o in fp.output_names if o in outputs]
            for feed in progress(batches, total=total, desc="compare runtimes"):
                images += 1
                f = fp.infer(feed, fp_out)
                s = sim.infer(feed, outputs)
                results = [(infos[0].label, s)] + [(info.label, r.infer(feed, outputs)) for info, r in zip(infos[1:], rts)]
                for label, got in results:
                    part = 0.0
                    for o in outputs:
                        step = steps.get(o) or (float(np.ptp(s[o])) / 255 if np.asarray(s[o]).size else None)
                        if o in f:
                            vs_fp.setdefault((o, label), _Acc()).add(f[o], got[o])
                        part = max(part, vs_sim.setdefault((o, label), _Acc()).add(s[o], got[o], step))
                    if label != SIMULATION and part > worst_feed.get(label, (-1.0, {}))[0]:
                        worst_feed[label] = (part, dict(feed))
        finally:
            for r in rts:
                r.deactivate()
    rows = tuple(OutputComparison(o, label, vs_fp[(o, label)].sqnr() if (o, label) in vs_fp else float("nan"),
                                  vs_fp[(o, label)].cosine() if (o, label) in vs_fp else float("nan"), a.sqnr(), a.worst,
                                  a.bad / a.n if a.n else 0.0, a.n)
                 for (o, label), a in vs_sim.items())
    parts = []
    for info, (_, opts) in zip(infos[1:], variants):
        parted = any(r.mismatch > max_mismatch for r in rows if r.runtime == info.label)
        div = None
        if parted and localize_parts and info.label in worst_feed:
            feed = worst_feed[info.label][1]
            tol = {t: tolerance_steps * s for t, s in steps.items()}
            div = localize(quant_model, feed, bound_target(info.name, feed, **opts),
                           RuntimeReference(quant_model, feed, graph_optimization_level="disable"), tolerance=tol, max_mismatch=max_mismatch)
        parts.append((info.label, div))
    return RuntimeComparison(rows, tuple(infos), tuple(parts), tolerance_steps, max_mismatch, images, tuple(refused))

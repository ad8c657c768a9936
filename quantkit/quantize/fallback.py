"""Automatic precision fallback: raise the fewest activations to 16 bits (or keep them in float) until a
task metric against FP32 reaches a target on a reference set.

Procedure (greedy, calibration runs once):

1. quantize with ``config`` (:func:`quantkit.quantize.quantize`);
2. rank activations by *local* sensitivity on the reference images: the SQNR (dB) a tensor loses
   relative to its producer's quantized inputs (:func:`compare_layers`; accumulated error alone would
   rank every late layer first);
3. re-quantize from the same calibrated ranges (no new calibration) with the next ``step`` tensors
   promoted (``strategy="int16"``: ``TensorQuantOverrides`` ``quant_type: uint16``; ``"float"``: the
   producing and consuming nodes excluded), until ``metric >= target`` or ``max_kept`` tensors (when the
   target is not reached, the round with the highest metric is kept);
4. report what was kept, the metric at each step and the latency cost (ORT CPU, all optimizations).

The default metric is the issue's: IoU of the binarized maps (``output > thresh``) INT8 vs FP32, pooled
over the reference images (a DB text detector's probability map; any single-output model with values
in [0, 1] works).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._io import atomic_output_dir, atomic_write_json
from ..errors import ConfigError
from ..progress import progress
from ..runner import OrtRunner
from .config import StaticQuantConfig, TensorOverride
from .engine import MODEL_FILE, RECORD_FILE, _static, load_intake, quantize

log = logging.getLogger(__name__)

Metric = Callable[[list[np.ndarray], list[np.ndarray]], float]


def pixel_iou(thresh: float = 0.3) -> Metric:
    """Pooled IoU of ``fp32 > thresh`` and ``int8 > thresh`` over all images (1.0 when both are empty)."""

    def metric(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
        inter = sum(int(np.count_nonzero((a > thresh) & (b > thresh))) for a, b in zip(ref, got))
        union = sum(int(np.count_nonzero((a > thresh) | (b > thresh))) for a, b in zip(ref, got))
        return inter / union if union else 1.0

    return metric


@dataclasses.dataclass(frozen=True)
class FallbackResult:
    """Outcome of :func:`precision_fallback`. Latencies are mean milliseconds per image."""

    kept: tuple[str, ...]
    strategy: str
    target: float
    metric_before: float
    metric_after: float
    met: bool
    fp32_ms: float
    int8_ms_before: float
    int8_ms_after: float
    steps: tuple[dict[str, Any], ...]
    record_fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["kept"], d["steps"] = list(self.kept), list(self.steps)
        return d

    def __repr__(self) -> str:
        return (f"FallbackResult(kept={len(self.kept)}, metric {self.metric_before:.3f} -> {self.metric_after:.3f}, "
                f"target {self.target}, met={self.met})")


def _score(metric: Metric, ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    m = float(metric(ref, got))
    if not np.isfinite(m):
        raise ConfigError(f"fallback metric returned {m}; make it finite for every output (e.g. guard divisions by zero)")
    return m


def _run(model: Path | bytes, batches: list[np.ndarray], input_name: str) -> tuple[list[np.ndarray], float]:
    with OrtRunner(model, graph_optimization_level="all") as r:
        outs = [next(iter(r.infer({input_name: x}).values())) for x in batches]
        times = r.inference_times[1:] or r.inference_times
    return outs, 1000 * float(np.mean(times))


def rank_sensitivity(model: Any, table: Any) -> list[str]:
    """Activation names ordered by local SQNR loss (most sensitive first); ``table`` from compare_layers."""
    # SQNR is +inf where a tensor is reproduced exactly (and may be NaN for an all-zero tensor): inf - inf
    # would give NaN losses, and NaN sort keys leave the order undefined. Non-finite values are clipped to
    # [-200, 200] dB first (far beyond any real 8/16-bit SQNR), so an exact tensor ranks last.
    sq = {t: float(np.nan_to_num(s, nan=200.0, posinf=200.0, neginf=-200.0)) for t, s in zip(table["tensor"], table["sqnr_db"])}
    producer_inputs = {o: list(n.input) for n in model.graph.node for o in n.output}
    loss = {}
    for t, s in sq.items():
        ins = [sq[i] for i in producer_inputs.get(t, []) if i in sq]
        loss[t] = (min(ins) if ins else 100.0) - s
    return sorted(loss, key=lambda t: (-loss[t], t))


def precision_fallback(
    intake: str | Path,
    config: StaticQuantConfig,
    *,
    calibration_set: Any,
    reference_set: Any,
    out: str | Path,
    target: float = 0.95,
    metric: Metric | None = None,
    strategy: Literal["int16", "float"] = "int16",
    step: int = 4,
    max_kept: int = 48,
    max_reference_images: int | None = None,
) -> FallbackResult:
    """Quantize, then promote the most sensitive activations until ``metric >= target``.

    Args:
        intake / config / calibration_set: as :func:`quantkit.quantize.quantize`.
        reference_set: set folder or CalibrationSet the metric is measured on (FP32 outputs are the reference).
        out: gets ``model_int8.onnx``, ``record.json`` (the final config) and ``fallback.json``.
        metric: ``f(fp32_outputs, int8_outputs) -> float`` (higher is better); default :func:`pixel_iou` (0.3).
        strategy: ``"int16"`` (uint16 activations for the kept tensors) or ``"float"`` (their nodes excluded).
        step: tensors promoted per round; max_kept: stop after this many.

    Returns:
        :class:`FallbackResult` (also written to ``out/fallback.json``); ``out`` holds the first round that
        meets ``target`` or, when none does, the round with the highest metric (fewest tensors on ties),
        and ``kept`` / ``metric_after`` describe that round (``steps`` lists every round).

    Raises:
        ConfigError: ``step < 1``, ``max_kept < 0``, an unknown ``strategy``, or a non-finite metric.
    """
    from ..calibset import CalibrationSet, CalibrationSetReader
    from .compare import compare_layers

    if step < 1:
        raise ConfigError(f"fallback step: {step} must be >= 1 (tensors promoted per round)")
    if max_kept < 0:
        raise ConfigError(f"fallback max_kept: {max_kept} must be >= 0")
    if strategy not in ("int16", "float"):
        raise ConfigError(f"fallback strategy: {strategy!r} must be 'int16' or 'float'")
    metric = metric or pixel_iou(0.3)
    model_path, model, note = load_intake(intake)
    rset = reference_set if not isinstance(reference_set, (str, Path)) else CalibrationSet.load(reference_set)
    reader = CalibrationSetReader(rset, note.preprocessing)
    if max_reference_images:
        reader.set_range(0, max_reference_images)
    batches = [x for _, x in reader.iter_batches()]
    name = note.preprocessing.input_name
    ref, fp32_ms = _run(model_path, batches, name)
    consumers: dict[str, list[str]] = {}
    producer: dict[str, str] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
        for o in n.output:
            producer[o] = n.name
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="quantkit-fallback-") as work_s:
        work = Path(work_s)
        base = quantize(intake, config, out=work / "base", calibration_set=calibration_set)
        got, ms0 = _run(work / "base" / MODEL_FILE, batches, name)
        m0 = _score(metric, ref, got)
        steps: list[dict[str, Any]] = [{"kept": 0, "metric": m0, "int8_ms": ms0}]
        # (metric, ms, config, record, folder, kept): the first round that meets the target (fewest tensors
        # kept) or, when none does, the round with the highest metric (ties: fewer tensors kept)
        best: tuple[float, float, StaticQuantConfig, Any, Path, list[str]] = (m0, ms0, config, base, work / "base", [])
        if m0 < target:
            table = compare_layers(model_path, work / "base" / MODEL_FILE, base, batches)
            order = rank_sensitivity(model, table)
            limit = min(max_kept, len(order))
            rounds = range(0, limit, step)
            for i in progress(rounds, total=len(rounds), desc="fallback", unit="round"):
                kept: list[str] = order[: min(i + step, limit)]  # never more than max_kept
                if strategy == "int16":
                    ov = dict(config.tensor_overrides)
                    # keep a user's range shaping (rmin/rmax, symmetric ...) for the tensor, only widen its type
                    ov.update({t: ov[t].replace(quant_type="uint16") if t in ov else TensorOverride(quant_type="uint16") for t in kept})
                    cfg = config.replace(tensor_overrides={k: v.to_dict() for k, v in ov.items()})
                else:
                    nodes = set(config.nodes_to_exclude)
                    for t in kept:
                        nodes.update(consumers.get(t, []))
                        if t in producer:
                            nodes.add(producer[t])
                    cfg = config.replace(nodes_to_exclude=sorted(nodes))
                d = work / f"round{i}"
                d.mkdir()
                rec = _static(model, model_path, note, cfg, None, d, None, base, replay_scales=False)
                got, ms = _run(d / MODEL_FILE, batches, name)
                m = _score(metric, ref, got)
                steps.append({"kept": len(kept), "metric": m, "int8_ms": ms})
                log.info("fallback: %d tensors kept -> metric %.4f (%.1f ms)", len(kept), m, ms)
                if m > best[0] or m >= target:
                    best = (m, ms, cfg, rec, d, kept)
                if m >= target:
                    break
        m, ms, cfg, rec, folder, kept = best
        result = FallbackResult(kept=tuple(kept), strategy=strategy, target=target, metric_before=m0,
                                metric_after=m, met=m >= target, fp32_ms=fp32_ms, int8_ms_before=ms0, int8_ms_after=ms,
                                steps=tuple(steps), record_fingerprint=rec.fingerprint)
        with atomic_output_dir(out) as tmp:
            (tmp / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes())
            rec.save(tmp / RECORD_FILE)
            atomic_write_json(tmp / "fallback.json", result.to_dict())
    return result


__all__ = ["FallbackResult", "pixel_iou", "precision_fallback", "rank_sensitivity"]

"""Automatic precision fallback: keep the fewest parts of the graph in float (or raise their activations to
16 bits) until a task metric against FP32 reaches a target on every reference set.

Procedure (calibration runs once; every candidate re-quantizes from the same calibrated ranges):

1. quantize with ``config`` (:func:`quantkit.quantize.quantize`) and score it: the task metric (default
   :func:`pixel_iou`) of its outputs against FP32's, per reference set; the *worst* set is compared with
   the target, so a model that is good by day and bad at night does not pass on the average;
2. search (``search=``):

   * ``"bisect"`` (default): a task-metric search over the nodes in graph (topological) order, after
     Polygraphy's ``debug precision`` bisection (NVIDIA TensorRT tools): first the shortest prefix
     ``nodes[:k]`` whose promotion meets the target (binary search on ``k``, about ``log2(nodes)`` rounds),
     then the latest start ``j`` such that ``nodes[j:k]`` still meets it (another ``log2(k)``), then ``prune``
     rounds that each try handing one block of the window back to 8 bits. It assumes
     that promoting more of the graph does not lower the metric (not exactly true: each round is measured,
     and the answer is always a measured candidate that met the target, but it may not be the smallest).
     On the PP-OCR demo the error starts in the first layers, where the image is large
     (bench/bench_fallback.py; README, Benchmarks).
   * ``"sqnr"``: rank activations by *local* sensitivity (the SQNR, dB, a tensor loses relative to its
     producer's quantized inputs, :func:`compare_layers`) and promote the next ``step`` each round. Cheap
     to rank, but local SQNR does not predict the task metric well (on the demo it picks early ReLUs whose
     promotion changes the pixel IoU by < 0.001).

   Promotion: ``strategy="float"`` excludes the kept nodes from quantization (``nodes_to_exclude``);
   ``"int16"`` gives their activations ``TensorQuantOverrides`` ``quant_type: uint16`` (measured on the demo
   with ORT 1.32 on x86: every activation in 16 bits runs about 2.2x slower than FP32, so "float" is the
   faster promotion there);
3. write the first candidate that meets the target (or, when none does, the one with the highest metric)
   and report what was kept, the metric per reference set before and after, each round, and the latency
   cost (ORT CPU, all graph optimizations, mean per image over the reference images).
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
    """Pooled IoU of ``fp32 > thresh`` and ``int8 > thresh`` over all images (1.0 when both are empty).

    Raises:
        ConfigError: ``thresh`` outside (0, 1) (the output is a probability map; 2 or NaN would compare two
            empty masks and report a perfect 1.0).
    """
    if not 0.0 < thresh < 1.0:
        raise ConfigError(f"pixel_iou thresh: {thresh} must lie in (0, 1) (a probability map's threshold, e.g. 0.3)")

    def metric(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
        inter = sum(int(np.count_nonzero((a > thresh) & (b > thresh))) for a, b in zip(ref, got))
        union = sum(int(np.count_nonzero((a > thresh) | (b > thresh))) for a, b in zip(ref, got))
        return inter / union if union else 1.0

    metric.description = f"pixel_iou(thresh={thresh})"  # type: ignore[attr-defined]
    return metric


@dataclasses.dataclass(frozen=True)
class FallbackResult:
    """Outcome of :func:`precision_fallback`. Metrics are the worst over the reference sets (``*_per_set``
    gives each); latencies are mean milliseconds per image over all reference images.

    ``kept``: what is promoted in the written model: node names for ``search="bisect"`` (excluded, or their
    activations in 16 bits), activation names for ``"sqnr"``; ``steps``: every candidate measured, in order
    (``kept``: how many units, ``metric``, ``per_set``, ``int8_ms``; bisect rounds also ``window``: ``[j, k]``
    into the graph's node order, prune rounds ``pruned``: the block tried without promotion).
    """

    kept: tuple[str, ...]
    strategy: str
    search: str
    target: float
    metric_before: float
    metric_after: float
    met: bool
    fp32_ms: float
    int8_ms_before: float
    int8_ms_after: float
    steps: tuple[dict[str, Any], ...]
    record_fingerprint: str
    metric_before_per_set: dict[str, float] = dataclasses.field(default_factory=dict)
    metric_after_per_set: dict[str, float] = dataclasses.field(default_factory=dict)
    window: tuple[int, int] | None = None
    metric_name: str = ""
    reference_sets: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["kept"], d["steps"] = list(self.kept), list(self.steps)
        d["window"] = None if self.window is None else list(self.window)
        d["reference_sets"] = list(self.reference_sets)
        return d

    def __repr__(self) -> str:
        return (f"FallbackResult({self.search}/{self.strategy}: kept={len(self.kept)}, metric {self.metric_before:.3f} -> "
                f"{self.metric_after:.3f}, target {self.target}, met={self.met})")


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


def _reference_sets(reference_set: Any) -> list[Any]:
    from ..calibset import CalibrationSet

    items = list(reference_set) if isinstance(reference_set, (list, tuple)) else [reference_set]
    if not items:
        raise ConfigError("fallback reference_set: give at least one reference set folder")
    sets = [CalibrationSet.load(r) if isinstance(r, (str, Path)) else r for r in items]
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise ConfigError(f"fallback reference sets: names must differ to report them apart (got {', '.join(names)})")
    return sets


def precision_fallback(
    intake: str | Path,
    config: StaticQuantConfig,
    *,
    calibration_set: Any,
    reference_set: Any,
    out: str | Path,
    target: float = 0.95,
    metric: Metric | None = None,
    strategy: Literal["int16", "float"] = "float",
    search: Literal["bisect", "sqnr"] = "bisect",
    step: int = 4,
    max_kept: int | None = None,
    max_reference_images: int | None = None,
    prune: int = 8,
) -> FallbackResult:
    """Quantize, then promote the fewest nodes / activations until ``metric >= target`` on every reference set.

    Args:
        intake / config / calibration_set: as :func:`quantkit.quantize.quantize`.
        reference_set: a set folder or CalibrationSet, or a list of them (e.g. day and night): the metric is
            computed per set against FP32's outputs and the worst set counts.
        out: gets ``model_int8.onnx``, ``record.json`` (the final config) and ``fallback.json``.
        metric: ``f(fp32_outputs, int8_outputs) -> float`` over one set's images (lists of the first output,
            one array per image; higher is better); default :func:`pixel_iou` (0.3).
        strategy: ``"float"`` (kept nodes excluded from quantization) or ``"int16"`` (uint16 activations).
        search: ``"bisect"`` (task-metric bisection over the node order) or ``"sqnr"`` (local-SQNR ranking,
            ``step`` activations a round); see the module docstring.
        max_kept: most units kept (nodes for bisect, activations for sqnr); default: no limit for bisect, 48
            for sqnr.
        max_reference_images: use the first N images of each reference set.
        prune: bisect only: after the window is found, split it into this many blocks and return each block
            to 8 bits when the target still holds without it (one round per block; 0: keep the window whole).

    Returns:
        :class:`FallbackResult` (also written to ``out/fallback.json``); ``out`` holds the first candidate that
        meets ``target`` (bisect: the final window after pruning) or, when none does, the one with the highest metric
        (fewest units on ties).

    Raises:
        ConfigError: ``step < 1``, ``max_kept < 0``, an unknown ``strategy`` or ``search``, no reference set,
            two reference sets with one name, or a non-finite metric.
    """
    from ..calibset import CalibrationSetReader
    from .compare import compare_layers

    if step < 1:
        raise ConfigError(f"fallback step: {step} must be >= 1 (tensors promoted per round)")
    if max_kept is not None and max_kept < 0:
        raise ConfigError(f"fallback max_kept: {max_kept} must be >= 0")
    if strategy not in ("int16", "float"):
        raise ConfigError(f"fallback strategy: {strategy!r} must be 'float' or 'int16'")
    if search not in ("bisect", "sqnr"):
        raise ConfigError(f"fallback search: {search!r} must be 'bisect' or 'sqnr'")
    if prune < 0:
        raise ConfigError(f"fallback prune: {prune} must be >= 0 (blocks tried; 0 keeps the window whole)")
    if max_reference_images is not None and max_reference_images < 1:
        raise ConfigError(f"fallback max_reference_images: {max_reference_images} must be >= 1 (None: every image)")
    metric = metric or pixel_iou(0.3)
    model_path, model, note = load_intake(intake)
    name = note.preprocessing.input_name
    groups: dict[str, list[np.ndarray]] = {}
    ref_info = []
    for rset in _reference_sets(reference_set):
        reader = CalibrationSetReader(rset, note.preprocessing)
        if max_reference_images:
            reader.set_range(0, min(max_reference_images, len(reader)))
        groups[rset.name] = [x for _, x in reader.iter_batches()]
        ref_info.append({"name": rset.name, "path": str(rset.root), "set_id": rset.set_id, "images": len(groups[rset.name])})
    batches = [x for g in groups.values() for x in g]
    bounds = np.cumsum([0] + [len(g) for g in groups.values()])
    ref, fp32_ms = _run(model_path, batches, name)

    def score(got: list[np.ndarray]) -> tuple[float, dict[str, float]]:
        per = {g: _score(metric, ref[bounds[i]:bounds[i + 1]], got[bounds[i]:bounds[i + 1]]) for i, g in enumerate(groups)}
        return min(per.values()), per

    consumers: dict[str, list[str]] = {}
    producer: dict[str, str] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
        for o in n.output:
            producer[o] = n.name
    initializers = {i.name for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.name]
    out = Path(out)

    def promote(kept: list[str], units: str) -> StaticQuantConfig:
        """Config with ``kept`` promoted; ``units``: "nodes" (bisect) or "tensors" (sqnr)."""
        if strategy == "int16":
            if units == "nodes":
                by_name = {n.name: n for n in nodes}
                tensors = sorted({t for k in kept for t in (*by_name[k].input, *by_name[k].output) if t and t not in initializers})
            else:
                tensors = kept
            ov = dict(config.tensor_overrides)
            # keep a user's range shaping (rmin/rmax, symmetric ...) for the tensor, only widen its type
            ov.update({t: ov[t].replace(quant_type="uint16") if t in ov else TensorOverride(quant_type="uint16") for t in tensors})
            return config.replace(tensor_overrides={k: v.to_dict() for k, v in ov.items()})
        excl = set(config.nodes_to_exclude)
        if units == "nodes":
            excl.update(kept)
        else:
            for t in kept:
                excl.update(consumers.get(t, []))
                if t in producer:
                    excl.add(producer[t])
        return config.replace(nodes_to_exclude=sorted(excl))

    with tempfile.TemporaryDirectory(prefix="quantkit-fallback-") as work_s:
        work = Path(work_s)
        base = quantize(intake, config, out=work / "base", calibration_set=calibration_set)
        got, ms0 = _run(work / "base" / MODEL_FILE, batches, name)
        m0, per0 = score(got)
        steps: list[dict[str, Any]] = [{"kept": 0, "metric": m0, "per_set": per0, "int8_ms": ms0}]
        # candidates measured: kept -> (metric, per_set, ms, record, folder); the record holds the config
        seen: dict[tuple[str, ...], tuple[float, dict[str, float], float, Any, Path]] = {(): (m0, per0, ms0, base, work / "base")}

        def measure(kept: list[str], units: str, extra: dict[str, Any]) -> float:
            key = tuple(kept)
            if key not in seen:
                cfg = promote(kept, units)
                d = work / f"round{len(seen)}"
                d.mkdir()
                rec = _static(model, model_path, note, cfg, None, d, None, base, replay_scales=False)
                g, ms = _run(d / MODEL_FILE, batches, name)
                m, per = score(g)
                seen[key] = (m, per, ms, rec, d)
                steps.append({"kept": len(kept), **extra, "metric": m, "per_set": per, "int8_ms": ms})
                log.info("fallback: %d %s kept %s -> metric %.4f (%s; %.1f ms)", len(kept), units, extra or "", m,
                         ", ".join(f"{k} {v:.4f}" for k, v in per.items()), ms)
            return seen[key][0]

        chosen: tuple[str, ...] | None = None
        window: tuple[int, int] | None = None
        if m0 < target and search == "bisect":
            names = [n.name for n in nodes]
            limit = len(names) if max_kept is None else min(max_kept, len(names))
            rounds = 2 * max(1, int(np.ceil(np.log2(max(limit, 2))))) + 1 + prune
            bar = progress(range(rounds), total=rounds, desc="fallback bisect", unit="round")
            it = iter(bar)

            def tick() -> None:
                next(it, None)

            tick()
            if measure(names[:limit], "nodes", {"window": [0, limit]}) >= target:
                lo, hi = 0, limit  # nodes[:lo] fails (lo = 0: the base model), nodes[:hi] meets the target
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    tick()
                    if measure(names[:mid], "nodes", {"window": [0, mid]}) >= target:
                        hi = mid
                    else:
                        lo = mid
                k = hi
                lo, hi = 0, k  # nodes[lo:k] meets the target, nodes[hi:k] (empty at hi = k) fails
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    tick()
                    if measure(names[mid:k], "nodes", {"window": [mid, k]}) >= target:
                        lo = mid
                    else:
                        hi = mid
                chosen, window = tuple(names[lo:k]), (lo, k)
                # prune: hand whole blocks of the window back to 8 bits while the target still holds
                kept_now = list(chosen)
                size = max(1, -(-len(kept_now) // prune)) if prune else 0
                for b0 in range(lo, k, size) if size else ():
                    block = set(names[b0:min(b0 + size, k)])
                    trial = [n for n in kept_now if n not in block]
                    if trial and len(trial) < len(kept_now):
                        tick()
                        if measure(trial, "nodes", {"window": [lo, k], "pruned": [b0, min(b0 + size, k)]}) >= target:
                            kept_now = trial
                chosen = tuple(kept_now)
            for _ in it:  # finish the bar
                pass
        elif m0 < target:
            table = compare_layers(model_path, work / "base" / MODEL_FILE, base, batches)
            order = rank_sensitivity(model, table)
            limit = min(48 if max_kept is None else max_kept, len(order))
            rounds_s = range(0, limit, step)
            for i in progress(rounds_s, total=len(rounds_s), desc="fallback", unit="round"):
                kept = order[: min(i + step, limit)]  # never more than max_kept
                if measure(kept, "tensors", {}) >= target:
                    chosen = tuple(kept)
                    break
        if chosen is None:  # target not met (or met by the base): the highest metric, fewest units on ties
            chosen = max(seen, key=lambda k: (seen[k][0], -len(k)))
        m, per, ms, rec, folder = seen[chosen]
        if window is None and search == "bisect" and chosen:
            names_idx = {n.name: i for i, n in enumerate(nodes)}
            window = (names_idx[chosen[0]], names_idx[chosen[-1]] + 1)
        result = FallbackResult(kept=chosen, strategy=strategy, search=search, target=target, metric_before=m0,
                                metric_after=m, met=m >= target, fp32_ms=fp32_ms, int8_ms_before=ms0, int8_ms_after=ms,
                                steps=tuple(steps), record_fingerprint=rec.fingerprint, metric_before_per_set=per0,
                                metric_after_per_set=per, window=window, reference_sets=tuple(ref_info),
                                metric_name=getattr(metric, "description", getattr(metric, "__name__", "custom")))
        with atomic_output_dir(out) as tmp:
            (tmp / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes())
            rec.save(tmp / RECORD_FILE)
            atomic_write_json(tmp / "fallback.json", result.to_dict())
    return result


__all__ = ["FallbackResult", "pixel_iou", "precision_fallback", "rank_sensitivity"]

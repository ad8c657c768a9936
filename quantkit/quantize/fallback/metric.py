"""Agreement metrics: how closely a quantized model's outputs follow FP32's over one reference set.

A :data:`Metric` takes the FP32 model's outputs and a candidate's outputs over the same images, one
``{output name: array}`` mapping per image (batch 1, as :meth:`quantkit.runner.Runner.infer` returns), and
returns one float, higher is better; the fallback computes it per reference set and compares the *worst*
set with its target.

A metric may also carry ``upper_bound(reference, candidate_prefix) -> float``: the highest value the
metric can still reach once the candidate's outputs for the first ``len(candidate_prefix)`` images are
known (the FP32 outputs of every image are). The fallback stops evaluating a candidate as soon as that
bound is below the target (:mod:`.candidates`). Metrics without it are evaluated on whole sets.

:func:`agreement_metric` is the one place that picks the metric for a task: it maps the ``thresholds``
params (the task adapter) to a metric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ConfigError, ModelError

Outputs = Mapping[str, np.ndarray]
Metric = Callable[[Sequence[Outputs], Sequence[Outputs]], float]


def _pick(outputs: Outputs, name: str) -> np.ndarray:
    if not outputs:
        raise ModelError("fallback metric: the model produced no outputs")
    if name:
        if name not in outputs:
            raise ModelError(f"fallback metric: output {name!r} not among {sorted(outputs)}; set thresholds.options.output")
        return np.asarray(outputs[name])
    return np.asarray(next(iter(outputs.values())))


def describe(metric: Metric) -> str:
    """The metric's ``description`` attribute, else its function name (as recorded in fallback.json)."""
    return str(getattr(metric, "description", getattr(metric, "__name__", "custom")))


def pixel_iou(thresh: float = 0.3, output: str = "") -> Metric:
    """Pooled IoU of ``fp32 > thresh`` and ``candidate > thresh`` over all images of a set: sum of
    per-image intersections / sum of unions, 1.0 when both masks are empty everywhere. ``output``: the
    output to read (``""``: the first). The map is a probability map (a DB text or segmentation head).

    ``upper_bound``: an image's intersection cannot exceed FP32's positive pixels ``f`` and its union
    cannot be smaller, so the best remaining case adds ``f`` to both sums: ``(I + F) / (U + F)`` with
    ``F`` the FP32 positives of the images not yet seen.

    Raises:
        ConfigError: ``thresh`` outside (0, 1) (2 or NaN would compare two empty masks: a perfect 1.0).
    """
    if not 0.0 < thresh < 1.0:
        raise ConfigError(f"pixel_iou thresh: {thresh} must lie in (0, 1) (a probability map's threshold, e.g. 0.3)")

    def counts(ref: Sequence[Outputs], got: Sequence[Outputs]) -> tuple[int, int]:
        inter = union = 0
        for r, g in zip(ref, got):
            a, b = _pick(r, output) > thresh, _pick(g, output) > thresh
            inter += int(np.count_nonzero(a & b))
            union += int(np.count_nonzero(a | b))
        return inter, union

    def metric(ref: Sequence[Outputs], got: Sequence[Outputs]) -> float:
        inter, union = counts(ref, got)
        return inter / union if union else 1.0

    def upper_bound(ref: Sequence[Outputs], got: Sequence[Outputs]) -> float:
        inter, union = counts(ref[: len(got)], got)
        rest = sum(int(np.count_nonzero(_pick(r, output) > thresh)) for r in ref[len(got):])
        return (inter + rest) / (union + rest) if union + rest else 1.0

    metric.description = f"pixel_iou(thresh={thresh})"  # type: ignore[attr-defined]
    metric.upper_bound = upper_bound  # type: ignore[attr-defined]
    return metric


def decision_f1(adapter: Any, min_iou: float = 0.5) -> Metric:
    """F1 of a candidate's decisions against FP32's (pooled matches over a set; greedy one-to-one matching
    at polygon IoU >= ``min_iou`` with equal labels, :func:`quantkit.thresholds.adapters.match_count`),
    both decided by the same ``adapter`` at its FP32 thresholds. For box detectors this is box F1 vs
    FP32; for classifiers (one item per image) it is the share of images whose kept top-1 label agrees.
    """
    from ...thresholds.adapters import f1, match_count

    def metric(ref: Sequence[Outputs], got: Sequence[Outputs]) -> float:
        tp = fp = fn = 0
        for r, g in zip(ref, got):
            a, b = adapter.decide(r), adapter.decide(g)
            m = match_count(b.polygons, a.polygons, pred_labels=b.labels, truth_labels=a.labels, min_iou=min_iou)
            tp, fp, fn = tp + m, fp + len(b) - m, fn + len(a) - m
        return f1(tp, fp, fn)

    metric.description = f"decision_f1({adapter.name}, iou>={min_iou})"  # type: ignore[attr-defined]
    return metric


def agreement_metric(thresholds: Any = None) -> Metric:
    """The fallback's metric for a task: THE place where a task adapter's primary agreement metric is chosen.

    Args:
        thresholds: a :class:`quantkit.thresholds.operating_point.ThresholdsConfig` (params ``thresholds``)
            or None (the demo's DB text detector defaults).

    Returns:
        an adapter's own ``primary_metric()`` when it has one; otherwise ``db_text`` ->
        :func:`pixel_iou` at the adapter's ``thresh`` on its output, any other adapter ->
        :func:`decision_f1` at its FP32 thresholds and the operating point's ``match_iou``.
    """
    if thresholds is None:
        return pixel_iou(0.3)
    adapter = thresholds.fp32_adapter()
    own = getattr(adapter, "primary_metric", None)
    if callable(own):
        return own()  # type: ignore[no-any-return]
    if adapter.name == "db_text":
        return pixel_iou(float(adapter.thresh), adapter.output)
    return decision_f1(adapter, thresholds.operating_point.match_iou)


__all__ = ["Metric", "Outputs", "agreement_metric", "decision_f1", "describe", "pixel_iou"]

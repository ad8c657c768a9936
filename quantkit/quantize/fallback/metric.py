"""Agreement metrics: how closely a quantized model's outputs follow FP32's over one reference set.

A :data:`Metric` takes the FP32 model's outputs and a candidate's outputs over the same images, one
``{output name: array}`` mapping per image (batch 1, as :meth:`quantkit.runner.Runner.infer` returns), and
returns one float, higher is better; the fallback computes it per reference set and compares the *worst*
set with its target.

A metric may also carry ``upper_bound(reference, candidate_prefix) -> float``: the highest value the
metric can still reach once the candidate's outputs for the first ``len(candidate_prefix)`` images are
known (the FP32 outputs of every image are). The fallback stops evaluating a candidate as soon as that
bound is below the target (:mod:`.candidates`). Metrics without it are evaluated on whole sets.

A metric may also carry ``counts(reference, candidate) -> RatioCounts``: the per-image numerators and
denominators it pools (every built-in metric is ``factor * sum(num) / sum(den)``). The held-out figure's
confidence interval resamples those images (:func:`quantkit.thresholds.stats.bootstrap_ratio`,
:mod:`.holdout`); a metric without ``counts`` gets its held-out value and no interval.

:func:`agreement_metric` is the one place that picks the metric for a task: it maps a task adapter
(:mod:`quantkit.tasks`, params ``models.<name>.task``) to its primary agreement metric.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ConfigError, ModelError

Outputs = Mapping[str, np.ndarray]
Metric = Callable[[Sequence[Outputs], Sequence[Outputs]], float]


@dataclasses.dataclass(frozen=True)
class RatioCounts:
    """A metric's per-image counts: its value is ``factor * sum(num) / sum(den)`` (``empty`` when ``den`` sums
    to 0); ``num``, ``den``: ``(N,)`` float64, one entry per image in set order."""

    num: np.ndarray
    den: np.ndarray
    factor: float = 1.0
    empty: float = 1.0

    @property
    def value(self) -> float:
        d = float(self.den.sum())
        return self.factor * float(self.num.sum()) / d if d > 0 else self.empty

    def __repr__(self) -> str:
        return f"RatioCounts(n={len(self.num)}, value={self.value:.4f})"


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

    def counts(ref: Sequence[Outputs], got: Sequence[Outputs]) -> RatioCounts:
        pairs = [(_pick(r, output) > thresh, _pick(g, output) > thresh) for r, g in zip(ref, got)]
        return RatioCounts(np.array([np.count_nonzero(a & b) for a, b in pairs], np.float64),
                           np.array([np.count_nonzero(a | b) for a, b in pairs], np.float64))

    def metric(ref: Sequence[Outputs], got: Sequence[Outputs]) -> float:
        return counts(ref, got).value

    def upper_bound(ref: Sequence[Outputs], got: Sequence[Outputs]) -> float:
        c = counts(ref[: len(got)], got)
        inter, union = float(c.num.sum()), float(c.den.sum())
        rest = sum(int(np.count_nonzero(_pick(r, output) > thresh)) for r in ref[len(got):])
        return (inter + rest) / (union + rest) if union + rest else 1.0

    metric.description = f"pixel_iou(thresh={thresh})"  # type: ignore[attr-defined]
    metric.upper_bound = upper_bound  # type: ignore[attr-defined]
    metric.counts = counts  # type: ignore[attr-defined]
    return metric


def task_metric(adapter: Any) -> Metric:
    """The task adapter's **primary** agreement metric (:meth:`quantkit.tasks.TaskAdapter.primary_metric`) of a
    candidate against FP32 over a set: both decided by ``adapter`` at its FP32 thresholds
    (:meth:`~quantkit.tasks.TaskAdapter.decide`), per-image counts from
    :meth:`~quantkit.tasks.TaskAdapter.agreement` summed over the set, then the metric's ratio (so the value is
    the one evaluate, bind and the report show: box F1 vs FP32 for ``box_detector``, top-1 agreement for a
    classifier, ...). No ``upper_bound``: a set is evaluated whole. ``counts``: the spec's ``num`` and ``den`` per image.
    """
    spec = adapter.primary_metric()

    def counts(ref: Sequence[Outputs], got: Sequence[Outputs]) -> RatioCounts:
        per = [adapter.agreement(adapter.decide(r), adapter.decide(g)) for r, g in zip(ref, got)]
        return RatioCounts(np.array([float(c.get(spec.num, 0.0)) for c in per], np.float64),
                           np.array([float(c.get(spec.den, 0.0)) for c in per], np.float64), float(spec.factor), float(spec.empty))

    def metric(ref: Sequence[Outputs], got: Sequence[Outputs]) -> float:
        c = counts(ref, got)
        return float(spec.value({spec.num: c.num.sum(), spec.den: c.den.sum()}))

    metric.description = f"{spec.name}({adapter.name})"  # type: ignore[attr-defined]
    metric.counts = counts  # type: ignore[attr-defined]
    return metric


def decision_f1(adapter: Any, min_iou: float | None = None) -> Metric:
    """Box / item F1 of a candidate's decisions against FP32's: :func:`task_metric` of ``adapter`` (its primary
    metric is its decision F1 vs FP32), with the adapter's ``match_iou`` replaced by ``min_iou`` when given."""
    if min_iou is not None and hasattr(adapter, "match_iou"):
        adapter = adapter.replace(match_iou=min_iou)
    return task_metric(adapter)


def agreement_metric(task: Any = None) -> Metric:
    """The fallback's metric for a task: THE place that maps a task adapter to its primary agreement metric.

    Args:
        task: a :class:`quantkit.tasks.TaskAdapter` (``quantkit.tasks.TaskConfig(...).make()``, params ``task``
            or ``models.<name>.task``), or None (the demo's DB text detector at thresh 0.3).

    Returns:
        the adapter's own ``fallback_metric()`` when it defines one; for a primary metric ``pixel_iou`` on an
        adapter with ``thresh`` (``db_text``), :func:`pixel_iou` on the raw map (the same pooled ratio as the
        adapter's counts, without decoding polygons, and with an early-stop bound); otherwise
        :func:`task_metric` (e.g. box F1 vs FP32 for ``box_detector``).
    """
    if task is None:
        return pixel_iou(0.3)
    own = getattr(task, "fallback_metric", None)
    if callable(own):
        return own()  # type: ignore[no-any-return]
    if task.primary_metric().name == "pixel_iou" and hasattr(task, "thresh"):
        return pixel_iou(float(task.thresh), task.output)
    return task_metric(task)


__all__ = ["Metric", "Outputs", "RatioCounts", "agreement_metric", "decision_f1", "describe", "pixel_iou", "task_metric"]

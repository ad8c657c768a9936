"""Decisions near the line: how many of FP32's decisions lie within a few integer steps of a bound threshold.

A threshold bound to a quantized tensor decides on integer codes (:mod:`.integer_domain`). Neighbouring codes lie one
``scale`` apart in the tensor's float units (ONNX ``DequantizeLinear``: ``(q - zero_point) * scale``), so a decision
whose value lies within one ``scale`` of the threshold flips when its code moves by one: a small change of the image,
or of the calibration, is enough. The share of such decisions is label-free; counted on the reference set at bind
time it is the threshold set's baseline (:attr:`quantkit.artifacts.ThresholdSet.near_line`), counted on a site set by
evaluate it says whether INT8's decisions are becoming fragile before agreement with FP32 falls.

Which values are compared, and with which threshold, is the task adapter's answer
(:meth:`quantkit.tasks.TaskAdapter.near_line_values`, the task's ``PRIMARY`` threshold); this module only counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from ..artifacts.evaluation import NearLine
from ..artifacts.thresholds import NEAR_LINE_STEPS, IntegerThreshold, NearLineCounts
from ..tasks import TaskAdapter
from ..tasks.base import Outputs


class NearLineCounter:
    """Accumulates :class:`NearLineCounts` for one bound threshold, one image's values at a time.

    ``name``: the threshold's name; ``threshold``: its integer form (``float_value`` is the line and ``scale`` the
    step, both in the units of the tensor it compares against).
    """

    def __init__(self, name: str, threshold: IntegerThreshold) -> None:
        self.name = name
        self.step = float(threshold.scale)
        self.line = float(threshold.float_value)
        self.decisions = 0
        self.within = np.zeros(NEAR_LINE_STEPS, np.int64)
        self._bands = self.step * np.arange(1, NEAR_LINE_STEPS + 1, dtype=np.float64)

    def add(self, values: np.ndarray | None) -> None:
        """Count one image's decision values (float ``(K,)`` on the tensor's scale; NaN or infinite values count as
        decisions far from the line; None adds nothing)."""
        if values is None:
            return
        v = np.asarray(values, np.float64).reshape(-1)
        self.decisions += int(v.size)
        with np.errstate(invalid="ignore"):
            dist = np.abs(v - self.line)
        dist = dist[np.isfinite(dist)]
        # ``<=`` with a relative tolerance: a value exactly k codes away must count as within k steps despite rounding
        self.within += (dist[:, None] <= self._bands[None, :] * (1 + 1e-9)).sum(axis=0)

    def result(self) -> NearLineCounts:
        """The counts so far."""
        return NearLineCounts(self.name, self.step, self.line, self.decisions, tuple(int(x) for x in self.within))


def primary_counter(task: TaskAdapter, integer_domain: Mapping[str, IntegerThreshold]) -> NearLineCounter | None:
    """A counter for the task's PRIMARY threshold in ``integer_domain``; None when it has no integer form (it is
    compared in float, or its tensor is not quantized per tensor)."""
    it = integer_domain.get(task.PRIMARY)
    if it is None or not (math.isfinite(it.scale) and it.scale > 0):
        return None
    return NearLineCounter(task.PRIMARY, it)


def near_line_counts(task: TaskAdapter, outputs: Iterable[Outputs], integer_domain: Mapping[str, IntegerThreshold]) -> NearLineCounts | None:
    """Counts of FP32's decisions near the PRIMARY threshold over a set of images.

    Args:
        task: the adapter at the FP32 thresholds (FP32's decisions are the ones counted).
        outputs: FP32's raw outputs, one mapping per image (batch 1).
        integer_domain: the bound threshold set's integer forms (:attr:`ThresholdSet.integer_domain`).

    Returns None when the PRIMARY threshold has no integer form or the adapter has no single value per decision on
    its tensor (:meth:`TaskAdapter.near_line_values` returns None).
    """
    counter = primary_counter(task, integer_domain)
    if counter is None:
        return None
    for out in outputs:
        values = task.near_line_values(out)
        if values is None:
            return None
        counter.add(values)
    return counter.result()


def near_line(site: NearLineCounts, baseline: NearLineCounts | None, k: int, reference_set: str = "") -> NearLine:
    """The typed result evaluate writes: the site set's counts against the threshold set's baseline, with the band of
    ``k`` steps. A baseline counted for another threshold, line or step (the threshold set was re-bound) is dropped.

    Raises:
        ConfigError: ``k`` outside ``1 .. NEAR_LINE_STEPS``.
    """
    same = baseline is not None and (baseline.threshold, baseline.line, baseline.step) == (site.threshold, site.line, site.step)
    return NearLine(site=site, k=k, baseline=baseline if same else None, reference_set=reference_set if same else "")

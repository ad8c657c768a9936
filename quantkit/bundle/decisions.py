"""Decisions for the bundle: the one place bundle and verify ask the task adapter, and decision-level agreement.

:func:`decide` is the only call into the task adapter (:func:`quantkit.tasks.make_adapter` at the threshold set's options); the
decision is stored as :meth:`quantkit.tasks.Decision.to_json`. Agreement at the decision level (:func:`agreement`)
is the task's own: its agreement counts between the golden and the target decision, pooled into the task's
decision metric (:meth:`quantkit.tasks.TaskAdapter.decision_metric`: box F1 at the task's match IoU for detectors,
top-1 for classifiers, exact text for recognizers). Small differences of coordinates and scores, which fused
integer kernels legitimately produce, do not count; a missing, extra or relabelled item does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..tasks import Decision, make_adapter


@dataclasses.dataclass(frozen=True)
class DecisionAgreement:
    """Target vs golden decisions (one image, or pooled): the task's decision ``metric`` and its ``value`` (1.0 = the
    same decisions), the summed ``counts`` behind it, and the item counts on each side."""

    metric: str
    value: float
    golden: int
    target: int
    counts: dict[str, float]

    def __str__(self) -> str:
        return f"{self.metric} {self.value:.3f} ({self.golden} golden items, {self.target} on the target)"


def decide(thresholds: Any, outputs: Mapping[str, np.ndarray], *, fp32: bool = False, model: Any = None) -> dict[str, Any]:
    """The task adapter's decision on ``outputs`` at the threshold set's values (``fp32=True``: its FP32 values),
    as JSON; ``model`` (an ``onnx.ModelProto``) completes the adapter (e.g. a recognizer's character list).

    Args:
        thresholds: a :class:`quantkit.artifacts.ThresholdSet`.
    """
    task = make_adapter(thresholds.adapter, thresholds.adapter_options(fp32=fp32))
    if model is not None:
        task = task.with_model(model)
    return task.decide(outputs).to_json()


def agreement(thresholds: Any, golden: Mapping[str, Any], got: Mapping[str, Any]) -> DecisionAgreement:
    """The task's decision agreement of ``got`` with ``golden`` (decision JSONs of :func:`decide`)."""
    return pooled(thresholds, [(golden, got)])


def pooled(thresholds: Any, pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> DecisionAgreement:
    """Decision agreement pooled over image pairs (golden, target): counts summed, then the metric."""
    task = make_adapter(thresholds.adapter, thresholds.adapter_options())
    metric = task.decision_metric()
    counts: dict[str, float] = {}
    golden = target = 0
    for g, t in pairs:
        dg, dt = Decision.from_json(g), Decision.from_json(t)
        golden, target = golden + len(dg), target + len(dt)
        for k, v in task.agreement(dg, dt).items():
            counts[k] = counts.get(k, 0.0) + v
    return DecisionAgreement(metric.name, float(metric.value(counts)), golden, target, counts)

"""Decisions for the bundle: the one place bundle and verify ask the task adapter, and decision-level agreement.

:func:`decide` is the only call into the task adapter (``ThresholdSet.make_adapter().decide(outputs)``); when task
adapters move (``quantkit.tasks``), this function changes and nothing else in the bundle does.

Agreement at the decision level (:func:`agreement`): the target's detections are matched one-to-one with the
golden ones, greedily by IoU (at least ``min_iou``, same label; PASCAL VOC / COCO matching,
:func:`quantkit.thresholds.adapters.match_count`), and ``f1 = 2 matched / (golden + target)``. Small
differences of corner coordinates and scores, which fused integer kernels legitimately produce, do not count;
a missing, extra or relabelled detection does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class DecisionAgreement:
    """Target vs golden decisions of one image: ``f1`` (1.0 = the same detections), ``matched`` pairs, counts, and
    the largest score difference over matched pairs (score units)."""

    f1: float
    matched: int
    golden: int
    target: int
    max_score_delta: float

    def __str__(self) -> str:
        return (f"{self.matched}/{self.golden} golden detections matched, {self.target} on the target (F1 {self.f1:.3f}, "
                f"score differences up to {self.max_score_delta:.3f})")


def decide(thresholds: Any, outputs: Mapping[str, np.ndarray], *, fp32: bool = False) -> dict[str, Any]:
    """The task adapter's decision on ``outputs`` at the threshold set's values (``fp32=True``: at its FP32 values),
    as plain JSON (``polygons``, ``scores``, ``labels``).

    Args:
        thresholds: a :class:`quantkit.thresholds.binding.ThresholdSet`.
    """
    return _plain(thresholds.make_adapter(fp32=fp32).decide(outputs).to_dict())


def agreement(golden: Mapping[str, Any], got: Mapping[str, Any], *, min_iou: float = 0.5) -> DecisionAgreement:
    """Match ``got`` with ``golden`` (decision JSONs of :func:`decide`); see the module docstring."""
    from ..thresholds.adapters import f1, match_count, polygon_iou

    gp, tp = np.asarray(golden.get("polygons") or np.zeros((0, 4, 2)), np.float64), np.asarray(got.get("polygons") or np.zeros((0, 4, 2)), np.float64)
    gl, tl = list(golden.get("labels") or []), list(got.get("labels") or [])
    gs, ts = np.asarray(golden.get("scores") or [], np.float64), np.asarray(got.get("scores") or [], np.float64)
    if len(gp) == 0 or len(tp) == 0:
        matched = 0
        delta = 0.0
    else:
        iou = polygon_iou(tp, gp)
        matched = match_count(tp, gp, iou, pred_labels=tl, truth_labels=gl, min_iou=min_iou)
        same = np.asarray(tl)[:, None] == np.asarray(gl)[None, :]
        best = np.where(same, iou, -1.0).argmax(axis=1)
        ok = np.where(same, iou, -1.0).max(axis=1) >= min_iou
        delta = float(np.max(np.abs(ts[ok] - gs[best[ok]]))) if ok.any() else 0.0
    return DecisionAgreement(f1(matched, len(tp) - matched, len(gp) - matched), matched, len(gp), len(tp), delta)


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return _plain(v.tolist())
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if np.isfinite(f) else None
    return v

"""Matching decision items: polygon IoU, greedy one-to-one matching, and the counts agreement metrics use.

Greedy matching by IoU, descending, one-to-one, same label, IoU >= ``min_iou``: the matching rule of PASCAL
VOC / COCO evaluation (Everingham et al., IJCV 2010, sec. 4.4; COCO ``cocoeval.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def polygon_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix ``(len(a), len(b)) float64`` of ``(K, P, 2)`` polygons (shapely; invalid ones made valid)."""
    import shapely

    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    pa = shapely.make_valid(shapely.polygons(np.asarray(a, np.float64)))
    pb = shapely.make_valid(shapely.polygons(np.asarray(b, np.float64)))
    inter = shapely.area(shapely.intersection(pa[:, None], pb[None, :]))
    union = shapely.area(pa)[:, None] + shapely.area(pb)[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix ``(len(a), len(b)) float64`` of axis-aligned boxes given as ``(K, 4, 2)`` corner polygons
    (exact and fast: min/max of the corners; use :func:`polygon_iou` for rotated quads)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    a0, a1 = np.asarray(a, np.float64).min(1), np.asarray(a, np.float64).max(1)
    b0, b1 = np.asarray(b, np.float64).min(1), np.asarray(b, np.float64).max(1)
    lo = np.maximum(a0[:, None], b0[None])
    hi = np.minimum(a1[:, None], b1[None])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area_a = np.prod(a1 - a0, axis=1)
    area_b = np.prod(b1 - b0, axis=1)
    union = area_a[:, None] + area_b[None] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def match(iou: np.ndarray, *, pred_labels: Sequence[int] | np.ndarray | None = None, truth_labels: Sequence[int] | np.ndarray | None = None,
          min_iou: float = 0.5) -> tuple[int, float]:
    """Greedy one-to-one matching on an IoU matrix ``(P, T)``: returns ``(matches, sum of matched IoUs)``."""
    if iou.size == 0:
        return 0, 0.0
    m = np.array(iou, dtype=np.float64, copy=True)
    if pred_labels is not None and truth_labels is not None:
        m = np.where(np.asarray(pred_labels)[:, None] == np.asarray(truth_labels)[None, :], m, 0.0)
    order = np.argsort(-m, axis=None, kind="stable")
    used_p: set[int] = set()
    used_t: set[int] = set()
    tp, total = 0, 0.0
    for flat in order:
        i, j = divmod(int(flat), m.shape[1])
        if m[i, j] < min_iou:
            break
        if i in used_p or j in used_t:
            continue
        used_p.add(i)
        used_t.add(j)
        tp += 1
        total += float(m[i, j])
    return tp, total


def match_count(pred: np.ndarray, truth: np.ndarray, iou: np.ndarray | None = None, *, pred_labels: Sequence[int] | None = None,
                truth_labels: Sequence[int] | None = None, min_iou: float = 0.5) -> int:
    """Number of one-to-one matches between ``(K, P, 2)`` polygons (see :func:`match`); ``iou`` may be passed
    precomputed (``polygon_iou(pred, truth)``). Then fp = len(pred) - tp, fn = len(truth) - tp."""
    if len(pred) == 0 or len(truth) == 0:
        return 0
    m = polygon_iou(pred, truth) if iou is None else iou
    return match(m, pred_labels=pred_labels, truth_labels=truth_labels, min_iou=min_iou)[0]


def item_counts(prefix: str, tp: int, n_got: int, n_ref: int, iou_sum: float = 0.0) -> dict[str, float]:
    """Additive counts of one image's item matching: ``{prefix}_tp/_fp/_fn``, the F1 numerator ``2tp`` and
    denominator ``2tp + fp + fn`` (F1 = 2tp / (2tp + fp + fn), van Rijsbergen 1979), and the matched-IoU sum."""
    fp, fn = n_got - tp, n_ref - tp
    return {f"{prefix}_tp": float(tp), f"{prefix}_fp": float(fp), f"{prefix}_fn": float(fn), f"{prefix}_got": float(n_got),
            f"{prefix}_ref": float(n_ref), f"{prefix}_f1_num": 2.0 * tp, f"{prefix}_f1_den": float(2 * tp + fp + fn),
            f"{prefix}_iou_sum": float(iou_sum)}


def f1(tp: float, fp: float, fn: float) -> float:
    """F1 = 2tp / (2tp + fp + fn); 1.0 when there is nothing to find and nothing was found."""
    d = 2 * tp + fp + fn
    return 1.0 if d == 0 else 2 * tp / d

"""Ratio-of-sums estimates over images with percentile-bootstrap confidence intervals.

Every task metric is ``sum(num) / sum(den)`` over images (:class:`quantkit.tasks.MetricSpec`). Confidence
intervals: percentile bootstrap over images (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993,
ch. 13) with ``resamples`` resamples and a fixed seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..artifacts.thresholds import Estimate, Significance

METHOD = "percentile bootstrap over images (Efron & Tibshirani 1993)"


def _ratio(a: np.ndarray, b: np.ndarray, empty: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1), empty)


def bootstrap_ratio(num: Any, den: Any, *, resamples: int, seed: int, confidence: float, empty: float = 1.0,
                    factor: float = 1.0) -> Estimate:
    """``factor * sum(num) / sum(den)`` over images with a percentile-bootstrap CI.

    Args:
        num, den: ``(N,)`` per-image counts.
        empty: the value when the denominator sums to 0 (nothing to agree on counts as agreement).
    """
    num = np.asarray(num, np.float64) * factor
    den = np.asarray(den, np.float64)
    n = len(num)
    value = float(_ratio(num.sum(keepdims=True), den.sum(keepdims=True), empty)[0])
    if n == 0:
        return Estimate(round(value, 6), (round(value, 6), round(value, 6)), 0)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    stats = _ratio(num[idx].sum(1), den[idx].sum(1), empty)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(stats, [a, 1 - a])
    return Estimate(round(value, 6), (round(float(lo), 6), round(float(hi), 6)), n)


def grid(lo: float, hi: float, step: float, extra: Sequence[float] = ()) -> np.ndarray:
    """Sorted candidate thresholds ``lo, lo+step, ..., hi`` (rounded to 6 decimals) plus ``extra``."""
    k = int(math.floor((hi - lo) / step + 1e-9))
    vals = np.round(lo + step * np.arange(k + 1), 6)
    return np.unique(np.concatenate([vals, np.asarray(extra, np.float64)]))


def pick(scores: np.ndarray, cands: np.ndarray, prefer: float) -> int:
    """Index of the best score; ties (within 1e-12) go to the candidate closest to ``prefer``."""
    best = np.flatnonzero(scores >= scores.max() - 1e-12)
    return int(best[np.argmin(np.abs(cands[best] - prefer))])


def pick_significant(num: np.ndarray, den: np.ndarray, cands: np.ndarray, prefer: float, *, resamples: int, seed: int,
                     confidence: float, higher_is_better: bool = True) -> tuple[int, Significance]:
    """Index of the candidate to use: the best ratio-of-sums score, but only if it beats ``prefer`` significantly.

    ``num``, ``den``: ``(N images, C candidates)`` per-image counts; the score of candidate ``c`` is
    ``num[:, c].sum() / den[:, c].sum()`` (negated when lower is better). A paired percentile bootstrap over
    images gives a CI of the gain ``score(best) - score(prefer)``; when its lower bound is not above zero the
    gain is within sampling noise and the preferred (FP32) value is kept, so a small reference set cannot
    move a threshold for a gain it cannot support.
    """
    sign = 1.0 if higher_is_better else -1.0
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    scores = sign * num.sum(0) / np.maximum(den.sum(0), 1e-12)
    jb = pick(scores, cands, prefer)
    j0 = int(np.argmin(np.abs(cands - prefer)))
    gain = round(float(scores[jb] - scores[j0]), 6)
    if jb == j0 or len(num) == 0:
        return j0, Significance(float(cands[jb]), gain, (0.0, 0.0), False)
    idx = np.random.default_rng(seed).integers(0, len(num), size=(resamples, len(num)))

    def ratio(c: int) -> np.ndarray:
        return sign * num[idx, c].sum(1) / np.maximum(den[idx, c].sum(1), 1e-12)

    gains = ratio(jb) - ratio(j0)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(gains, [a, 1 - a])
    moved = bool(lo > 0)
    return (jb if moved else j0), Significance(float(cands[jb]), gain, (round(float(lo), 6), round(float(hi), 6)), moved)

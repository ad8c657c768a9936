"""Ratio-of-sums estimates over images with confidence intervals that hold at small sample sizes.

Every task metric is ``sum(num) / sum(den)`` over images (:class:`quantkit.tasks.MetricSpec`). Its confidence
interval depends on what the counts are:

* **A proportion of independent trials** (every image contributes ``den`` 0 or 1 and an integer ``num`` 0..den:
  top-1 agreement, exact text, false-alarm images): the exact Clopper-Pearson interval of ``k`` successes in
  ``n`` trials (Clopper & Pearson 1934, *Biometrika* 26(4); :meth:`scipy.stats.binomtest` ``proportion_ci``,
  ``method="exact"``). It never has zero width: 12 of 12 gives about 0.74-1.00 at 95%, where a percentile
  bootstrap gives 1.00-1.00.
* **Any other ratio of sums** (pixels, boxes, characters per image): the bias-corrected and accelerated (BCa)
  bootstrap over images (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 14;
  :func:`scipy.stats.bootstrap`, ``method="BCa"``, resampling images with their num/den pairs), ``resamples``
  resamples from a fixed seed. BCa corrects the percentile interval's bias and skew; it is still a
  large-sample method.
* **A degenerate sample** (every image has the same ratio ``r``, or one image): no resample can differ, so the
  bootstrap would report zero width. The interval is widened by the rule used for proportions: with ``n``
  images all at ``r`` in ``[0, 1]``, the fraction of images that may be elsewhere is at most the Clopper-Pearson
  upper bound for 0 of ``n``, ``d = 1 - (alpha/2)^(1/n)``, and in the worst case they sit at the other end of
  ``[0, 1]``: ``[r - r*d, r + (1 - r)*d]`` (times ``factor``). For metrics outside ``[0, 1]`` per image (e.g. a
  character error rate above 1) this is a lower bound on the width, stated as such.

The interval is clipped to contain the point estimate.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..artifacts.thresholds import Estimate, Significance

METHOD = ("Clopper-Pearson exact interval for proportions of images (Clopper & Pearson 1934); BCa bootstrap over images for "
          "other ratios (Efron & Tibshirani 1993), widened by the Clopper-Pearson rule when every image has the same ratio")


def _ratio(a: np.ndarray, b: np.ndarray, empty: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1), empty)


def is_proportion(num: np.ndarray, den: np.ndarray) -> bool:
    """Whether ``sum(num) / sum(den)`` is a proportion of independent trials: every image contributes a
    denominator of 0 or 1 and an integer numerator between 0 and its denominator."""
    return bool(den.size and np.all((den == 0) | (den == 1)) and np.all(num == np.round(num)) and np.all((num >= 0) & (num <= den)))


def proportion_ci(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of ``k`` successes in ``n >= 1`` trials (Clopper & Pearson 1934, via
    :meth:`scipy.stats.binomtest` ``proportion_ci(method="exact")``)."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def degenerate_ci(r: float, n: int, confidence: float) -> tuple[float, float]:
    """Interval for ``n`` images that all have the ratio ``r`` (see the module docstring): at most a fraction
    ``d = 1 - (alpha/2)^(1/n)`` (Clopper-Pearson upper bound for 0 of ``n``) of images may lie elsewhere, in the
    worst case at the other end of ``[0, 1]``: ``[r - r*d, r + (1 - r)*d]`` (no widening past 0 or 1)."""
    d = 1.0 - ((1.0 - confidence) / 2.0) ** (1.0 / max(n, 1))
    return r - max(r, 0.0) * d, r + max(1.0 - r, 0.0) * d


def _bootstrap_ci(num: np.ndarray, den: np.ndarray, *, resamples: int, seed: int, confidence: float, empty: float) -> tuple[float, float]:
    """BCa interval of ``sum(num) / sum(den)``, images resampled with their (num, den) pairs (scipy); the
    percentile interval of the same resamples when BCa is undefined (e.g. every resample on one side)."""
    from scipy.stats import bootstrap

    def stat(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return _ratio(a.sum(axis), b.sum(axis), empty)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns when BCa is undefined; handled below
        res = bootstrap((num, den), stat, n_resamples=resamples, batch=256, vectorized=True, paired=True,
                        confidence_level=confidence, method="BCa", rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        a = (1 - confidence) / 2
        lo, hi = (float(q) for q in np.quantile(res.bootstrap_distribution, [a, 1 - a]))
    return lo, hi


def bootstrap_ratio(num: Any, den: Any, *, resamples: int, seed: int, confidence: float, empty: float = 1.0,
                    factor: float = 1.0) -> Estimate:
    """``factor * sum(num) / sum(den)`` over images with a confidence interval (module docstring: Clopper-Pearson
    for proportions, BCa bootstrap for other ratios, widened when every image has the same ratio). Deterministic
    for a given ``seed``.

    Args:
        num, den: ``(N,)`` per-image counts (float64-convertible).
        resamples, seed: bootstrap resamples and the seed of their generator.
        confidence: two-sided level, e.g. 0.95.
        empty: the value when the denominator sums to 0 (nothing to agree on counts as agreement); its
            interval is the value itself (there is nothing to sample).
        factor: multiplies the ratio (e.g. 100 for percent).

    Returns:
        :class:`Estimate` with ``value``, ``ci`` (low <= value <= high, 6 decimals) and ``n`` = N images.
    """
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    n = len(num)
    if n == 0 or den.sum() <= 0:
        return Estimate(round(empty, 6), (round(empty, 6), round(empty, 6)), n)
    value = factor * float(num.sum() / den.sum())
    used = den > 0
    per_image = num[used] / den[used]
    if is_proportion(num, den):
        lo, hi = (factor * x for x in proportion_ci(int(num.sum()), int(den.sum()), confidence))
    elif np.all(num[~used] == 0) and (per_image.size < 2 or np.ptp(per_image) <= 1e-12 * max(1.0, float(np.abs(per_image).max()))):
        lo, hi = (factor * x for x in degenerate_ci(value / factor if factor else 0.0, int(used.sum()), confidence))
    else:
        lo, hi = _bootstrap_ci(num * factor, den, resamples=resamples, seed=seed, confidence=confidence, empty=empty)
    lo, hi = sorted((lo, hi))
    return Estimate(round(value, 6), (round(min(lo, value), 6), round(max(hi, value), 6)), n)


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
    """Index of the candidate to use: the best ratio-of-sums score, but only if choosing it beats ``prefer`` on images
    the choice did not see.

    ``num``, ``den``: ``(N images, C candidates)`` per-image counts; the score of candidate ``c`` is
    ``num[:, c].sum() / den[:, c].sum()`` (negated when lower is better). The best of ``C`` candidates measured on
    the same images it was picked on overstates its gain (a search over 91 thresholds on 24 images finds one that
    looks better by chance), so the gain is estimated out of bag (Efron & Tibshirani 1997, "Improvements on
    cross-validation: the .632+ bootstrap method", JASA 92:548): each bootstrap resample picks its best candidate
    on its in-bag images and measures that pick's gain over ``prefer`` on the images it left out (about 37% of
    them). ``gain_ci`` is the central ``confidence`` interval of those out-of-bag gains (resamples whose left-out
    images hold no item for either candidate are skipped); when its lower bound is not above zero the preferred
    (FP32) value is kept, so a small reference set cannot move a threshold for a gain that does not carry over
    to new images. ``gain`` is the in-sample gain of the full-set best.
    """
    sign = 1.0 if higher_is_better else -1.0
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    scores = sign * num.sum(0) / np.maximum(den.sum(0), 1e-12)
    jb = pick(scores, cands, prefer)
    j0 = int(np.argmin(np.abs(cands - prefer)))
    gain = round(float(scores[jb] - scores[j0]), 6)
    n = len(num)
    if jb == j0 or n < 2:
        return j0, Significance(float(cands[jb]), gain, (0.0, 0.0), False)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    weights = np.zeros((resamples, n))
    np.add.at(weights, (np.arange(resamples)[:, None], idx), 1.0)
    s_in = sign * (weights @ num) / np.maximum(weights @ den, 1e-12)
    best = s_in >= s_in.max(1, keepdims=True) - 1e-12  # each resample's pick: best in bag, ties to the closest to prefer
    pick_r = np.argmin(np.where(best, np.abs(cands - prefer)[None, :], np.inf), axis=1)
    out = (weights == 0).astype(np.float64)
    rows = np.arange(resamples)
    num_o, den_o = out @ num, out @ den
    valid = (den_o[rows, pick_r] > 0) | (den_o[:, j0] > 0)
    gains = sign * (num_o[rows, pick_r] / np.maximum(den_o[rows, pick_r], 1e-12) - num_o[:, j0] / np.maximum(den_o[:, j0], 1e-12))
    gains = gains[valid]
    if gains.size < max(10, resamples // 4):
        return j0, Significance(float(cands[jb]), gain, (0.0, 0.0), False)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(gains, [a, 1 - a])
    moved = bool(lo > 0)
    return (jb if moved else j0), Significance(float(cands[jb]), gain, (round(float(lo), 6), round(float(hi), 6)), moved)

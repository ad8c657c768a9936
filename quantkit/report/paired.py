"""Paired comparison of two quantized models on the same images: is the candidate really closer to FP32?

The shift report recommends a switch between two models that are both green only when the improvement is larger
than the image sample can explain. Both models were evaluated on the same images (``per_image.csv`` of each site
set holds one row per image and variant, with the counts behind the task's metrics), so the comparison is paired:
each bootstrap resample draws images with replacement and recomputes the *difference* of the pooled metric
(``factor * sum(num) / sum(den)``, :class:`quantkit.tasks.MetricSpec`) of candidate and deployed on the same drawn
images. Pairing removes the image-to-image variation both models share, which two separate intervals would count
twice (overlapping per-model intervals say little about the difference).

Over several site sets the statistic is the mean over sets of the per-set difference (the report's "mean ... vs
...", each set weighted equally), and images are resampled within each set (a stratified bootstrap). The interval
is the percentile interval of ``resamples`` resamples from a fixed seed (Efron & Tibshirani, *An Introduction to
the Bootstrap*, 1993, ch. 13 (percentile interval) and ch. 6 / sec. 8.3 (one-sample and paired designs: resample
the pairs)), so the same inputs give the same report. Percentile intervals are large-sample approximations: with
few images they are too narrow, which is why the sample size is always written beside them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputFileError

RESAMPLES = 2000
"""Bootstrap resamples (Efron & Tibshirani 1993, sec. 13.3: 1000-2000 for a percentile interval's end points)."""
SEED = 0
CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """``candidate - deployed`` of one metric on the same images, with its paired bootstrap interval.

    ``sites``: the site sets pooled (one for a per-set comparison); ``images``: images compared (present for both
    models); ``deployed`` / ``candidate``: the metric (mean over ``sites`` of the pooled per-set value);
    ``ci``: the percentile interval of ``difference`` at ``confidence``; ``higher_is_better``: the metric's direction.
    """

    sites: tuple[str, ...]
    metric: str
    images: int
    deployed: float
    candidate: float
    difference: float
    ci: tuple[float, float]
    confidence: float
    resamples: int
    higher_is_better: bool = True

    @property
    def better(self) -> bool:
        """The interval lies wholly on the candidate's better side of 0."""
        return self.ci[0] > 0 if self.higher_is_better else self.ci[1] < 0

    @property
    def worse(self) -> bool:
        """The interval lies wholly on the candidate's worse side of 0."""
        return self.ci[1] < 0 if self.higher_is_better else self.ci[0] > 0

    def words(self) -> str:
        """``a difference of +0.01 (95% interval -0.01 to +0.03, from the same 96 images of 3 site sets)``."""
        where = f"{self.images} images of {len(self.sites)} site sets" if len(self.sites) > 1 else f"{self.images} images of {self.sites[0]}"
        return (f"a difference of {self.difference:+.3f} ({100 * self.confidence:.0f}% interval {self.ci[0]:+.3f} to {self.ci[1]:+.3f}, "
                f"paired bootstrap over the same {where})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"PairedDifference({self.metric} {self.difference:+.3f} [{self.ci[0]:+.3f}, {self.ci[1]:+.3f}], n={self.images})"


def _pairs(frame: Any, num: str, den: str, a: str, b: str, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(num_a, den_a, num_b, den_b)`` per image present for both variants, in image order."""
    rows = {v: frame[frame["variant"] == v].set_index("image") for v in (a, b)}
    for v, r in rows.items():
        if num not in r or den not in r:
            raise InputFileError(f"{where}: per_image.csv has no {num!r}/{den!r} counts for {v}; rerun 'quantkit evaluate'")
        if r.index.has_duplicates:
            raise InputFileError(f"{where}: per_image.csv lists an image twice for {v}; rerun 'quantkit evaluate'")
    images = sorted(set(rows[a].index) & set(rows[b].index))
    if not images:
        raise InputFileError(f"{where}: no image evaluated for both {a} and {b}; rerun 'quantkit evaluate' with both")
    out = [rows[v].loc[images, c].fillna(0).to_numpy(np.float64) for v in (a, b) for c in (num, den)]
    return out[0], out[1], out[2], out[3]


def _ratio(num: np.ndarray, den: np.ndarray, factor: float, empty: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, factor * num / np.where(den > 0, den, 1.0), empty)


def paired_difference(frames: Mapping[str, Any], metric: str, num: str, den: str, *, factor: float = 1.0, empty: float = 1.0,
                      higher_is_better: bool = True, a: str = "deployed", b: str = "candidate", resamples: int = RESAMPLES,
                      seed: int = SEED, confidence: float = CONFIDENCE) -> PairedDifference:
    """The paired bootstrap interval of ``b - a`` for the metric ``factor * sum(num) / sum(den)`` (see the module docstring).

    Args:
        frames: site set name -> its ``per_image.csv`` as a DataFrame (columns ``image``, ``variant``, ``num``, ``den``).
        metric: the metric's name (for the result and messages only).

    Raises:
        InputFileError: a frame lacks the counts, lists an image twice, or has no image evaluated for both variants.
    """
    if not frames:
        raise ValueError("paired_difference needs at least one site set")
    rng = np.random.default_rng(seed)
    point, dep, boot, n = [], [], np.zeros(resamples), 0
    for site in sorted(frames):
        na, da, nb, db = _pairs(frames[site], num, den, a, b, site)
        dep.append(float(_ratio(na.sum(), da.sum(), factor, empty)))
        point.append(float(_ratio(nb.sum(), db.sum(), factor, empty)) - dep[-1])
        idx = rng.integers(0, len(na), size=(resamples, len(na)))
        boot += _ratio(nb[idx].sum(1), db[idx].sum(1), factor, empty) - _ratio(na[idx].sum(1), da[idx].sum(1), factor, empty)
        n += len(na)
    boot /= len(frames)
    diff = float(np.mean(point))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = (float(x) for x in np.quantile(boot, [alpha, 1.0 - alpha]))
    return PairedDifference(tuple(sorted(frames)), metric, n, float(np.mean(dep)), float(np.mean(dep)) + diff, diff, (lo, hi),
                            confidence, resamples, higher_is_better)


__all__ = ["CONFIDENCE", "RESAMPLES", "PairedDifference", "paired_difference"]

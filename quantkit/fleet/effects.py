"""Effect sizes between histograms on frozen edges, and per-camera thresholds derived from reference windows.

A window's effect against a reference, per statistic (all from integer counts on the same bins, so
merged shard histograms give exactly the numbers all rows would):

* ``psi``: PSI (:func:`quantkit.metrics.psi_from_counts`) after merging the fixed bins into
  ``psi_bins`` groups of about equal reference mass (the reference's quantile bins, Siddiqi 2006);
* ``ks``: :func:`quantkit.metrics.ks_from_counts` on the fixed bins;
* ``wasserstein``: :func:`quantkit.metrics.wasserstein_from_counts` divided by the reference's spread
  (:func:`reference_spread`: the larger of IQR / 1.349 and the mean deviation from the median x
  sqrt(pi / 2), at least ``spread_floor * |median|`` and half a bin), i.e. in reference standard
  deviations.

Thresholds (:func:`camera_thresholds`) are derived per camera, family-wise over its statistics:
``margin`` x the larger of the ``quantile`` of the largest effect over the statistics of windows drawn
from the reference histograms (multinomial, ``repeats`` times, seeded) and the largest effect of a
reference window against the other reference windows, never below the metric's floor. W1 is in
units of the whole reference's spread in both, the unit a judged window's W1 is in. Heavy-tailed
statistics are measured on a log axis (:func:`axis`).
The bootstrap uses :func:`effect_matrix`, a vectorised twin of the :mod:`quantkit.metrics` functions
(the tests check they agree).

:func:`extreme_effects` is the effect of a window with every image at one end of the axis, a complete
separation in that direction. A threshold at or above it means the metric cannot flag even that change
at that window size (PSI on 5 groups with 6 images a window: a window drawn from the reference
itself lands in one group with probability 5 x 0.2**6 = 3.2e-4 per statistic, over a dozen statistics
more than the 1e-3 the default quantile leaves, so the threshold sits at PSI's ceiling); :mod:`.camera`
leaves such a metric out of the vote.
"""

from __future__ import annotations

import math
import zlib
from typing import Mapping, Sequence

import numpy as np

from .. import metrics

METRICS = ("psi", "wasserstein", "ks")


def psi_groups(reference: np.ndarray, groups: int) -> np.ndarray:
    """Group index ``(bins,)`` of each fixed bin: bins merged into ``groups`` of about equal reference mass.

    A bin's group is ``floor(groups * F(centre))`` with ``F`` the reference CDF at the bin's middle
    mass; empty reference bins join their neighbours.
    """
    r = np.asarray(reference, np.float64)
    total = r.sum()
    if total <= 0:
        return np.zeros(r.size, np.int64)
    cum = np.cumsum(r) / total
    mid = cum - 0.5 * r / total
    return np.minimum((mid * groups).astype(np.int64), groups - 1)


def grouped(counts: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Counts ``(..., bins)`` summed into ``(..., groups)``."""
    c = np.asarray(counts, np.float64)
    onehot = np.zeros((group.size, groups))
    onehot[np.arange(group.size), group] = 1.0
    return c @ onehot


MEAN_DEVIATION_TO_SIGMA = math.sqrt(math.pi / 2.0)
"""Standard deviation over mean absolute deviation for normal data (``E|X - mu| = sigma sqrt(2 / pi)``)."""


def reference_spread(edges: np.ndarray, counts: np.ndarray, floor: float) -> float:
    """The unit of W1: the larger of IQR / 1.349 and the mean absolute deviation from the median x sqrt(pi / 2)
    of a histogram (linear interpolation within bins for the quantiles, bin centres for the deviation; both
    the standard deviation for normal data), at least ``floor * |median|`` and half the width of the median's
    bin (a one-bin reference still has a finite spread).

    The mean deviation keeps the unit from collapsing when most of the reference sits in one bin and a minority
    lies far away (a noise estimate of 0 on clean renders, a few noisy images): there the IQR is a fraction of
    a bin, and a window drawn from the reference itself shows W1 of hundreds of IQR units, which would set the
    W1 threshold every statistic shares (family-wise) and leave W1 blind on all of them. By the triangle
    inequality through the point mass at the median ``m``, ``W1(window, reference) <= E_window|Y - m| +
    E_reference|X - m|``, and for a window drawn from the reference the first term averages the second: in
    this unit the no-change W1 of any statistic averages at most 2 / sqrt(pi / 2) = 1.6, whatever its shape.
    """
    e = np.asarray(edges, np.float64)
    c = np.asarray(counts, np.float64)
    cdf = np.concatenate([[0.0], np.cumsum(c) / max(c.sum(), 1.0)])
    q1, med, q3 = np.interp([0.25, 0.5, 0.75], cdf, e) if c.sum() > 0 else (0.0, 0.0, 0.0)
    b = min(int(np.searchsorted(e, med, side="right")) - 1, e.size - 2)
    width = float(e[max(b, 0) + 1] - e[max(b, 0)])
    deviation = float(np.abs(0.5 * (e[:-1] + e[1:]) - med) @ c / c.sum()) if c.sum() > 0 else 0.0
    return max(float(q3 - q1) / metrics.IQR_TO_SIGMA, MEAN_DEVIATION_TO_SIGMA * deviation, floor * abs(float(med)), 0.5 * width, 1e-12)


def _support(edges: np.ndarray, *counts: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Edges and counts cut to the bins where any of ``counts`` has mass (empty bins at either end change none
    of the effects: CDFs are flat there and PSI groups them with their neighbours)."""
    mass = np.zeros(np.asarray(edges).size - 1, bool)
    for c in counts:
        mass |= np.atleast_2d(np.asarray(c) > 0).any(axis=0)
    nz = np.flatnonzero(mass)
    if nz.size == 0:
        return np.asarray(edges, np.float64), [np.asarray(c, np.float64) for c in counts]
    lo, hi = int(nz[0]), int(nz[-1]) + 1
    return np.asarray(edges, np.float64)[lo:hi + 1], [np.asarray(c, np.float64)[..., lo:hi] for c in counts]


def effects(edges: np.ndarray, reference: np.ndarray, current: np.ndarray, *, psi_bins: int, spread_floor: float) -> dict[str, float]:
    """``{psi, wasserstein, ks}`` of ``current`` against ``reference`` (counts on ``edges``); see the module docstring."""
    edges, (reference, current) = _support(edges, reference, current)
    g = psi_groups(reference, psi_bins)
    spread = reference_spread(edges, reference, spread_floor)
    centre_edges = np.asarray(edges, np.float64)
    return {
        "psi": metrics.psi_from_counts(grouped(reference, g, psi_bins), grouped(current, g, psi_bins)),
        "wasserstein": metrics.wasserstein_from_counts(centre_edges, reference, current) / spread,
        "ks": metrics.ks_from_counts(reference, current),
    }


def effect_matrix(edges: np.ndarray, reference: np.ndarray, samples: np.ndarray, *, psi_bins: int, spread_floor: float,
                  spread_of: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """:func:`effects` of each row of ``samples`` ``(n, bins)`` against ``reference``, vectorised.

    ``spread_of`` (counts, default ``reference``): the histogram whose spread is W1's unit. A reference window
    against the other reference windows is measured in the whole reference's spread, the unit every judged
    window is measured in: the other windows alone can be nearly constant (e.g. no sensor noise on most
    images), and their spread, down to half a bin, would turn an ordinary day into tens of "standard deviations".

    W1 between histograms on shared bin centres is ``sum_i |F_a(i) - F_b(i)| (c_{i+1} - c_i)``, which is
    what :func:`scipy.stats.wasserstein_distance` computes for weighted samples on the same support.
    """
    e, (ref, s, unit) = _support(edges, reference, np.atleast_2d(samples), reference if spread_of is None else spread_of)
    g = psi_groups(ref, psi_bins)
    rg = grouped(ref, g, psi_bins)
    sg = grouped(s, g, psi_bins)
    ef = np.maximum(rg / rg.sum(), metrics.PSI_EPSILON)
    af = np.maximum(sg / np.maximum(sg.sum(axis=1, keepdims=True), 1e-300), metrics.PSI_EPSILON)
    psi = np.sum((af - ef) * np.log(af / ef), axis=1)
    fr = np.cumsum(ref) / ref.sum()
    fs = np.cumsum(s, axis=1) / np.maximum(s.sum(axis=1, keepdims=True), 1e-300)
    ks = np.max(np.abs(fs - fr), axis=1)
    centres = 0.5 * (e[:-1] + e[1:])
    w1 = np.sum(np.abs(fs - fr)[:, :-1] * np.diff(centres), axis=1)
    return {"psi": psi, "wasserstein": w1 / reference_spread(e, unit, spread_floor), "ks": ks}


def extreme_effects(edges: np.ndarray, reference: np.ndarray, *, psi_bins: int, spread_floor: float) -> dict[str, tuple[float, float]]:
    """Per metric, the effects ``(down, up)`` against ``reference`` of a window with all its images in the first,
    and in the last, bin of ``edges``: a complete separation downwards and upwards, as far as the axis goes (KS
    is 1 and PSI has every image in the outer group when the reference leaves that end bin empty; W1 is the
    whole distance to the edge). Edges extend beyond the calibration set's values (:class:`~.summaries.Edges`);
    bounded statistics (brightness 0..255) may leave little room on one side.
    """
    ref = np.asarray(reference, np.float64)
    if ref.sum() <= 0:
        return {m: (0.0, 0.0) for m in METRICS}
    ends = np.zeros((2, ref.size))
    ends[0, 0] = ends[1, -1] = 1.0
    out = effect_matrix(edges, ref, ends, psi_bins=psi_bins, spread_floor=spread_floor)
    return {m: (float(v[0]), float(v[1])) for m, v in out.items()}


def axis(name: str, edges: np.ndarray) -> np.ndarray:
    """The edges on the axis effects are measured on: log for :data:`~.summaries.LOG_STATISTICS`
    (geometric bins; ratios matter), else as they are. PSI and KS do not depend on it."""
    from .summaries import LOG_STATISTICS

    return np.log(edges) if name in LOG_STATISTICS else np.asarray(edges, np.float64)


def camera_thresholds(axes: Mapping[str, np.ndarray], windows: Mapping[str, Sequence[np.ndarray]], n_current: int, *, psi_bins: int,
                      spread_floor: float, repeats: int, quantile: float, margin: float, floors: Mapping[str, float],
                      seed: Sequence[int]) -> dict[str, float]:
    """Per-metric alert thresholds of one camera, shared by all its statistics (family-wise).

    For each of ``repeats`` bootstrap windows (``n_current`` images drawn per statistic from the
    reference histogram) the largest effect over the statistics is kept; the threshold is ``margin`` x
    the larger of its ``quantile`` and the largest effect of any reference window against the other
    reference windows (W1 in the whole reference's spread), never below the metric's floor. So
    ``1 - quantile`` bounds the chance that any statistic of a window of an unchanged camera passes (for
    exchangeable images).

    Args:
        axes: per statistic, the edges on its effect axis (:func:`axis`).
        windows: per statistic, the reference windows' counts (each ``(bins,)``).
        n_current: images in the window being judged (the bootstrap draws windows of this size).
        seed: entropy for :func:`numpy.random.default_rng` (:func:`seed_for`).

    Returns:
        ``{metric: threshold}`` for :data:`METRICS`.
    """
    rng = np.random.default_rng(list(seed))
    boot = {m: np.zeros(repeats) for m in METRICS}
    loo = {m: 0.0 for m in METRICS}
    for name in sorted(windows):
        ref = np.sum(np.asarray(windows[name], np.float64), axis=0)
        if ref.sum() <= 0:
            continue
        if n_current > 0:
            draws = rng.multinomial(n_current, ref / ref.sum(), size=repeats)
            for m, v in effect_matrix(axes[name], ref, draws, psi_bins=psi_bins, spread_floor=spread_floor).items():
                boot[m] = np.maximum(boot[m], v)
        for w in windows[name]:
            rest = ref - w
            if np.sum(w) > 0 and rest.sum() > 0:
                for m, v in effect_matrix(axes[name], rest, w, psi_bins=psi_bins, spread_floor=spread_floor, spread_of=ref).items():
                    loo[m] = max(loo[m], float(v[0]))
    return {m: max(margin * max(float(np.quantile(boot[m], quantile)), loo[m]), floors.get(m, 0.0)) for m in METRICS}


def seed_for(seed: int, *names: str) -> list[int]:
    """Deterministic RNG entropy from a seed and names (CRC-32 of each name)."""
    return [seed, *(zlib.crc32(n.encode("utf-8")) for n in names)]

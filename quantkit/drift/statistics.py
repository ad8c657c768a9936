"""Image statistics of a site set against the calibration set's own variability.

For each statistic and each effect-size metric (normalized Wasserstein-1, PSI, Jensen-Shannon distance;
:mod:`quantkit.metrics`) the site set's effect is compared with an alert threshold derived from the calibration
set: the calibration set is shuffled ``repeats`` times and split into ``chunks`` chunks; each chunk is compared
with the rest with the same metric. These chunk-vs-rest effects are what sampling alone produces when nothing
changed (a permutation null, cf. Good 2005, *Permutation, Parametric and Bootstrap Tests of Hypotheses*). The
threshold is their ``quantile`` (default the maximum) times ``margin``, never below the metric's
:data:`~quantkit.drift.config.MIN_EFFECT` and, for PSI and JS, never above ``threshold_cap`` times the effect of a
site set entirely beyond the calibration range (so a small calibration set cannot make a metric blind). By default
the chunk size matches the site set's size (``chunks = round(n_calibration / n_site)``, 2..10).

A statistic *moved* when at least ``min_metrics`` of its metrics exceed their thresholds, or (``range_check``)
when the site set's median lies outside the calibration set's range widened by the statistic's
:data:`~quantkit.drift.config.RESOLUTION`. Each statistic is measured in its own units with that resolution: a
statistic constant on the calibration set (e.g. no crushed-black pixels) gets a W1 spread of at least the
resolution and a middle bin of +-resolution, so nothing divides by zero.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import metrics
from ..artifacts.drift import PLAIN_NAMES, StatisticChange, StatisticEffect
from ..errors import CalibrationSetError, ConfigError
from .config import BOUNDED_METRICS, DEFAULT_STATISTICS, MIN_EFFECT, RESOLUTION, DriftConfig

log = logging.getLogger(__name__)


def _effect(metric: str, ref: np.ndarray, cur: np.ndarray, cfg: DriftConfig, resolution: float = 0.0) -> float:
    if metric == "wasserstein":
        floor = max(cfg.spread_floor * abs(float(np.median(ref))), resolution)
        return metrics.normalized_wasserstein(ref, cur, scale=metrics.spread(ref, cfg.spread, floor))
    edges = metrics.quantile_edges(ref, cfg.bins, min_width=resolution)
    er, ec = np.histogram(ref, edges)[0], np.histogram(cur, edges)[0]
    return metrics.psi_from_counts(er, ec) if metric == "psi" else metrics.js_from_counts(er, ec)


def separation_effect(metric: str, ref: np.ndarray, cfg: DriftConfig, resolution: float = 0.0) -> float:
    """The PSI or JS effect of a site set entirely beyond the calibration range (every site value in the top,
    or the bottom, calibration quantile bin; the smaller of the two): the largest effect these bins can show."""
    edges = metrics.quantile_edges(ref, cfg.bins, min_width=resolution)
    er = np.histogram(ref, edges)[0]
    out = []
    for i in (0, er.size - 1):
        ec = np.zeros_like(er)
        ec[i] = 1
        out.append(metrics.psi_from_counts(er, ec) if metric == "psi" else metrics.js_from_counts(er, ec))
    return min(out)


def chunk_count(n: int, n_site: int, cfg: DriftConfig) -> int:
    """Chunks per shuffle: ``cfg.chunks``, or (0 = auto) ``round(n / n_site)`` clipped to 2..10."""
    return cfg.chunks or int(min(10, max(2, round(n / max(n_site, 1)))))


def small_calibration(n: int, n_site: int, cfg: DriftConfig, name: str = "") -> str:
    """A plain warning when the calibration set is too small for chunk-vs-rest thresholds to mean much (fewer
    than ``min_calibration_images`` images, or chunks of fewer than ``min_chunk_images``); ``""`` otherwise."""
    k = chunk_count(n, n_site, cfg)
    size = n // k
    if n >= cfg.min_calibration_images and size >= cfg.min_chunk_images:
        return ""
    which = f" ({name})" if name else ""
    if n >= cfg.min_calibration_images:
        what = f"the calibration set{which} is split into {k} chunks of only ~{size} images (to match the {n_site}-image site set)"
        fix = "use a larger site set or set drift.chunks"
    else:
        what = f"the calibration set{which} has only {n} images (split into {k} chunks of ~{size})"
        fix = "add calibration images"
    return (f"{what}: too few for thresholds from its own variability (need >= {cfg.min_calibration_images} images and chunks of "
            f">= {cfg.min_chunk_images}); small changes can be missed, only large ones (site median outside the calibration range, "
            f"effects near their maximum) are caught reliably; {fix}")


def null_effects(values: np.ndarray, n_site: int, cfg: DriftConfig, metric: str, resolution: float = 0.0) -> np.ndarray:
    """Chunk-vs-rest effects of one calibration statistic (the "nothing changed" distribution).

    Args:
        values: ``(n,)`` float64 calibration values of the statistic.
        n_site: site set size (sets the automatic chunk count).
        resolution: the statistic's :data:`~quantkit.drift.config.RESOLUTION` (its own units).

    Returns:
        ``(chunks * repeats,)`` float64 effects.

    Raises:
        CalibrationSetError: the calibration set is too small to split.
    """
    n = values.size
    k = chunk_count(n, n_site, cfg)
    if n < 2 * k or n < 4:
        raise CalibrationSetError(f"calibration set has {n} images, too few to split into {k} chunks; add images or lower drift.chunks")
    rng = np.random.default_rng(cfg.seed)
    out = []
    for _ in range(cfg.repeats):
        perm = rng.permutation(n)
        for chunk in np.array_split(perm, k):
            mask = np.zeros(n, dtype=bool)
            mask[chunk] = True
            out.append(_effect(metric, values[~mask], values[mask], cfg, resolution))
    return np.asarray(out, dtype=np.float64)


def alert_threshold(metric: str, ref: np.ndarray, null: np.ndarray, cfg: DriftConfig, resolution: float = 0.0) -> float:
    """``quantile(null) * margin``, at least :data:`MIN_EFFECT`, for PSI/JS at most ``threshold_cap`` times
    :func:`separation_effect` (module docstring)."""
    t = max(float(np.quantile(null, cfg.quantile)) * cfg.margin, MIN_EFFECT[metric])
    if metric in BOUNDED_METRICS:
        t = min(t, cfg.threshold_cap * separation_effect(metric, ref, cfg, resolution))
    return t


def _outside(ref: np.ndarray, cur: np.ndarray, resolution: float) -> tuple[float, bool]:
    """Fraction of site values outside ``[min(ref) - r, max(ref) + r]`` and whether the site median is."""
    lo, hi = float(ref.min()) - resolution, float(ref.max()) + resolution
    med = float(np.median(cur))
    return float(np.mean((cur < lo) | (cur > hi))), bool(med < lo or med > hi)


def compare_statistics(calibration: Any, site: Any, cfg: DriftConfig) -> tuple[list[StatisticEffect], list[StatisticChange]]:
    """Compare per-image statistic frames (calibration vs site) column by column.

    Returns one :class:`StatisticEffect` per (statistic, metric) and one :class:`StatisticChange`
    per statistic. Raises ConfigError when a requested statistic is absent from either frame.
    """
    names = list(cfg.statistics) or [c for c in DEFAULT_STATISTICS if c in calibration.columns and c in site.columns]
    for name in names:
        for frame, which in ((calibration, "calibration"), (site, "site")):
            if name not in frame.columns:
                raise ConfigError(f"drift.statistics: {name!r} is not a column of the {which} set's statistics; remove it or recompute stats.csv")
    effects: list[StatisticEffect] = []
    changes: list[StatisticChange] = []
    from ..progress import progress

    for name in progress(names, total=len(names), desc="drift", unit="stat"):
        ref = calibration[name].to_numpy(dtype=np.float64)
        cur = site[name].to_numpy(dtype=np.float64)
        ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
        if ref.size == 0 or cur.size == 0:
            log.warning("statistic %s has no finite values; skipped", name)
            continue
        res = RESOLUTION.get(name, 0.0)
        n_moved = 0
        for metric in cfg.metrics:
            effect = _effect(metric, ref, cur, cfg, res)
            threshold = alert_threshold(metric, ref, null_effects(ref, cur.size, cfg, metric, res), cfg, res)
            moved = bool(effect > threshold)
            n_moved += moved
            effects.append(StatisticEffect(name, metric, _finite(effect), _finite(threshold), moved))
        cm, sm = float(np.median(ref)), float(np.median(cur))
        # a ratio against a median within the resolution of 0 divides by rounding noise (StatisticChange.describable)
        rel = (sm - cm) / abs(cm) if cm != 0 and abs(cm) >= res else (0.0 if abs(sm - cm) <= res else math.copysign(1e9, sm - cm))
        frac, median_out = _outside(ref, cur, res)
        moved = n_moved >= cfg.min_metrics or (cfg.range_check and median_out)
        changes.append(StatisticChange(name, cm, sm, _finite(rel), n_moved, moved, metrics.jensen_shannon(ref, cur, bins=cfg.bins),
                                       round(frac, 6), median_out))
    return effects, changes


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else (1e9 if x > 0 else -1e9)


READING_ORDER = ("brightness_mean", "noise_sigma", "contrast_rms", "brightness_p50", "brightness_p5", "brightness_p95",
                 "saturation_mean", "cast_rg", "cast_bg", "sharpness_lapvar", "clip_dark", "clip_bright", "width", "height")
"""Which of equally separated statistics a reader meets first: what a person sees in the images (darker, noisier,
flatter) before what follows from it (a dark image is also less sharp and less saturated)."""


def _rank(c: StatisticChange) -> int:
    return READING_ORDER.index(c.name) if c.name in READING_ORDER else len(READING_ORDER)


def describe_changes(changes: Sequence[StatisticChange]) -> list[str]:
    """Plain phrases (:attr:`StatisticChange.phrase`) of the statistics that moved, most separated first (to 0.1 of
    the Jensen-Shannon distance) and, among those, in :data:`READING_ORDER` (a quality lead reads "brightness fell
    75%" before "blue/green colour balance fell 29%" when both tell the sets apart as well). A moved statistic whose medians cannot describe it (no meaningful relative change, see
    :attr:`~StatisticChange.describable`, and medians within the statistic's resolution of each other) is
    skipped ("changed from 0 to 0" says nothing); only when no other statistic moved is it named, without
    numbers ("blown-out pixels shifted")."""
    moved = sorted((c for c in changes if c.moved), key=lambda c: (-round(c.separation, 1), _rank(c), c.name))
    phrases = [c.phrase for c in moved if c.describable or c.medians_differ]
    return phrases or [f"{PLAIN_NAMES.get(c.name, c.name)} shifted" for c in moved]

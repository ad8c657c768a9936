"""Image statistics of a site set against the calibration set's own variability.

For each statistic and each effect-size metric (normalized Wasserstein-1, PSI, Jensen-Shannon distance;
:mod:`quantkit.metrics`) the site set's effect is compared with an alert threshold derived from the calibration
set: the calibration set is shuffled ``repeats`` times and split into ``chunks`` chunks; each chunk is compared
with the rest with the same metric. These chunk-vs-rest effects are what sampling alone produces when nothing
changed (a permutation null, cf. Good 2005, *Permutation, Parametric and Bootstrap Tests of Hypotheses*). The
threshold is their ``quantile`` (default the maximum) times ``margin``; by default the chunk size matches the site
set's size (``chunks = round(n_calibration / n_site)``, 2..10). A statistic *moved* when at least
``min_metrics`` of its metrics exceed their thresholds.
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
from .config import DEFAULT_STATISTICS, DriftConfig

log = logging.getLogger(__name__)


def _effect(metric: str, ref: np.ndarray, cur: np.ndarray, cfg: DriftConfig) -> float:
    if metric == "wasserstein":
        floor = cfg.spread_floor * abs(float(np.median(ref)))
        return metrics.normalized_wasserstein(ref, cur, scale=metrics.spread(ref, cfg.spread, floor))
    if metric == "psi":
        return metrics.psi(ref, cur, bins=cfg.bins)
    return metrics.jensen_shannon(ref, cur, bins=cfg.bins)


def null_effects(values: np.ndarray, n_site: int, cfg: DriftConfig, metric: str) -> np.ndarray:
    """Chunk-vs-rest effects of one calibration statistic (the "nothing changed" distribution).

    Args:
        values: ``(n,)`` float64 calibration values of the statistic.
        n_site: site set size (sets the automatic chunk count).

    Returns:
        ``(chunks * repeats,)`` float64 effects.

    Raises:
        CalibrationSetError: the calibration set is too small to split.
    """
    n = values.size
    k = cfg.chunks or int(min(10, max(2, round(n / max(n_site, 1)))))
    if n < 2 * k or n < 4:
        raise CalibrationSetError(f"calibration set has {n} images, too few to split into {k} chunks; add images or lower drift.chunks")
    rng = np.random.default_rng(cfg.seed)
    out = []
    for _ in range(cfg.repeats):
        perm = rng.permutation(n)
        for chunk in np.array_split(perm, k):
            mask = np.zeros(n, dtype=bool)
            mask[chunk] = True
            out.append(_effect(metric, values[~mask], values[mask], cfg))
    return np.asarray(out, dtype=np.float64)


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
        n_moved = 0
        for metric in cfg.metrics:
            effect = _effect(metric, ref, cur, cfg)
            null = null_effects(ref, cur.size, cfg, metric)
            threshold = float(np.quantile(null, cfg.quantile)) * cfg.margin
            moved = bool(effect > threshold)
            n_moved += moved
            effects.append(StatisticEffect(name, metric, _finite(effect), _finite(threshold), moved))
        cm, sm = float(np.median(ref)), float(np.median(cur))
        rel = (sm - cm) / abs(cm) if cm != 0 else (0.0 if sm == 0 else math.copysign(1e9, sm))
        changes.append(StatisticChange(name, cm, sm, _finite(rel), n_moved, n_moved >= cfg.min_metrics, metrics.jensen_shannon(ref, cur, bins=cfg.bins)))
    return effects, changes


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else (1e9 if x > 0 else -1e9)


def describe_changes(changes: Sequence[StatisticChange]) -> list[str]:
    """Plain phrases (:attr:`StatisticChange.phrase`) of the statistics that moved, most separated
    first. A moved statistic whose medians cannot describe it (see :attr:`~StatisticChange.describable`)
    is skipped ("changed from 0 to 0" says nothing); only when no other statistic moved is it named,
    without numbers ("blown-out pixels shifted")."""
    moved = sorted((c for c in changes if c.moved), key=lambda c: (-c.separation, c.name))
    phrases = [c.phrase for c in moved if c.describable]
    return phrases or [f"{PLAIN_NAMES.get(c.name, c.name)} shifted" for c in moved]

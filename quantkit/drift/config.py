"""``params.yaml: drift``: how a site set is compared with the calibration set (see :mod:`quantkit.drift.check`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from ..calibset.stats import STAT_COLUMNS
from ..config import Config
from ..errors import ConfigError

Metric = Literal["wasserstein", "psi", "js"]

DEFAULT_STATISTICS: tuple[str, ...] = STAT_COLUMNS
"""Statistics compared by default: every column of the set's ``stats.csv``."""


@dataclasses.dataclass(frozen=True)
class DriftConfig(Config):
    """Options of ``quantkit drift`` (``params.yaml: drift``).

    Attributes:
        statistics: per-image statistic columns to compare; empty = every known column present.
        metrics: effect sizes per statistic (``wasserstein`` is W1 / calibration spread).
        spread: calibration spread that normalizes W1: ``iqr`` (IQR/1.349, robust) or ``std``.
        spread_floor: floor on that spread relative to ``|median|`` (a constant statistic such as
            width still gets a finite effect).
        bins: quantile bins of the calibration sample for PSI and JS (5 keeps >= 5 expected images
            per bin for a 32-image site set, the usual chi-square rule).
        chunks: chunks per shuffle of the calibration set; 0 = auto (chunk size ~ site size).
        repeats: shuffles of the calibration set (the null has ``chunks * repeats`` effects).
        quantile: quantile of the null effects used as threshold (1.0 = max).
        margin: factor on that quantile.
        min_metrics: how many metrics must exceed their thresholds for a statistic to count as moved.
        seed: seed of the shuffles (same inputs, same result).
        clipping: measure activation clipping (needs ``--quantized`` and ``--fp32``).
        clip_images: images sampled (evenly) from each set for clipping, 0 = all.
        clip_ratio, clip_floor: clipping moved when ``rate > max(baseline*ratio, baseline+floor)``.
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True

    statistics: tuple[str, ...] = ()
    metrics: tuple[Metric, ...] = ("wasserstein", "psi", "js")
    spread: Literal["iqr", "std"] = "iqr"
    spread_floor: float = 0.01
    bins: int = 5
    chunks: int = 0
    repeats: int = 25
    quantile: float = 1.0
    margin: float = 1.5
    min_metrics: int = 2
    seed: int = 0
    clipping: bool = True
    clip_images: int = 8
    clip_ratio: float = 2.0
    clip_floor: float = 0.001

    def validate(self) -> None:
        if not self.metrics:
            raise ConfigError("drift.metrics: list at least one of wasserstein, psi, js")
        if len(set(self.metrics)) != len(self.metrics):
            raise ConfigError(f"drift.metrics: {list(self.metrics)} repeats a metric; list each once")
        if not 1 <= self.min_metrics <= len(self.metrics):
            raise ConfigError(f"drift.min_metrics: {self.min_metrics} must be between 1 and the number of metrics ({len(self.metrics)})")
        if self.bins < 2:
            raise ConfigError(f"drift.bins: {self.bins} must be at least 2")
        if self.chunks == 1 or self.chunks < 0:
            raise ConfigError(f"drift.chunks: {self.chunks} must be 0 (auto) or at least 2")
        if self.repeats < 1:
            raise ConfigError(f"drift.repeats: {self.repeats} must be at least 1")
        if not 0.5 <= self.quantile <= 1.0:
            raise ConfigError(f"drift.quantile: {self.quantile} must be in 0.5..1.0")
        if self.margin < 1.0:
            raise ConfigError(f"drift.margin: {self.margin} must be at least 1.0")
        if self.spread_floor < 0 or self.clip_floor < 0 or self.clip_ratio < 1.0 or self.clip_images < 0:
            raise ConfigError("drift: spread_floor and clip_floor must be >= 0, clip_ratio >= 1, clip_images >= 0")

"""``params.yaml: drift``: how a site set is compared with the calibration set (see :mod:`quantkit.drift.check`)."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Literal

from ..artifacts.drift import RESOLUTION  # noqa: F401 - defined with the result that reads it, used by the drift check
from ..calibset.stats import STAT_COLUMNS
from ..config import Config
from ..errors import ConfigError

Metric = Literal["wasserstein", "psi", "js"]

DEFAULT_STATISTICS: tuple[str, ...] = STAT_COLUMNS
"""Statistics compared by default: every column of the set's ``stats.csv``."""

MIN_EFFECT: dict[str, float] = {"psi": 0.1, "wasserstein": 0.1 ** 0.5, "js": (0.1 / (8 * math.log(2))) ** 0.5}
"""Floor of each metric's alert threshold: an effect below it never counts, however small the calibration
set's own variability (e.g. zero for a constant statistic). PSI 0.1 is the "no significant shift" bound
(Siddiqi 2006, :data:`quantkit.metrics.PSI_MODERATE`); the others are its equivalents for a mean shift of two
normal distributions with equal variance: PSI (Jeffreys divergence) = delta^2, normalized W1 = delta, so
W1 = sqrt(0.1) = 0.32; JS divergence ~ Jeffreys / 8 nats for close distributions (second-order expansion of
KL), so JS distance (base 2) = sqrt(0.1 / (8 ln 2)) = 0.13."""

BOUNDED_METRICS = ("psi", "js")
"""Metrics whose effect on the calibration quantile bins has a largest value, reached when every site image
lies beyond the calibration range (JS distance <= 1 with log base 2; PSI is bounded here because empty bins
are floored at :data:`quantkit.metrics.PSI_EPSILON`). Their thresholds are capped below it
(``DriftConfig.threshold_cap``)."""


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
        range_check: a statistic also moved when the site set's median lies outside the calibration set's
            range ``[min - r, max + r]`` (``r``: :data:`RESOLUTION`). Under "nothing changed" (site and
            calibration images exchangeable) this needs the top (or bottom) half of the site set beyond every
            calibration image: probability below 0.01 for 12 site and 16 calibration images (hypergeometric,
            both tails), far less for larger sets; it holds at any calibration size, where the chunk-vs-rest
            thresholds do not.
        threshold_cap: cap of the thresholds of PSI and JS (:data:`BOUNDED_METRICS`) as a fraction of the
            effect of a site set entirely beyond the calibration range, so that a complete separation is
            always detected (on a small calibration set chunk-vs-rest effects can reach that maximum).
        min_calibration_images, min_chunk_images: below either (calibration images; images per chunk) the
            chunk-vs-rest thresholds are called unreliable in the result (``small_calibration``) and a
            warning is logged: with 5 quantile bins a chunk of fewer than 8 images has under 2 images per
            bin, and the maximum over few, small chunks is dominated by a handful of images.
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
    range_check: bool = True
    threshold_cap: float = 0.9
    min_calibration_images: int = 32
    min_chunk_images: int = 8
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
        if self.seed < 0:
            raise ConfigError(f"drift.seed: {self.seed} must be >= 0 (numpy's generators take no negative seed)")
        if not 0.5 <= self.quantile <= 1.0:
            raise ConfigError(f"drift.quantile: {self.quantile} must be in 0.5..1.0")
        if self.margin < 1.0:
            raise ConfigError(f"drift.margin: {self.margin} must be at least 1.0")
        if not 0 < self.threshold_cap <= 1:
            raise ConfigError(f"drift.threshold_cap: {self.threshold_cap} must be in (0, 1]")
        if self.min_calibration_images < 1 or self.min_chunk_images < 1:
            raise ConfigError("drift: min_calibration_images and min_chunk_images must be at least 1")
        if self.spread_floor < 0 or self.clip_floor < 0 or self.clip_ratio < 1.0 or self.clip_images < 0:
            raise ConfigError("drift: spread_floor and clip_floor must be >= 0, clip_ratio >= 1, clip_images >= 0")

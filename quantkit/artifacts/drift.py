"""The drift result (``work/drift/<site>.json``): is a site set still like the deployed calibration set?

Written by ``quantkit drift``; read by the report. ``changed`` says the images moved beyond the calibration
set's own variability (or INT8 activations clip more); whether to recalibrate also depends on whether the
deployed model still agrees with FP32, which the report decides with the evaluation (the same words in both).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from ..config import Config
from .base import Artifact
from .record import SetRef

PLAIN_NAMES = {
    "width": "image width",
    "height": "image height",
    "brightness_mean": "brightness",
    "brightness_p5": "shadow brightness (p5)",
    "brightness_p50": "median brightness",
    "brightness_p95": "highlight brightness (p95)",
    "contrast_rms": "contrast",
    "cast_rg": "red/green colour balance",
    "cast_bg": "blue/green colour balance",
    "saturation_mean": "colour saturation",
    "sharpness_lapvar": "sharpness",
    "noise_sigma": "noise",
    "clip_dark": "crushed-black pixels",
    "clip_bright": "blown-out pixels",
}
"""Plain names of the image statistics (:mod:`quantkit.calibset.stats`) for readers who are not ML engineers."""

SHARE_STATISTICS = ("clip_dark", "clip_bright")
"""Statistics that are a share of an image's pixels (0..1), written as percent."""

SIZE_STATISTICS = ("width", "height")
"""Statistics reported but never enough on their own to call a set changed: the model input is resized anyway."""

RESOLUTION: dict[str, float] = {
    "width": 1.0, "height": 1.0,                       # one pixel
    "brightness_mean": 1.0, "brightness_p5": 1.0,      # one 8-bit luma level
    "brightness_p50": 1.0, "brightness_p95": 1.0,
    "contrast_rms": 1.0 / 255, "saturation_mean": 1.0 / 255,  # one 8-bit level on a 0..1 scale
    "cast_rg": 1.0 / 128, "cast_bg": 1.0 / 128,        # one 8-bit level of a channel at mid-grey (128)
    "sharpness_lapvar": 1.0,                           # luma^2 units: one level squared
    "noise_sigma": 0.05,                               # luma levels
    "clip_dark": 0.01, "clip_bright": 0.01,            # 1% of the pixels
}
"""Smallest difference that counts, per statistic, in the statistic's own units (:mod:`quantkit.calibset.stats`).

It is the floor of the calibration spread that normalizes W1 (so a statistic that is constant on the calibration
set, e.g. no crushed-black pixels on any image, still gives a finite effect) and the half-width of the middle bin
when the calibration range is narrower than it (:func:`quantkit.metrics.quantile_edges`), so values closer than
this are the same value. A statistic not listed gets no floor beyond ``spread_floor``."""


@dataclasses.dataclass(frozen=True)
class StatisticEffect(Config):
    """One statistic under one effect-size metric: the site set's effect vs the calibration-derived threshold."""

    VERSIONED: ClassVar[bool] = False

    name: str
    metric: str
    effect: float
    threshold: float
    moved: bool


@dataclasses.dataclass(frozen=True)
class StatisticChange(Config):
    """How one statistic changed: medians of calibration and site set, relative change, verdict.

    ``relative_change`` is ``(site - calibration) / |calibration|`` of the medians where that means something
    (:attr:`describable`); otherwise 0 when the medians are within the statistic's :attr:`resolution` of each
    other, else +-1e9 (the sign of the change).
    ``separation`` is the Jensen-Shannon distance (base 2, 0..1) between the calibration and site values on
    the calibration quantile bins: bounded and unitless, so it ranks statistics of different units.
    ``outside_fraction`` is the fraction (0..1) of site images outside the calibration range widened by the
    statistic's resolution (:data:`RESOLUTION`); ``median_outside`` whether the site
    median is (then the statistic moved, whatever the thresholds; ``DriftConfig.range_check``).
    """

    VERSIONED: ClassVar[bool] = False

    name: str
    calibration_median: float
    site_median: float
    relative_change: float
    metrics_moved: int
    moved: bool
    separation: float = 0.0
    outside_fraction: float = 0.0
    median_outside: bool = False

    @property
    def label(self) -> str:
        return PLAIN_NAMES.get(self.name, self.name)

    @property
    def resolution(self) -> float:
        """The smallest difference that counts for this statistic, in its own units
        (:data:`RESOLUTION`; 0 for a statistic not listed there)."""
        return RESOLUTION.get(self.name, 0.0)

    @property
    def describable(self) -> bool:
        """Whether a relative change of the medians means something: false when the calibration median is 0 or
        smaller in magnitude than the statistic's :attr:`resolution` (values closer than it are the same value, so
        a ratio against it divides by rounding noise: a noise sigma of 6e-31 luma levels on clean images is 0), or
        when a median is not finite."""
        c, s = self.calibration_median, self.site_median
        return math.isfinite(c) and math.isfinite(s) and c != 0 and abs(c) >= self.resolution

    @property
    def medians_differ(self) -> bool:
        """Whether the medians differ by at least the statistic's :attr:`resolution` (and at all)."""
        d = abs(self.site_median - self.calibration_median)
        return math.isfinite(d) and d > 0 and d >= self.resolution

    def value_text(self, value: float) -> str:
        """A value of this statistic for a table: 4 significant digits, ``0``, or ``~0`` when it is not 0 but
        smaller in magnitude than the statistic's :attr:`resolution` (``5.848e-31`` says nothing more)."""
        if value != 0 and abs(value) < self.resolution:
            return "~0"
        return f"{value:.4g}"

    @property
    def change_text(self) -> str:
        """The relative change of the medians for a table (``-68%``), ``n/a`` when not :attr:`describable`."""
        return f"{100.0 * self.relative_change:+.0f}%" if self.describable else "n/a"

    @property
    def phrase(self) -> str:
        """Plain words, e.g. ``"brightness fell 68%"``, ``"noise rose 2.1x"`` or, against a calibration median
        that is not :attr:`describable`, ``"noise changed from ~0 to 2.791"``."""
        c, s = self.calibration_median, self.site_median
        if self.name in SHARE_STATISTICS and math.isfinite(c) and math.isfinite(s):  # a share of the pixels: as percent
            return f"{self.label} {'rose' if s > c else 'fell'} from {100 * c:.2g}% to {100 * s:.2g}% of the image"
        if not self.describable:
            return f"{self.label} changed from {self.value_text(c)} to {self.value_text(s)}"
        ratio = s / c
        if ratio >= 2.0:
            return f"{self.label} rose {ratio:.1f}x"
        if ratio <= 0.0:
            return f"{self.label} changed from {c:.3g} to {s:.3g}"
        return f"{self.label} {'rose' if ratio > 1 else 'fell'} {100.0 * abs(ratio - 1.0):.0f}%"


@dataclasses.dataclass(frozen=True)
class ClippedTensor(Config):
    VERSIONED: ClassVar[bool] = False

    tensor: str
    rate: float


@dataclasses.dataclass(frozen=True)
class Clipping(Config):
    """Activation clipping of the INT8 model: fraction of FP32 activation values outside the INT8 range.

    ``rate`` (site) and ``baseline`` (calibration) are means over quantized activation tensors of the
    per-tensor clipped fraction (0..1); ``worst`` the top tensors on the site set.
    """

    VERSIONED: ClassVar[bool] = False

    rate: float
    baseline: float
    threshold: float
    moved: bool
    images: int
    baseline_images: int
    tensors: int
    worst: tuple[ClippedTensor, ...] = ()


@dataclasses.dataclass(frozen=True)
class DriftResult(Artifact):
    """Outcome of a drift check. ``statistics``: one entry per (statistic, metric); ``changes``: one per
    statistic; ``clipping``: None when not measured; ``changed``: the images (or clipping) moved beyond the
    calibration set's variability; ``reasons``: plain sentences; ``small_calibration``: the calibration set is
    too small for thresholds from its own variability (``DriftConfig.min_calibration_images`` /
    ``min_chunk_images``), said in plain words in ``warnings``."""

    KIND: ClassVar[str] = "drift result"
    PRODUCER: ClassVar[str] = "quantkit drift"
    SCHEMA_VERSION: ClassVar[int] = 3

    site_set: SetRef
    calibration_set: SetRef
    statistics: tuple[StatisticEffect, ...]
    changes: tuple[StatisticChange, ...]
    clipping: Clipping | None
    changed: bool
    reasons: tuple[str, ...]
    config: dict[str, Any]
    record_fingerprint: str = ""
    small_calibration: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def moved(self) -> list[str]:
        """Names of the statistics that moved."""
        return [c.name for c in self.changes if c.moved]

    @classmethod
    def migrate(cls, data: dict[str, Any], version: Any, path: Any) -> dict[str, Any]:
        """Schema 1 (quantkit 0.1): ``recalibrate`` -> ``changed``, set dicts with ``path`` kept, clipping ``worst``
        as it was. Schema 2: no ``small_calibration`` / ``warnings`` and no ``outside_fraction`` /
        ``median_outside`` per statistic; they take their defaults (not small, no warning, nothing outside): a
        v2 result was judged by its thresholds alone, and it is not re-judged here."""
        if version not in (1, 2):
            return super().migrate(data, version, path)
        d = dict(data)
        if version == 1:
            d = {k: v for k, v in data.items() if k != "recalibrate"}
            d["changed"] = bool(data.get("recalibrate"))
        d["schema_version"] = cls.SCHEMA_VERSION
        return d

    def __repr__(self) -> str:
        return f"DriftResult(site={self.site_set.name!r}, changed={self.changed}, moved={self.moved})"

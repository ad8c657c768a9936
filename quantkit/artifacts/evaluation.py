"""The evaluation summary (``work/models/<model>/eval/<site>/summary.json``): decisions of FP32 and quantized models
on a site set, pooled into the task's metrics.

Written by ``quantkit evaluate`` next to ``per_image.csv`` (one row per image and variant: the counts behind
every metric), ``score_hist.json`` and ``detections.json``; read by the report. Metrics are ratios of sums over
the site set's images (:class:`quantkit.tasks.MetricSpec`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..config import Config
from ..errors import ConfigError
from .base import Artifact
from .record import SetRef
from .thresholds import NearLineCounts


@dataclasses.dataclass(frozen=True)
class MetricInfo(Config):
    """A metric as the report shows it: ``kind`` ``agreement`` (vs FP32) or ``accuracy`` (vs ground truth)."""

    VERSIONED: ClassVar[bool] = False

    name: str
    label: str
    kind: str
    higher_is_better: bool = True
    description: str = ""


@dataclasses.dataclass(frozen=True)
class VariantSummary(Config):
    """One variant (``fp32``, a role, or ``<role>@fp32-thresholds``) over the site set.

    ``detections_per_image``: mean items per image; ``alarm_rate``: share of images with at least one item;
    ``agreement`` / ``accuracy``: metric name -> pooled value; ``counts``: the summed counts behind them.
    """

    VERSIONED: ClassVar[bool] = False

    images: int
    detections_per_image: float
    alarm_rate: float
    agreement: dict[str, float] = dataclasses.field(default_factory=dict)
    accuracy: dict[str, float] = dataclasses.field(default_factory=dict)
    counts: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class EvaluatedModel(Config):
    """A quantized model that was evaluated, named by the artifacts it was built from (so a consumer can check
    that the evaluation belongs to the record and thresholds it is shown with)."""

    VERSIONED: ClassVar[bool] = False

    record_fingerprint: str
    quantized_model_digest: str
    calibration_set: str
    thresholds_fingerprint: str
    values: dict[str, float]
    fp32_values: dict[str, float]
    integer_domain: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class NearLine(Config):
    """Decisions near the line: how many of FP32's decisions on the site set lie within one (and ``k``) integer steps
    of a role's bound primary threshold, against the same share on the reference set that role's thresholds were
    bound on (its calibration-side baseline). Label-free: a rising share says INT8's decisions are becoming fragile
    (a one-code move flips them) before agreement with FP32 falls.

    ``site``: the counts on this site set (:class:`quantkit.artifacts.thresholds.NearLineCounts`: the step is the
    scale of the tensor the threshold compares against, in that tensor's float units); ``baseline``: the threshold
    set's counts on its reference set (None when it was bound before quantkit counted them: re-run ``quantkit bind``);
    ``k``: the wider band, in steps (``thresholds.near_line_steps``); ``reference_set``: the baseline's set name.
    Shares are 0..1; changes are site minus baseline, in share units (0.09 = 9 percentage points); None without a
    baseline.
    """

    VERSIONED: ClassVar[bool] = False

    site: NearLineCounts
    k: int
    baseline: NearLineCounts | None = None
    reference_set: str = ""

    def validate(self) -> None:
        if not 1 <= self.k <= len(self.site.within):
            raise ConfigError(f"near_line.k: {self.k} must be in 1..{len(self.site.within)}")
        if self.baseline is not None and self.baseline.threshold != self.site.threshold:
            raise ConfigError(f"near_line: baseline counts threshold {self.baseline.threshold!r}, the site set {self.site.threshold!r}")

    @property
    def decisions(self) -> int:
        """FP32 decisions counted on the site set."""
        return self.site.decisions

    @property
    def share_1(self) -> float:
        """Share of the site set's FP32 decisions within one integer step of the line (0..1)."""
        return self.site.share(1)

    @property
    def share_k(self) -> float:
        """Share within ``k`` integer steps (0..1)."""
        return self.site.share(self.k)

    @property
    def baseline_1(self) -> float | None:
        """The same share within one step on the reference set (None without a baseline)."""
        return self.baseline.share(1) if self.baseline is not None else None

    @property
    def baseline_k(self) -> float | None:
        """The share within ``k`` steps on the reference set (None without a baseline)."""
        return self.baseline.share(self.k) if self.baseline is not None else None

    @property
    def change_1(self) -> float | None:
        """``share_1 - baseline_1`` (None without a baseline)."""
        return None if self.baseline_1 is None else self.share_1 - self.baseline_1

    @property
    def change_k(self) -> float | None:
        """``share_k - baseline_k`` (None without a baseline)."""
        return None if self.baseline_k is None else self.share_k - self.baseline_k

    def __repr__(self) -> str:
        base = "no baseline" if self.baseline_1 is None else f"baseline {self.baseline_1:.1%}"
        return f"NearLine({self.site.threshold}: {self.share_1:.1%} of {self.decisions} within 1 step, {base})"


@dataclasses.dataclass(frozen=True)
class EvalSummary(Artifact):
    """The evaluation of one site set (see the module docstring)."""

    KIND: ClassVar[str] = "evaluation summary"
    FILENAME: ClassVar[str] = "summary.json"
    PRODUCER: ClassVar[str] = "quantkit evaluate"
    SCHEMA_VERSION: ClassVar[int] = 2

    site_set: SetRef
    fp32_model_digest: str
    task: str
    task_options: dict[str, Any]
    primary_metric: str
    metrics: tuple[MetricInfo, ...]
    item: str
    scores: str
    labelled: bool
    images: int
    fp32_thresholds: dict[str, float]
    variants: dict[str, VariantSummary]
    models: dict[str, EvaluatedModel] = dataclasses.field(default_factory=dict)
    near_line: dict[str, NearLine] = dataclasses.field(default_factory=dict)
    """Role -> :class:`NearLine` (roles whose primary threshold has an integer form); absent in summaries written
    before quantkit counted it (no key, no near-line section in the report)."""

    def metric(self, name: str) -> MetricInfo:
        """The metric named ``name``. Raises KeyError."""
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"EvalSummary({self.site_set.name!r}, {self.task}, {self.images} images, variants={list(self.variants)})"

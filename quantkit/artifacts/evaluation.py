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
from .base import Artifact
from .record import SetRef


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

    def metric(self, name: str) -> MetricInfo:
        """The metric named ``name``. Raises KeyError."""
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"EvalSummary({self.site_set.name!r}, {self.task}, {self.images} images, variants={list(self.variants)})"

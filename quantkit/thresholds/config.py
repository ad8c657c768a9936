"""``params.yaml: thresholds``: how a quantized model's thresholds are re-derived and when bind refuses."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from ..artifacts.thresholds import NEAR_LINE_STEPS
from ..config import Config
from ..errors import ConfigError

Mode = Literal["keep_fp32", "fixed_far", "target_recall", "best_f1"]


@dataclasses.dataclass(frozen=True)
class OperatingPointConfig(Config):
    """How thresholds are re-derived (see :mod:`quantkit.thresholds.search`).

    Attributes:
        mode: ``keep_fp32`` (best agreement with FP32's decisions), ``fixed_far`` (false-alarm rate on a
            negatives-only set), ``target_recall`` / ``best_f1`` (against ground truth).
        grid_step: candidate spacing, in threshold units.
        target_far: the false-alarm rate ``fixed_far`` keeps (share of images with >= 1 item).
        target_recall: the recall ``target_recall`` keeps.
        bootstrap_resamples, bootstrap_seed, confidence: confidence intervals over images: Clopper-Pearson
            for proportions, else BCa bootstrap (:mod:`quantkit.thresholds.stats`).
    """

    mode: Mode = "keep_fp32"
    grid_step: float = 0.01
    target_far: float = 0.05
    target_recall: float = 0.9
    bootstrap_resamples: int = 1000
    bootstrap_seed: int = 0
    confidence: float = 0.95

    def validate(self) -> None:
        if not 0 < self.grid_step <= 0.5:
            raise ConfigError(f"thresholds.operating_point.grid_step: {self.grid_step} must be in (0, 0.5]")
        for name in ("target_far", "target_recall", "confidence"):
            v = getattr(self, name)
            if not 0 < v < 1 and not (name == "target_recall" and v == 1):
                raise ConfigError(f"thresholds.operating_point.{name}: {v} must be in (0, 1)")
        if self.bootstrap_resamples < 10:
            raise ConfigError(f"thresholds.operating_point.bootstrap_resamples: {self.bootstrap_resamples} must be >= 10")
        if self.bootstrap_seed < 0:
            raise ConfigError(f"thresholds.operating_point.bootstrap_seed: {self.bootstrap_seed} must be >= 0 (numpy's generators take no negative seed)")

    def bootstrap_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`quantkit.thresholds.stats.bootstrap_ratio` for this config."""
        return {"resamples": self.bootstrap_resamples, "seed": self.bootstrap_seed, "confidence": self.confidence}


@dataclasses.dataclass(frozen=True)
class ThresholdsConfig(Config):
    """``params.yaml: thresholds``.

    Attributes:
        operating_point: how values are chosen.
        min_agreement: bind refuses (exit 6) when the task's primary agreement metric (e.g. pixel IoU,
            box F1, top-1 agreement, exact-string agreement) of the INT8 model at its chosen thresholds is
            below this on the reference set: thresholds would be bound to a model that does not reproduce
            FP32's decisions.
        near_line_steps: the wider band of "decisions near the line", in integer steps of the tensor a threshold
            compares against (one step = that tensor's scale): bind counts FP32's decisions within 1 and within this
            many steps of the bound primary threshold on the reference set (the baseline), evaluate on each site set.
            Default 3: within three codes, a decision can flip from rounding and small input changes together;
            1..8 (:data:`quantkit.artifacts.thresholds.NEAR_LINE_STEPS`).
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True  # no section: the defaults

    operating_point: OperatingPointConfig = dataclasses.field(default_factory=OperatingPointConfig)
    min_agreement: float = 0.5
    near_line_steps: int = 3

    def validate(self) -> None:
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ConfigError(f"thresholds.min_agreement: {self.min_agreement} must be in [0, 1]")
        if not 1 <= self.near_line_steps <= NEAR_LINE_STEPS:
            raise ConfigError(f"thresholds.near_line_steps: {self.near_line_steps} must be in 1..{NEAR_LINE_STEPS}")

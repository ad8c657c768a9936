"""``FallbackConfig``: the precision fallback's settings, one typed section of params.yaml (``fallback``).

Defaults live here and only here; the CLI derives its flags from these fields.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from ...config import Config
from ...errors import ConfigError
from ..recovery.config import RecoveryConfig
from ...runtimes.latency import LatencyConfig


@dataclasses.dataclass(frozen=True)
class FallbackConfig(Config):
    """params.yaml ``fallback``.

    Fields:
        target: agreement with FP32 (the task's metric, :func:`.metric.agreement_metric`) the worst
            reference set must reach, in (0, 1].
        strategy: ``float`` (promoted nodes are excluded from quantization) or ``int16`` (their activations
            get 16-bit ``TensorQuantOverrides``; on ONNX Runtime's CPU provider 16-bit QDQ runs as float
            with conversions, measured slower than FP32).
        search: ``bisect`` (task-metric bisection over the node order, then pruning) or ``sqnr`` (local SQNR
            ranking of activations, ``step`` per round); :mod:`.search`.
        step: sqnr search: activations promoted per round.
        max_kept: most units promoted (nodes for bisect, activations for sqnr); None: no limit for bisect,
            48 for sqnr.
        prune: bisect: blocks of the window tried back in 8 bits (one round each; 0: keep the window whole).
        transition_cost: float nodes one Q/DQ edge between a float and an 8-bit node is worth; pruning only
            returns a block to 8 bits when that lowers ``nodes + transition_cost x edges`` (it prefers
            contiguous islands).
        max_reference_images: use the first N images of each reference set (None: all).
        early_stop: stop evaluating a candidate as soon as one set is proven below the target (sets are
            evaluated worst first; a metric with an ``upper_bound`` also stops within a set).
        fail_if_slower: the fallback fails (exit 1) when the result is not faster than FP32 on a runtime and
            thread count of ``latency``; otherwise that is reported (``slower_than_fp32``) and warned about.
        latency: how the result is timed against FP32 (runtimes, thread counts, repeats).
        timings: time the result (``latency``) and record wall times (``seconds``) in ``fallback.json``. False in a
            DVC pipeline: the result is then the same bytes on every run and machine (``dvc.lock`` stays as
            committed), and ``quantkit measure`` times the models beside the report instead.
        recovery: accuracy-recovery techniques applied before the search.
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True  # no section: the defaults

    target: float = 0.95
    strategy: Literal["float", "int16"] = "float"
    search: Literal["bisect", "sqnr"] = "bisect"
    step: int = 4
    max_kept: int | None = None
    prune: int = 8
    transition_cost: float = 1.0
    max_reference_images: int | None = None
    early_stop: bool = True
    fail_if_slower: bool = False
    latency: LatencyConfig = dataclasses.field(default_factory=LatencyConfig)
    timings: bool = True
    recovery: RecoveryConfig = dataclasses.field(default_factory=RecoveryConfig)

    def validate(self) -> None:
        if not 0.0 < self.target <= 1.0:
            raise ConfigError(f"fallback.target: {self.target} must lie in (0, 1], e.g. 0.96 (agreement with FP32)")
        if self.step < 1:
            raise ConfigError(f"fallback.step: {self.step} must be >= 1 (activations promoted per round)")
        if self.max_kept is not None and self.max_kept < 0:
            raise ConfigError(f"fallback.max_kept: {self.max_kept} must be >= 0 (or null: no limit)")
        if self.prune < 0:
            raise ConfigError(f"fallback.prune: {self.prune} must be >= 0 (blocks tried; 0 keeps the window whole)")
        if self.transition_cost < 0:
            raise ConfigError(f"fallback.transition_cost: {self.transition_cost} must be >= 0")
        if self.max_reference_images is not None and self.max_reference_images < 1:
            raise ConfigError(f"fallback.max_reference_images: {self.max_reference_images} must be >= 1 (null: every image)")


__all__ = ["FallbackConfig"]

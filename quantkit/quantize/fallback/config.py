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
            reference set must reach, in (0, 1]; None (the default): the model's green line, ``report.min_agreement``
            (:attr:`quantkit.decision.AgreementPolicy.fallback_target`: a fallback that stops below it makes a model the
            report calls amber, so the two are one number), resolved by :meth:`with_target`.
        strategy: ``float`` (promoted nodes are excluded from quantization) or ``int16`` (their activations
            get 16-bit ``TensorQuantOverrides``; on ONNX Runtime's CPU provider 16-bit QDQ runs as float
            with conversions, measured slower than FP32).
        search: ``bisect`` (task-metric bisection of contiguous windows in the node order: the shortest prefix,
            the shortest suffix (the head) and the island between them, then pruning), ``sensitivity`` (units of the graph
            ranked by the task metric each gains when it alone is kept in float, on 8 search images; then the fewest
            top-ranked units that meet the target, not necessarily contiguous) or ``sqnr`` (local SQNR ranking of
            activations, ``step`` per round); :mod:`.search`. With any of them, an all-8-bit model that misses on the
            search images but meets the target on the held-out ones is written as it is.
        pick: which candidate that meets the target on the search images is written: ``cost`` (fewest
            ``nodes + transition_cost x Q/DQ edges``) or ``latency`` (the fastest, timed interleaved with FP32 by
            ``latency``; needs ``timings``).
        step: sqnr search: activations promoted per round.
        max_kept: most units promoted (nodes for bisect, activations for sqnr); None: no limit for bisect,
            48 for sqnr.
        prune: bisect: blocks of the cheapest window tried back in 8 bits (one round each; 0: keep the window whole, and
            narrow a prefix or suffix by bisection when no island between them met the target).
        transition_cost: float nodes one Q/DQ edge between a float and an 8-bit node is worth; pruning only
            returns a block to 8 bits when that lowers ``nodes + transition_cost x edges`` (it prefers
            contiguous islands).
        max_reference_images: use the first N images of each reference set (None: all).
        holdout: share of each reference set's images held out of the search (:mod:`.holdout`: a seeded hash
            of each image's content picks ``round(holdout x N)`` of the N, at least 1 and at most N - 1); the
            written figure, and the target's final check, are measured on those images only. 0: no split (the
            figure is then the search's own, in-sample and optimistic, and is labelled so).
        seed: seed of the held-out split and of the bootstrap resamples of its interval.
        confidence: two-sided level of the held-out figure's interval (bootstrap over the held-out images,
            :func:`quantkit.thresholds.stats.bootstrap_ratio`).
        bootstrap_resamples: resamples of that interval.
        early_stop: stop evaluating a candidate as soon as one set is proven below the target (sets are
            evaluated worst first; a metric with an ``upper_bound`` also stops within a set).
        fail_if_missed: the fallback fails (exit 1) when the written model's held-out figure misses the target; false:
            the model, ``fallback.json`` (``met: false``) and the report say so and the command succeeds (a pipeline
            then carries on with a candidate marked as short of its target).
        fail_if_slower: the fallback fails (exit 1) when the result is not faster than FP32 on a runtime and
            thread count of ``latency``; otherwise that is reported (``slower_than_fp32``) and warned about.
        latency: how the result is timed against FP32 (runtimes, thread counts, repeats).
        timings: time the result (``latency``) and record wall times (``seconds``) in ``fallback.json``. False in a
            DVC pipeline: the result is then the same bytes on every run and machine (``dvc.lock`` stays as
            committed), and ``quantkit measure`` times the models beside the report instead.
        recovery: accuracy-recovery techniques applied before the search.
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True  # no section: the defaults

    target: float | None = None
    strategy: Literal["float", "int16"] = "float"
    search: Literal["bisect", "sensitivity", "sqnr"] = "bisect"
    pick: Literal["cost", "latency"] = "cost"
    step: int = 4
    max_kept: int | None = None
    prune: int = 8
    transition_cost: float = 1.0
    max_reference_images: int | None = None
    holdout: float = 0.5
    seed: int = 0
    confidence: float = 0.95
    bootstrap_resamples: int = 1000
    early_stop: bool = True
    fail_if_missed: bool = True
    fail_if_slower: bool = False
    latency: LatencyConfig = dataclasses.field(default_factory=LatencyConfig)
    timings: bool = True
    recovery: RecoveryConfig = dataclasses.field(default_factory=RecoveryConfig)

    def with_target(self, green: float) -> "FallbackConfig":
        """This config with ``target`` set: its own when stated, else ``green`` (the model's ``report.min_agreement``)."""
        return self if self.target is not None else self.replace(target=green)

    def validate(self) -> None:
        if self.target is not None and not 0.0 < self.target <= 1.0:
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
        if not 0.0 <= self.holdout < 1.0:
            raise ConfigError(f"fallback.holdout: {self.holdout} must lie in [0, 1), e.g. 0.5 (share of each reference set held out)")
        if self.seed < 0:
            raise ConfigError(f"fallback.seed: {self.seed} must be >= 0 (numpy's generators take no negative seed)")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"fallback.confidence: {self.confidence} must lie in (0, 1), e.g. 0.95")
        if self.bootstrap_resamples < 10:
            raise ConfigError(f"fallback.bootstrap_resamples: {self.bootstrap_resamples} must be >= 10")
        if self.pick == "latency" and not self.timings:
            raise ConfigError("fallback.pick: latency times every candidate; set fallback.timings: true, or pick: cost")


__all__ = ["FallbackConfig"]

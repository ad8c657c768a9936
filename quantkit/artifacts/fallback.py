"""``fallback.json``: what the precision fallback kept in float and why, the metric per reference set, every
round it measured, and the latency of the result against FP32 (and the deployed model) per runtime.

Imports no runtime and no quantization engine: a report can read it cheaply.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from .base import Artifact
from .record import SetRef
from ..config import Config


@dataclasses.dataclass(frozen=True)
class Round(Config):
    """One measured candidate.

    ``kept``: promoted units (nodes; activations for the sqnr search); ``window`` / ``pruned``: bisection
    window ``[j, k)`` and the block tried without promotion (indices in graph order); ``metric``: the worst
    set's value, or, when the round stopped early (``complete`` false), the bound that proved it misses
    the target; ``worst_set``: that set; ``per_set``: sets evaluated to the end; ``transitions``: Q/DQ
    edges between promoted and 8-bit nodes; ``seconds``: wall time of the round (build + evaluate).
    """

    VERSIONED: ClassVar[bool] = False

    index: int
    kept: int
    metric: float
    worst_set: str
    met: bool
    complete: bool = True
    per_set: dict[str, float] = dataclasses.field(default_factory=dict)
    window: tuple[int, int] | None = None
    pruned: tuple[int, int] | None = None
    transitions: int = 0
    images: int = 0
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class KeptNode(Config):
    """A node kept in float (or 16 bits): name, index in graph order, op type and why it stays."""

    VERSIONED: ClassVar[bool] = False

    name: str
    index: int
    op_type: str
    reason: str


@dataclasses.dataclass(frozen=True)
class LatencyRow(Config):
    """Median milliseconds per inference on one runtime at one intra-op thread count, all models timed
    interleaved in one run (:func:`.latency.interleaved_latency`). ``base_ms``: the 8-bit model before
    fallback; ``deployed_ms``: the deployed model when one was given. Speedups are ``fp32_ms / x``."""

    VERSIONED: ClassVar[bool] = False

    runtime: str
    threads: int
    repeats: int
    fp32_ms: float
    base_ms: float
    candidate_ms: float
    deployed_ms: float | None = None
    speedup_vs_fp32: float = 0.0
    speedup_vs_deployed: float | None = None

    @property
    def faster_than_fp32(self) -> bool:
        return self.candidate_ms < self.fp32_ms


@dataclasses.dataclass(frozen=True)
class RecoveryStep(Config):
    """One accuracy-recovery technique applied before the search (:mod:`quantkit.quantize.recovery`):
    ``name``, what it changed (``detail``), and the worst-set metric of the all-8-bit model before and after it."""

    VERSIONED: ClassVar[bool] = False

    name: str
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)
    metric_before: float | None = None
    metric_after: float | None = None


@dataclasses.dataclass(frozen=True)
class FallbackResult(Artifact):
    """The ``fallback.json`` artifact (written by :func:`quantkit.quantize.fallback.precision_fallback`).

    Metrics: ``metric`` names the agreement metric (higher is better); ``metric_before`` / ``metric_after``
    are the worst over ``reference_sets`` of the all-8-bit model (after recovery) and of the written model;
    ``*_per_set`` give each set. ``met``: ``metric_after >= target``. ``kept``: promoted nodes in graph
    order with their reasons; ``islands``: their maximal runs ``[start, end)`` in graph order;
    ``transitions``: Q/DQ edges between promoted and 8-bit nodes. ``latency``: one row per runtime and
    thread count; ``slower_than_fp32``: ``"<runtime>@<threads>"`` wherever the written model is not faster
    than FP32 (never silently accepted: the CLI warns, or fails with ``fail_if_slower``). Fingerprints tie it
    to the record written beside it (``record_fingerprint``), the record it started from and the float model.
    """

    KIND: ClassVar[str] = "fallback result"
    FILENAME: ClassVar[str] = "fallback.json"
    PRODUCER: ClassVar[str] = "quantkit fallback"
    SCHEMA_VERSION: ClassVar[int] = 2

    met: bool
    target: float
    metric: str
    strategy: str
    search: str
    metric_before: float
    metric_after: float
    metric_before_per_set: dict[str, float]
    metric_after_per_set: dict[str, float]
    reference_sets: tuple[SetRef, ...]
    kept: tuple[KeptNode, ...]
    islands: tuple[tuple[int, int], ...]
    transitions: int
    rounds: tuple[Round, ...]
    latency: tuple[LatencyRow, ...]
    record_fingerprint: str
    base_record_fingerprint: str
    model_digest: str
    window: tuple[int, int] | None = None
    slower_than_fp32: tuple[str, ...] = ()
    recovery: tuple[RecoveryStep, ...] = ()
    renamed_nodes: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def kept_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kept)

    def __repr__(self) -> str:
        return (f"FallbackResult({self.search}/{self.strategy}: kept={len(self.kept)}, {self.metric} {self.metric_before:.3f} -> "
                f"{self.metric_after:.3f}, target {self.target}, met={self.met}, rounds={len(self.rounds)})")


__all__ = ["FallbackResult", "KeptNode", "LatencyRow", "RecoveryStep", "Round"]

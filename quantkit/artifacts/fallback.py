"""``fallback.json``: what the precision fallback kept in float and why, the metric per reference set (on
held-out images the search never saw, with its interval), every round it measured, and the latency of the result
against FP32 (and the deployed model) per runtime.

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
    window ``[j, k)`` and the block tried without promotion (indices in graph order); ``family``: the window's
    kind (``prefix``, ``suffix`` (it ends at the last node: the head), ``island``; empty for the sqnr search
    and round 0); ``metric``: the worst set's value on the search images, or, when the round stopped early
    (``complete`` false), the bound that proved it misses the target; ``worst_set``: that set; ``per_set``: sets
    evaluated to the end; ``transitions``: Q/DQ edges between promoted and 8-bit nodes; ``seconds``: wall time
    of the round (build + evaluate); ``latency_vs_fp32``: with ``pick: latency``, the candidate's median over
    FP32's, averaged over runtimes and thread counts (timed interleaved), for the candidates weighed.
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
    family: str = ""
    latency_vs_fp32: float | None = None


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
    ``name``, what it changed (``detail``), and the worst-set metric of the all-8-bit model before and after it, on the
    search images (a step that lowered it is undone: a choice, so never made on the held-out images)."""

    VERSIONED: ClassVar[bool] = False

    name: str
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)
    metric_before: float | None = None
    metric_after: float | None = None


@dataclasses.dataclass(frozen=True)
class SetFigure(Config):
    """One reference set's figures for the written model. Its images are split (seeded, by content:
    :mod:`quantkit.quantize.fallback.holdout`) into ``search_images`` the search measured candidates on and
    ``heldout_images`` it never saw (``heldout_files``: their manifest paths). ``search``: the metric on the search
    images (in-sample: the search chose the model on them, so it is optimistic); ``heldout``: on the held-out
    images (None without a split), ``ci`` its interval at the result's ``confidence`` (bootstrap over the held-out
    images; None when the metric gives no per-image counts or there is no split)."""

    VERSIONED: ClassVar[bool] = False

    name: str
    search_images: int
    heldout_images: int
    search: float
    heldout: float | None = None
    ci: tuple[float, float] | None = None
    heldout_files: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class FallbackResult(Artifact):
    """The ``fallback.json`` artifact (written by :func:`quantkit.quantize.fallback.precision_fallback`).

    Metrics: ``metric`` names the agreement metric (higher is better); ``metric_before`` / ``metric_after``
    are the worst over ``reference_sets`` of the all-8-bit model (after recovery) and of the written model, on
    the held-out images of each set (``holdout`` > 0; with ``holdout`` 0, on every image, in-sample);
    ``*_per_set`` give each set; ``metric_after_ci``: the worst set's interval at ``confidence``. ``met``:
    ``metric_after >= target`` (the held-out figure decides); ``met_on_search``: the written model met the target
    on the search images (true and ``met`` false: the search's choice did not hold on images it had not seen).
    ``figures``: per set, the split and both figures (:class:`SetFigure`); ``seed``: the split's and the
    bootstrap's. ``window_kind``: ``prefix``, ``suffix`` or ``island`` (the written window's). ``kept``: promoted nodes in graph
    order with their reasons; ``islands``: their maximal runs ``[start, end)`` in graph order;
    ``transitions``: Q/DQ edges between promoted and 8-bit nodes. ``latency``: one row per runtime and
    thread count; ``slower_than_fp32``: ``"<runtime>@<threads>"`` wherever the written model is not faster
    than FP32 (never silently accepted: the CLI warns, or fails with ``fail_if_slower``). Fingerprints tie it
    to the record written beside it (``record_fingerprint``), the record it started from and the float model.
    """

    KIND: ClassVar[str] = "fallback result"
    FILENAME: ClassVar[str] = "fallback.json"
    PRODUCER: ClassVar[str] = "quantkit fallback"
    SCHEMA_VERSION: ClassVar[int] = 3

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
    holdout: float = 0.0
    seed: int = 0
    confidence: float = 0.95
    metric_after_ci: tuple[float, float] | None = None
    met_on_search: bool = False
    figures: tuple[SetFigure, ...] = ()
    window_kind: str | None = None

    @classmethod
    def migrate(cls, data: dict[str, Any], version: Any, path: Any) -> dict[str, Any]:
        """Schema 2: no held-out split; its figures were measured on the images the search ran on, so it reads as
        ``holdout: 0`` (in-sample) with ``met_on_search`` equal to ``met``."""
        if version != 2:
            return super().migrate(data, version, path)
        return {**data, "schema_version": cls.SCHEMA_VERSION, "holdout": 0.0, "met_on_search": bool(data.get("met"))}

    @property
    def heldout_images(self) -> int:
        """Held-out images over every set (0: the figures are in-sample)."""
        return sum(f.heldout_images for f in self.figures)

    def split_words(self) -> str:
        """``"6 search + 6 held-out images of cam1-day, ..."`` (one phrase per set)."""
        return ", ".join(f"{f.search_images} search + {f.heldout_images} held-out images of {f.name}" for f in self.figures)

    @property
    def kept_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kept)

    def __repr__(self) -> str:
        where = "held-out" if self.heldout_images else "in-sample"
        return (f"FallbackResult({self.search}/{self.strategy}: kept={len(self.kept)}, {self.metric} {self.metric_before:.3f} -> "
                f"{self.metric_after:.3f} {where}, target {self.target}, met={self.met}, rounds={len(self.rounds)})")


__all__ = ["FallbackResult", "KeptNode", "LatencyRow", "RecoveryStep", "Round", "SetFigure"]

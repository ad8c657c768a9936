"""The deployment verification (``work/models/<model>/verify.json``): the deployed bundle on each target runtime.

Written by ``quantkit verify BUNDLE --out`` (the main job's ``verify`` stage); read by the report. Per runtime:
installed or not, its version and settings, whether the bundle verified (golden outputs and decisions), the share
of Conv/MatMul work it ran in integers, and, per site set, the agreement of the INT8 model's decisions on that
runtime with the FP32 model's (the task's decision metric, pooled over the images). Nothing machine-dependent is
stored (no latency, no CPU name): the same bundle, runtimes and images give the same bytes.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..config import Config
from .base import Artifact


@dataclasses.dataclass(frozen=True)
class SiteAgreement(Config):
    """Decisions of the deployed INT8 model on one runtime vs FP32 on one site set, pooled over ``images``:
    ``metric`` (the task's decision metric) and its ``value``, items on each side, images with identical decisions."""

    VERSIONED: ClassVar[bool] = False

    site_set: str
    set_id: str
    images: int
    metric: str
    value: float
    fp32_items: int
    int8_items: int
    identical_images: int


@dataclasses.dataclass(frozen=True)
class RuntimeResult(Config):
    """One runtime: installed?, version and settings, verified?, first failures, integer share of Conv/MatMul
    multiply-accumulates, and the per-site agreement.

    ``deployable``: the bundle's decisions on this runtime agree with the QDQ simulation's on every golden input and
    nothing but numbers failed (a numeric mismatch alone is a warning); None in files written before the field
    existed (then ``verified`` answers). ``divergence``: the first diverging tensor after a numeric mismatch, in words."""

    VERSIONED: ClassVar[bool] = False

    runtime: str
    installed: bool
    version: str = ""
    label: str = ""
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    verified: bool = False
    failures: tuple[str, ...] = ()
    integer_share: float | None = None
    sites: tuple[SiteAgreement, ...] = ()
    deployable: bool | None = None
    divergence: str = ""


@dataclasses.dataclass(frozen=True)
class DeploymentVerification(Artifact):
    """Which bundle (by digest), bound to which record and thresholds, and one :class:`RuntimeResult` per runtime."""

    KIND: ClassVar[str] = "deployment verification"
    PRODUCER: ClassVar[str] = "quantkit verify BUNDLE --out"
    SCHEMA_VERSION: ClassVar[int] = 2

    bundle: str
    bundle_sha256: str
    record_fingerprint: str
    threshold_fingerprint: str
    task: str
    runtimes: tuple[RuntimeResult, ...]

    @property
    def ok(self) -> bool:
        return all(r.verified for r in self.runtimes if r.installed)

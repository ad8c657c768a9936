"""The deployment verification (``work/models/<model>/verify.json``): the deployed bundle on each target runtime.

Written by ``quantkit verify BUNDLE --out`` (the main job's ``verify`` stage); read by the report. Per runtime:
installed or not, its version and settings, whether the bundle verified (golden outputs and decisions), the share
of Conv/MatMul work it ran in integers, and, per site set, the agreement of the INT8 model's decisions on that
runtime with the FP32 model's (the task's decision metric, pooled over the images). Nothing machine-dependent is
stored (no latency, no CPU name): the same bundle, runtimes and images give the same bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..config import Config
from ..errors import QuantkitError, TargetSupportError, VerificationError
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

    @property
    def passes(self) -> bool:
        """Whether the bundle may be deployed on this runtime: ``deployable``, or ``verified`` in files without that field."""
        return self.verified if self.deployable is None else self.deployable


@dataclasses.dataclass(frozen=True)
class Verdict(Config):
    """Whether to deploy a bundle, as :func:`quantkit.bundle.verify_bundle` decides it and ``quantkit verify`` prints it.

    deployable: every runtime ran the bundle, no check failed except comparisons with the QDQ simulation, and on every
        runtime the decisions agree with FP32's within the bound interval
        (:attr:`quantkit.bundle.verify.VerificationReport.verdict`).
    answer: the one plain sentence (``Deploy: YES. ...`` / ``Deploy: NO. ...``).
    reasons: why not deployable, in check order (empty when deployable), each ``[runtime ][kind] name: detail``.
    warnings: what does not block, in check order: failed comparisons with the simulation and ``warn`` rows.
    unsupported: the first reason is an operator the target cannot run (the CLI exits 5 rather than 4).
    """

    VERSIONED: ClassVar[bool] = False

    deployable: bool
    answer: str
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    unsupported: bool = False

    def error(self, bundle: str) -> QuantkitError | None:
        """The exception ``quantkit verify`` (and its ``--out`` stage) exits with: ``None`` when deployable, else
        :class:`TargetSupportError` (exit 5) when :attr:`unsupported`, else :class:`VerificationError` (exit 4)."""
        if self.deployable:
            return None
        cls = TargetSupportError if self.unsupported else VerificationError
        more = f" (+{len(self.reasons) - 1} more)" if len(self.reasons) > 1 else ""
        return cls(f"{bundle}: not deployable: {self.reasons[0] if self.reasons else self.answer}{more}")

    def __repr__(self) -> str:
        return f"Verdict(deployable={self.deployable}, {len(self.reasons)} reason(s), {len(self.warnings)} warning(s))"


@dataclasses.dataclass(frozen=True)
class DeploymentVerification(Artifact):
    """Which bundle (by digest), bound to which record and thresholds, one :class:`RuntimeResult` per runtime, and the
    bundle's :class:`Verdict` on those runtimes (the one ``quantkit verify BUNDLE --runtime ...`` prints; None in files
    of schema 2)."""

    KIND: ClassVar[str] = "deployment verification"
    PRODUCER: ClassVar[str] = "quantkit verify BUNDLE --out"
    SCHEMA_VERSION: ClassVar[int] = 3

    bundle: str
    bundle_sha256: str
    record_fingerprint: str
    threshold_fingerprint: str
    task: str
    runtimes: tuple[RuntimeResult, ...]
    verdict: Verdict | None = None

    @classmethod
    def migrate(cls, data: dict[str, Any], version: Any, path: Any) -> dict[str, Any]:
        """Schema 2: no ``verdict`` (None: each runtime's ``deployable`` answers)."""
        if version != 2:
            return super().migrate(data, version, path)
        return {**data, "schema_version": cls.SCHEMA_VERSION}

    @property
    def ok(self) -> bool:
        """Every installed runtime verified (no check failed, the simulation comparisons included); whether to deploy is
        :attr:`verdict`."""
        return all(r.verified for r in self.runtimes if r.installed)

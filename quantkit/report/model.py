"""The shift report's facts as typed values: per model, per site set, per variant (nothing rendered here)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from ..artifacts.drift import DriftResult
from ..artifacts.evaluation import MetricInfo, NearLine
from ..decision import DECISIONS
from .config import ReportConfig

SCHEMA_VERSION = 2
STATUS_CODE = {"green": 0, "amber": 1, "red": 2}
INT8_ROLES = ("deployed", "candidate")
__all__ = ["DECISIONS", "INT8_ROLES", "STATUS_CODE", "Example", "ModelReport", "ShiftMetrics", "ShiftReport", "SiteReport"]


@dataclasses.dataclass(frozen=True)
class ShiftMetrics:
    """One variant of one model on one site set. Rates are 0..1; None where not measurable.

    ``agreement``: metric name -> value vs FP32 (empty for ``fp32``); ``primary_ci``: the bootstrap CI of the
    primary agreement metric over the site set's images; ``accuracy``: vs ground truth (empty when unlabelled);
    ``detection_change``: relative change of detections per image vs FP32; ``score_*``: distances of the
    score histogram from FP32's (:mod:`quantkit.metrics`).
    """

    site: str
    variant: str
    images: int
    detections_per_image: float
    alarm_rate: float
    detection_change: float
    agreement: dict[str, float]
    primary_ci: tuple[float, float] | None
    accuracy: dict[str, float]
    score_psi: float | None
    score_ks: float | None
    score_wasserstein: float | None
    score_js: float | None
    status: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Example:
    """An image where the quantized models disagree most with FP32: per-variant primary metric and boxes."""

    image: str
    primary: dict[str, float]
    polygons: dict[str, list[list[list[float]]]]
    texts: dict[str, list[str]]


@dataclasses.dataclass(frozen=True)
class SiteReport:
    """Everything the report shows for one model on one site set."""

    name: str
    metrics: tuple[ShiftMetrics, ...]
    score_hist: dict[str, Any] | None
    drift: DriftResult | None
    examples: tuple[Example, ...]
    images_dir: Path | None
    labelled: bool
    camera: str = ""
    lighting: str = ""
    near_line: dict[str, NearLine] = dataclasses.field(default_factory=dict)
    """Role -> decisions near the line on this site set (:class:`quantkit.artifacts.evaluation.NearLine`)."""

    def variant(self, name: str) -> ShiftMetrics | None:
        return next((m for m in self.metrics if m.variant == name), None)


@dataclasses.dataclass(frozen=True)
class ModelReport:
    """One model: its task, the verdict on its candidate, per-site facts, thresholds and scales."""

    name: str
    task: str
    item: str
    scores: str
    primary: MetricInfo
    metrics: tuple[MetricInfo, ...]
    sites: tuple[SiteReport, ...]
    decision: str
    verdict: tuple[str, ...]
    deployed_calibration: str
    candidate_calibration: str | None
    thresholds: tuple[dict[str, Any], ...]
    scale_moves: tuple[dict[str, Any], ...]
    fallback: Any  # quantkit.artifacts.FallbackResult of the candidate, or None
    provenance: dict[str, Any]
    deploy: tuple[str, ...] = ()
    """Commands that package and verify the candidate (when it came from a fallback)."""
    evidence: tuple[Any, ...] = ()
    """:class:`quantkit.report.paired.PairedDifference` of candidate minus deployed: over every site set first, then per set."""
    verification: Any = None
    """The deployed bundle's :class:`quantkit.artifacts.verification.DeploymentVerification`, or None ("not verified")."""
    choice: Any = None
    """The :class:`quantkit.decision.Decision` (label, rule, reasons; ``verdict`` starts with its reasons)."""
    recipes: tuple[dict[str, Any], ...] = ()
    """Per target runtime, how its INT8 file was chosen: the ``choice.json`` of :mod:`quantkit.quantize.recipes` (runtime,
    chosen, rule, reason, figures per recipe), in the order of params ``targets``."""
    shipped: bool = False
    """Under a switch: the candidate's bundle is verified on the runtimes switched to (the verdict names it; no commands)."""

    @property
    def label(self) -> str:
        """``switch on onnxruntime`` or the decision."""
        return self.choice.label if self.choice is not None else self.decision

    @property
    def reasons(self) -> int:
        """How many of ``verdict``'s first lines are the decision's reasons (the rest is its evidence)."""
        return len(self.choice.reasons) if self.choice is not None else 1

    def site(self, name: str) -> SiteReport | None:
        return next((s for s in self.sites if s.name == name), None)


@dataclasses.dataclass(frozen=True)
class ShiftReport:
    """The whole report: verdicts first, then per-model and per-site facts, causes and provenance."""

    title: str
    models: tuple[ModelReport, ...]
    config: ReportConfig

    @property
    def decision(self) -> str:
        """``needs review`` if any model needs it, else ``switch to candidate`` if any model should switch."""
        decisions = [m.decision for m in self.models]
        return next((d for d in ("needs review", "switch to candidate", "switch on runtime", "watch") if d in decisions), "keep deployed")

    def metrics_dict(self) -> dict[str, Any]:
        """DVC metrics: ``{model: {site: {variant: {...}, "drift": {...}}, "verdict": {...}}}``, numbers and bools only."""
        out: dict[str, Any] = {}
        for mr in self.models:
            node: dict[str, Any] = {}
            for s in mr.sites:
                site: dict[str, Any] = {}
                for m in s.metrics:
                    v = {"detections_per_image": m.detections_per_image, "alarm_rate": m.alarm_rate, "detection_change": m.detection_change,
                         **{f"agreement.{k}": x for k, x in m.agreement.items()}, **{f"accuracy.{k}": x for k, x in m.accuracy.items()},
                         **{k: getattr(m, k) for k in ("score_psi", "score_ks", "score_wasserstein", "score_js")},
                         "status_code": STATUS_CODE[m.status]}
                    site[m.variant] = {k: _round(x) for k, x in v.items() if x is not None}
                for role, nl in sorted(s.near_line.items()):
                    site.setdefault(role, {}).update(near_line_metrics(nl, self.config))
                if s.drift:
                    d = s.drift
                    site["drift"] = {"changed": d.changed, "statistics_moved": len(d.moved), "small_calibration": d.small_calibration,
                                     **({"clipping_rate": _round(d.clipping.rate), "clipping_moved": d.clipping.moved} if d.clipping else {}),
                                     **{f"{e.name}.{e.metric}": _round(e.effect) for e in d.statistics}}
                node[s.name] = site
            node["verdict"] = {"candidate_acceptable": mr.decision in ("switch to candidate", "switch on runtime"),
                               "needs_review": mr.decision == "needs review", "watch": mr.decision == "watch"}
            out[mr.name] = node
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "title": self.title, "decision": self.decision,
                "models": {m.name: {"task": m.task, "decision": m.decision, "label": m.label, "verdict": list(m.verdict),
                                    "sites": {s.name: [x.to_dict() for x in s.metrics] for s in m.sites},
                                    "thresholds": list(m.thresholds), "scale_moves": list(m.scale_moves), "fallback": m.fallback.to_dict() if m.fallback is not None else None,
                                    "evidence": [e.to_dict() for e in m.evidence],
                                    "verified": None if m.verification is None else m.verification.ok,
                                    "provenance": m.provenance} for m in self.models},
                "config": self.config.to_dict()}

    def __repr__(self) -> str:
        return f"ShiftReport(decision={self.decision!r}, models={[m.name for m in self.models]})"


def near_line_metrics(nl: NearLine, cfg: ReportConfig) -> dict[str, Any]:
    """DVC metric keys of one role's decisions near the line (shares 0..1; changes in share units; ``near_line.fragile``:
    the rise over the calibration baseline within one step reached ``report.near_line_rise``)."""
    out: dict[str, Any] = {"near_line.decisions": nl.decisions, "near_line.k": nl.k, "near_line.within_1_step": _round(nl.share_1),
                           "near_line.within_k_steps": _round(nl.share_k), "near_line.fragile": is_fragile(nl, cfg)}
    if nl.baseline is not None:
        out.update({"near_line.baseline_within_1_step": _round(nl.baseline_1), "near_line.baseline_within_k_steps": _round(nl.baseline_k),
                    "near_line.change_within_1_step": _round(nl.change_1), "near_line.change_within_k_steps": _round(nl.change_k)})
    return out


def is_fragile(nl: NearLine, cfg: ReportConfig) -> bool:
    """Whether the share within one step rose over the calibration baseline by at least ``cfg.near_line_rise``
    (False without a baseline or without decisions)."""
    return nl.decisions > 0 and nl.change_1 is not None and nl.change_1 >= cfg.near_line_rise - 1e-12


def _round(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, float):
        return v
    return round(v, 6) if math.isfinite(v) else None

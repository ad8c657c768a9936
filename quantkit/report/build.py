"""Aggregate evaluation, drift, records and thresholds into one :class:`ShiftReport`.

Only aggregates are read (``per_image.csv`` rows, ``score_hist.json`` counts, drift JSON, record
tables), so building costs little next to the inference it summarises; example thumbnails are a
fixed-size sample (``examples_per_site``) of the images where the INT8 models disagree most with FP32.

Statuses (green / amber / red) per site set and variant, from ``params.yaml: report``:

* **green**: pixel IoU vs FP32 >= ``min_pixel_iou`` and detections per image within
  ``max_alarm_rate_change`` (relative) of FP32's;
* **red**: pixel IoU < ``min_pixel_iou - amber_band`` or detections per image off by more than
  ``2 * max_alarm_rate_change``;
* **amber**: otherwise.

The decision (what a quality lead should do, :func:`verdict`):

* **switch to candidate**: the candidate is green on every site set (and, when the deployed model is
  green everywhere too, agrees with FP32 more closely on average);
* **keep deployed**: the deployed model is green on every site set and no candidate does better;
* **needs review**: the deployed model is amber or red somewhere and the candidate does not fix every
  site set (it fixes none, or fixes some and breaks others).

A candidate with the deployed model's record fingerprint is the deployed calibration itself (e.g. right
after deploying): nothing is compared and the deployed model is judged alone.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from .. import metrics as dist
from .._io import read_json
from ..config import Config
from ..errors import ConfigError, InputFileError
from ..versions import tool_versions

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
INT8_VARIANTS = ("deployed", "candidate")
VARIANT_ORDER = ("fp32", "deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds")
STATUS_CODE = {"green": 0, "amber": 1, "red": 2}
DECISIONS = ("switch to candidate", "keep deployed", "needs review")
MACHINE_DEPENDENT = ("latency_ms",)
"""ShiftMetrics fields left out of ``metrics.json``: they change with the machine, not the model."""


@dataclasses.dataclass(frozen=True)
class ReportConfig(Config):
    """Options of ``quantkit report`` (``params.yaml: report``).

    Attributes:
        min_pixel_iou: lowest acceptable pixel IoU (pooled over the site set) of an INT8 binarized map vs FP32's.
        amber_band: IoU below ``min_pixel_iou - amber_band`` is red.
        max_alarm_rate_change: largest acceptable relative change of detections per image vs FP32.
        score_psi_alert: PSI of the output score histogram vs FP32 that raises an alert
            (0.25 = "significant" in Siddiqi 2006's rule of thumb).
        score_ks_alert: KS statistic of the score CDF vs FP32 that raises an alert.
        score_wasserstein_alert: W1 between score distributions (score units, 0..1) that raises an alert.
        examples_per_site: thumbnails per site set (images where INT8 and FP32 disagree most).
        thumbnail_px: longest thumbnail side in pixels.
        top_tensors: tensors listed in "scales that moved most".
        title: report title.
    """

    min_pixel_iou: float = 0.9
    amber_band: float = 0.1
    max_alarm_rate_change: float = 0.2
    score_psi_alert: float = 0.25
    score_ks_alert: float = 0.1
    score_wasserstein_alert: float = 0.02
    examples_per_site: int = 3
    thumbnail_px: int = 240
    top_tensors: int = 10
    title: str = "Quantization shift report"

    def validate(self) -> None:
        if not 0.0 < self.min_pixel_iou <= 1.0:
            raise ConfigError(f"report.min_pixel_iou: {self.min_pixel_iou} must be in (0, 1]")
        if not 0.0 <= self.amber_band < self.min_pixel_iou:
            raise ConfigError(f"report.amber_band: {self.amber_band} must be in [0, min_pixel_iou)")
        if self.max_alarm_rate_change <= 0:
            raise ConfigError(f"report.max_alarm_rate_change: {self.max_alarm_rate_change} must be > 0")
        if min(self.score_psi_alert, self.score_ks_alert, self.score_wasserstein_alert) <= 0:
            raise ConfigError("report: score_psi_alert, score_ks_alert and score_wasserstein_alert must be > 0")
        if not 0 <= self.examples_per_site <= 20:
            raise ConfigError(f"report.examples_per_site: {self.examples_per_site} must be 0..20 (keeps the HTML small)")
        if not 32 <= self.thumbnail_px <= 640:
            raise ConfigError(f"report.thumbnail_px: {self.thumbnail_px} must be 32..640")
        if self.top_tensors < 1:
            raise ConfigError(f"report.top_tensors: {self.top_tensors} must be >= 1")

    @property
    def rule(self) -> str:
        """The decision rule in plain words, with the values in force."""
        return (
            "Rule: a model passes a site set (green) when it agrees with the unquantized (FP32) model: the text areas both detect "
            f"overlap by a pixel IoU (intersection over union of the binarized text maps, pooled over the images) >= {self.min_pixel_iou:.2f}, "
            f"and its detections per image stay within {100 * self.max_alarm_rate_change:.0f}% of FP32's; red below IoU "
            f"{self.min_pixel_iou - self.amber_band:.2f} or beyond {200 * self.max_alarm_rate_change:.0f}%; amber between. "
            "Switch to the candidate only when it is green on every site set (params.yaml: report)."
        )


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """Where the report reads from (the ``quantkit report`` flags)."""

    eval_dir: Path
    drift_dir: Path | None
    deployed: Path
    deployed_thresholds: Path
    candidate: Path | None = None
    candidate_thresholds: Path | None = None
    site_sets: Path | None = None


@dataclasses.dataclass(frozen=True)
class ShiftMetrics:
    """One variant on one site set. Rates are 0..1; ``None`` where not measurable (e.g. no labels)."""

    site: str
    variant: str
    images: int
    detections_per_image: float
    alarm_rate: float
    pixel_iou_vs_fp32: float
    box_f1_vs_fp32: float
    precision: float | None
    recall: float | None
    f1: float | None
    latency_ms: float | None
    score_psi: float | None
    score_ks: float | None
    score_wasserstein: float | None
    score_js: float | None
    alarm_rate_change: float
    status: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"ShiftMetrics({self.site}/{self.variant}: iou={self.pixel_iou_vs_fp32:.3f}, det/img={self.detections_per_image:.2f}, {self.status})"


@dataclasses.dataclass(frozen=True)
class SiteReport:
    """Everything the report shows for one site set (plot data kept as plain arrays/lists)."""

    name: str
    metrics: tuple[ShiftMetrics, ...]
    score_hist: dict[str, Any] | None
    drift: dict[str, Any] | None
    examples: tuple[dict[str, Any], ...]
    images_dir: Path | None

    def variant(self, name: str) -> ShiftMetrics | None:
        return next((m for m in self.metrics if m.variant == name), None)


@dataclasses.dataclass(frozen=True)
class ShiftReport:
    """The whole report: verdict first, then per-site facts, causes and provenance."""

    title: str
    decision: str  # one of DECISIONS
    verdict: tuple[str, ...]  # verdict[0]: what to do and why, in one sentence; then the supporting facts
    rule: str
    sites: tuple[SiteReport, ...]
    thresholds: tuple[dict[str, Any], ...]
    scale_moves: tuple[dict[str, Any], ...]
    provenance: dict[str, Any]
    config: ReportConfig

    def metrics_dict(self) -> dict[str, Any]:
        """DVC metrics: ``{site: {variant: {...}, "drift": {...}}, "verdict": {...}}``, numbers and bools only."""
        out: dict[str, Any] = {}
        for s in self.sites:
            node: dict[str, Any] = {}
            for m in s.metrics:
                node[m.variant] = {
                    k: _round(v) for k, v in m.to_dict().items()
                    if k not in ("site", "variant", "status", *MACHINE_DEPENDENT) and v is not None
                }
                node[m.variant]["status_code"] = STATUS_CODE[m.status]
            if s.drift:
                clip = s.drift.get("clipping") or {}
                node["drift"] = {
                    "recalibrate": bool(s.drift.get("recalibrate")),
                    "statistics_moved": sum(1 for c in s.drift.get("changes", []) if c.get("moved")),
                    **({"clipping_rate": _round(clip["rate"]), "clipping_moved": bool(clip.get("moved"))} if clip else {}),
                }
                for e in s.drift.get("statistics", []):
                    node["drift"][f"{e['name']}.{e['metric']}"] = _round(e["effect"])
            out[s.name] = node
        out["verdict"] = {"candidate_acceptable": self.decision == "switch to candidate", "needs_review": self.decision == "needs review"}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "title": self.title,
            "decision": self.decision,
            "verdict": list(self.verdict),
            "rule": self.rule,
            "sites": {s.name: {"metrics": [m.to_dict() for m in s.metrics], "drift": s.drift} for s in self.sites},
            "thresholds": list(self.thresholds),
            "scale_moves": list(self.scale_moves),
            "provenance": self.provenance,
            "config": self.config.to_dict(),
        }

    def __repr__(self) -> str:
        return f"ShiftReport(decision={self.decision!r}, sites={[s.name for s in self.sites]})"


def _round(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, float):
        return v
    return round(v, 6) if math.isfinite(v) else None


# ------------------------------------------------------------------------------------------ reading


def _per_image(path: Path) -> Any:
    import pandas as pd

    need = ("image", "variant", "n_detections", "pixel_iou_vs_fp32")
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise InputFileError(f"{path}: per_image.csv not found; run 'quantkit evaluate' for this site set") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputFileError(f"{path}: not a valid CSV ({str(e).splitlines()[0]}); rerun 'quantkit evaluate'") from None
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise InputFileError(f"{path}: column {missing[0]!r} missing; rerun 'quantkit evaluate'")
    if frame.empty:
        raise InputFileError(f"{path}: no rows; the site set has no images, rerun 'quantkit evaluate' on a non-empty set")
    return frame


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


def _status(iou: float, change: float, cfg: ReportConfig) -> str:
    if iou >= cfg.min_pixel_iou and abs(change) <= cfg.max_alarm_rate_change:
        return "green"
    if iou < cfg.min_pixel_iou - cfg.amber_band or abs(change) > 2 * cfg.max_alarm_rate_change:
        return "red"
    return "amber"


def site_metrics(site: str, frame: Any, score_hist: dict[str, Any] | None, cfg: ReportConfig) -> list[ShiftMetrics]:
    """Aggregate ``per_image.csv`` rows (and score histograms) into one :class:`ShiftMetrics` per variant."""
    out = []
    variants = [v for v in VARIANT_ORDER if v in set(frame["variant"])] + sorted(set(frame["variant"]) - set(VARIANT_ORDER))
    fp32 = frame[frame["variant"] == "fp32"]
    fp32_dpi = float(fp32["n_detections"].mean()) if len(fp32) else float("nan")
    edges = counts = None
    if score_hist:
        edges, counts = score_hist.get("bin_edges"), score_hist.get("counts", {})
    for v in variants:
        rows = frame[frame["variant"] == v]
        n = rows["n_detections"].astype(float)
        dpi = float(n.mean())
        # pooled over the site set (sum of intersections / sum of unions), as evaluate and bind compute it;
        # the per-image mean is the fallback for evaluation folders without the count columns
        if {"pixel_intersection", "pixel_union"} <= set(rows.columns):
            union = float(rows["pixel_union"].sum())
            iou = float(rows["pixel_intersection"].sum()) / union if union > 0 else 1.0
        else:
            iou = float(rows["pixel_iou_vs_fp32"].astype(float).mean())
        if {"agree_tp", "agree_fp", "agree_fn"} <= set(rows.columns):
            a_tp, a_fp, a_fn = (float(rows[c].sum()) for c in ("agree_tp", "agree_fp", "agree_fn"))
            f1b = _ratio(2 * a_tp, 2 * a_tp + a_fp + a_fn) if a_tp + a_fp + a_fn > 0 else 1.0
        else:
            f1b = float(rows["box_f1_vs_fp32"].astype(float).mean()) if "box_f1_vs_fp32" in rows else float("nan")
        prec = rec = f1 = None
        if {"tp", "fp", "fn"} <= set(rows.columns):
            tp, fp, fn = (float(rows[c].sum()) for c in ("tp", "fp", "fn"))
            if tp + fn > 0:  # labels exist
                prec, rec = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
                f1 = _ratio(2 * tp, 2 * tp + fp + fn)
        lat = float(rows["latency_ms"].astype(float).mean()) if "latency_ms" in rows else None
        psi = ks = w = js = None
        if counts and v != "fp32" and "fp32" in counts and v in counts and sum(counts["fp32"]) > 0 and sum(counts[v]) > 0:
            d = dist.compare_histograms(edges or [], counts["fp32"], counts[v])
            psi, ks, w, js = d.psi, d.ks, d.wasserstein, d.js
        change = (dpi - fp32_dpi) / fp32_dpi if fp32_dpi > 0 else (0.0 if dpi == fp32_dpi else 1.0)
        status = "green" if v == "fp32" else _status(iou, change, cfg)
        out.append(ShiftMetrics(site, v, len(rows), dpi, float((n > 0).mean()), iou, f1b, prec, rec, f1, lat, psi, ks, w, js, float(change), status))
    return out


def _examples(frame: Any, detections: dict[str, Any] | None, k: int) -> list[dict[str, Any]]:
    """The ``k`` images where the INT8 variants' mean pixel IoU vs FP32 is lowest, with their boxes."""
    if k == 0:
        return []
    int8 = frame[frame["variant"].isin(INT8_VARIANTS)]
    if int8.empty:
        return []
    worst = int8.groupby("image")["pixel_iou_vs_fp32"].mean().sort_values(kind="stable").head(k)
    images = (detections or {}).get("images", detections or {}) if isinstance(detections, dict) else {}
    out = []
    for image, iou in worst.items():
        per = frame[frame["image"] == image].set_index("variant")["pixel_iou_vs_fp32"].to_dict()
        boxes = images.get(image, {}) if isinstance(images, dict) else {}
        out.append({"image": str(image), "mean_int8_iou": float(iou), "iou": {v: float(x) for v, x in per.items()}, "boxes": _boxes(boxes)})
    return out


def _boxes(per_variant: Any) -> dict[str, list[list[list[float]]]]:
    """``{variant: [polygon [[x, y], ...]]}`` from ``detections.json`` entries.

    Accepts ``{variant: {"polygons": [...], "scores": [...]}}`` (quantkit.evaluate) and, tolerantly, a
    list per variant of polygons or of ``{"box"|"points"|"polygon": ...}`` dicts.
    """
    out: dict[str, list[list[list[float]]]] = {}
    if not isinstance(per_variant, dict):
        return out
    for v, dets in per_variant.items():
        if isinstance(dets, dict):
            dets = dets.get("polygons") or dets.get("boxes") or []
        polys = []
        for d in dets if isinstance(dets, list) else []:
            pts = d.get("box") or d.get("points") or d.get("polygon") if isinstance(d, dict) else d
            try:
                arr = np.asarray(pts, dtype=float).reshape(-1, 2)
            except (TypeError, ValueError):
                continue
            if arr.shape[0] >= 2:
                polys.append(arr.tolist())
        out[str(v)] = polys
    return out


def threshold_table(deployed: dict[str, Any], candidate: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Rows ``{name, fp32, deployed, deployed_int, candidate, candidate_int, dtype, tensor, comparison}``.

    ``*_int`` is the integer code the INT8 decision compares with (``decision_value`` of the threshold
    set's integer domain where present, else its ``value``).
    """
    names = sorted(set(deployed.get("values", {})) | set((candidate or {}).get("values", {})) | set(deployed.get("fp32_values", {})))
    rows = []
    for n in names:
        def intval(ts: dict[str, Any] | None, n: str = n) -> Any:
            entry = (ts or {}).get("integer_domain", {}).get(n)
            return None if not entry else entry.get("decision_value", entry.get("value"))

        dom = deployed.get("integer_domain", {}).get(n) or (candidate or {}).get("integer_domain", {}).get(n) or {}
        rows.append({
            "name": n,
            "fp32": deployed.get("fp32_values", {}).get(n),
            "deployed": deployed.get("values", {}).get(n),
            "deployed_int": intval(deployed),
            "candidate": (candidate or {}).get("values", {}).get(n),
            "candidate_int": intval(candidate),
            "dtype": dom.get("dtype", ""),
            "tensor": dom.get("tensor", ""),
            "comparison": dom.get("comparison", ""),
        })
    return rows


def scale_moves(deployed: dict[str, Any], candidate: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """Tensors whose scales moved most between two ``record.json`` dicts, via :func:`quantkit.artifacts.record.scale_diff`.

    Ranked by ``rel_change = max over channels |s_cand - s_dep| / s_dep``; tensors in only one record
    are left out. Rows ``{tensor, role, deployed_scale, candidate_scale, ratio, log2_ratio, rel_change}``
    (first channel's scales and their ratio).
    """
    from types import SimpleNamespace

    from ..artifacts.record import TensorScale, scale_diff

    def tensors(rec: dict[str, Any]) -> Any:
        return SimpleNamespace(tensors=tuple(TensorScale.from_dict(t) for t in rec.get("tensors", []) if isinstance(t, dict) and t.get("scale")))

    df = scale_diff(tensors(deployed), tensors(candidate))
    df = df[(df["status"] == "both") & df["rel_change"].notna()].head(top)
    return [
        {"tensor": str(r.name), "role": str(r.role), "deployed_scale": float(r.scale_a), "candidate_scale": float(r.scale_b),
         "ratio": float(r.scale_b / r.scale_a), "log2_ratio": float(r.log2_ratio), "rel_change": float(r.rel_change)}
        for r in df.itertuples(index=False)
    ]


def _git_revision() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return r.stdout.strip() if r.returncode == 0 else "unknown"


# ------------------------------------------------------------------------------------------ verdict


_LIGHTING_STATS = {"brightness_mean", "brightness_p5", "brightness_p50", "brightness_p95", "contrast_rms", "clip_dark", "clip_bright"}
_CAMERA_STATS = {"width", "height", "sharpness_lapvar", "noise_sigma", "saturation_mean", "cast_rg", "cast_bg"}


def _phrases(drift: dict[str, Any]) -> list[str] | None:
    """Plain phrases for the statistics that moved, most separated first (``None`` when ``changes``
    carry no medians). Statistics whose medians cannot describe the change (both 0, or calibration
    median 0) are left out: "blown-out pixels changed from 0 to 0" says nothing."""
    from ..drift import StatisticChange, describe_changes

    try:
        changes = [StatisticChange(**c) for c in drift.get("changes", [])]
    except TypeError:
        return None
    return describe_changes(changes)


def _cause(drift: dict[str, Any] | None) -> str:
    """Name the likely cause of a drift in plain words.

    Brightness, contrast and clipped pixels moving means the lighting changed; less light also raises
    noise, shifts the colour cast and lowers the Laplacian sharpness, so those are not blamed on the
    camera then. The camera (or its optics) is named when the resolution changed, or when sharpness,
    noise or colour moved while brightness did not.
    """
    if not drift:
        return "no drift check available"
    moved = [c for c in drift.get("changes", []) if c.get("moved")]
    names = {c["name"] for c in moved}
    kinds = []
    lighting = bool(names & _LIGHTING_STATS)
    if lighting:
        kinds.append("lighting changed")
    if names & {"width", "height"} or (not lighting and names & _CAMERA_STATS):
        kinds.append("camera or optics changed")
    if not kinds and (drift.get("clipping") or {}).get("moved"):
        kinds.append("activations leave the calibrated ranges")
    head = " and ".join(kinds) if kinds else "no image statistic moved"
    if not kinds:
        return head
    phrases = _phrases(drift)
    if phrases is None:
        reasons = drift.get("reasons") or []
        return f"{head} ({reasons[0]})" if reasons else head
    if not phrases:
        return head
    more = f"; {len(phrases) - 3} more statistics moved" if len(phrases) > 3 else ""
    return f"{head} ({'; '.join(phrases[:3])}{more})"


def drift_label(site: SiteReport) -> tuple[str, str]:
    """``(words, css class)`` for the report's drift column of one site set.

    The drift JSON's ``recalibrate`` is a recommendation from image statistics alone; the report
    reads it together with the deployed model's status there: "recalibrate" only when the images
    changed *and* the deployed model is not green; "changed — model unaffected" (neutral) when the
    images changed but the deployed model still agrees with FP32.
    """
    if not site.drift:
        return "–", ""
    if not site.drift.get("recalibrate"):
        return "stable", "green"
    dep = site.variant("deployed")
    if dep is not None and dep.status == "green":
        return "changed — model unaffected", "neutral"
    return "recalibrate", "red"


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _status_words(m: ShiftMetrics) -> str:
    return f"IoU {m.pixel_iou_vs_fp32:.2f}, {m.status}"


def verdict(sites: list[SiteReport], deployed_cal: str, candidate_cal: str | None, cfg: ReportConfig,
            *, same_calibration: bool = False) -> tuple[str, list[str]]:
    """Decision (one of :data:`DECISIONS`) and plain sentences for a quality lead.

    The first sentence says what to do and why; the others give the facts behind it (see the module
    docstring for the rule). ``same_calibration``: the candidate's record fingerprint is the deployed
    one's, so there is nothing to compare and the deployed model is judged alone.
    """
    dep = {s.name: s.variant("deployed") for s in sites}
    cand = {s.name: s.variant("candidate") for s in sites}
    bad = [n for n, m in dep.items() if m and m.status != "green"]
    has_candidate = bool(candidate_cal) and any(cand.values()) and not same_calibration
    facts: list[str] = []
    # compare with the site set taken under the calibration's own conditions (same name), else the best one
    home = deployed_cal if dep.get(deployed_cal) else max((n for n, m in dep.items() if m), key=lambda n: dep[n].pixel_iou_vs_fp32, default=None)  # type: ignore[union-attr]
    for s in sites:
        m = dep[s.name]
        if m is None:
            continue
        if m.status != "green":
            ref = f" vs {dep[home].pixel_iou_vs_fp32:.2f} on {home}" if home and home != s.name else ""  # type: ignore[union-attr]
            facts.append(
                f"On {s.name} the deployed INT8 model (calibrated on {deployed_cal}) agrees with FP32 at IoU {m.pixel_iou_vs_fp32:.2f}{ref}"
                f" ({m.status}) and changes detections per image by {100 * m.alarm_rate_change:+.0f}%: {_cause(s.drift)}."
            )
        elif s.drift and s.drift.get("recalibrate"):
            facts.append(f"On {s.name} the {_cause(s.drift)} but the deployed model still agrees with FP32 "
                         f"(IoU {m.pixel_iou_vs_fp32:.2f}): no action needed there.")
    disagrees = "the deployed model disagrees with FP32 on " + _names([f"{n} ({_status_words(dep[n])})" for n in bad]) if bad else ""  # type: ignore[arg-type]
    if not has_candidate:
        same = "the candidate is the deployed calibration, nothing to compare; " if same_calibration else ""
        if bad:
            decision = "needs review"
            head = f"Needs review: {same}{disagrees}; recalibrate on images that cover the conditions of {_names(bad)}."
        else:
            decision = "keep deployed"
            head = f"Keep deployed: {same}the deployed model agrees with FP32 on every site set (" + ", ".join(
                f"{n} IoU {m.pixel_iou_vs_fp32:.2f}" for n, m in dep.items() if m) + ")."
        return decision, [head, *facts]

    code = STATUS_CODE
    fixes = [n for n, c in cand.items() if c and dep[n] and code[c.status] < code[dep[n].status]]  # type: ignore[union-attr]
    breaks = [n for n, c in cand.items() if c and dep[n] and code[c.status] > code[dep[n].status]]  # type: ignore[union-attr]
    still = [n for n, c in cand.items() if c and c.status != "green" and n not in breaks]
    cand_green = all(c is not None and c.status == "green" for c in cand.values())
    recal = f"recalibrating on {candidate_cal}"

    def mean(d: dict[str, ShiftMetrics | None]) -> float:
        ious = [m.pixel_iou_vs_fp32 for m in d.values() if m]
        return float(np.mean(ious)) if ious else float("nan")

    if cand_green and (bad or mean(cand) > mean(dep) + 1e-9):
        decision = "switch to candidate"
        why = f"fixes {_names(fixes)}" if fixes else f"agrees more closely (mean IoU {mean(cand):.2f} vs {mean(dep):.2f})"
        head = f"Switch to the candidate (calibrated on {candidate_cal}): it agrees with FP32 on every site set and {why}."
    elif not bad:
        decision = "keep deployed"
        if breaks:
            tail = f"{recal} would break {_names(breaks)}"
        elif cand_green:
            tail = f"the candidate (calibrated on {candidate_cal}) is green too but no closer (mean IoU {mean(cand):.2f} vs {mean(dep):.2f})"
        else:
            tail = f"the candidate (calibrated on {candidate_cal}) is not green on {_names(still)}"
        head = f"Keep deployed: the deployed model agrees with FP32 on every site set; {tail}."
    else:
        decision = "needs review"
        if fixes and breaks:
            tail = (f"{recal} fixes {_names(fixes)} but breaks {_names(breaks)}; consider a calibration set that covers both conditions "
                    f"({deployed_cal} and {candidate_cal} images)")
        elif fixes:
            tail = f"{recal} fixes {_names(fixes)} but still disagrees on {_names(still)}; add images of those conditions to the calibration set"
        else:
            tail = f"{recal} does not fix it; recalibrate on images that cover the conditions of {_names(bad)}"
        head = f"Needs review: {disagrees}; {tail}."
    moves = [f"{n} {dep[n].status} → {c.status} (IoU {dep[n].pixel_iou_vs_fp32:.2f} → {c.pixel_iou_vs_fp32:.2f})"  # type: ignore[union-attr]
             for n, c in cand.items() if c and dep[n]]
    sentence = f"Recalibrating on {candidate_cal}: " + "; ".join(moves)
    changed = [f"{n} {100 * c.alarm_rate_change:+.0f}%" for n, c in cand.items() if c and abs(c.alarm_rate_change) > cfg.max_alarm_rate_change]
    if changed:
        sentence += "; detections per image vs FP32: " + ", ".join(changed)
    return decision, [head, *facts, sentence + "."]


# --------------------------------------------------------------------------------------------- build


def build_report(inputs: ReportInputs, config: ReportConfig | None = None) -> ShiftReport:
    """Read every input and aggregate it into a :class:`ShiftReport` (nothing is written).

    Raises:
        InputFileError: a folder or file is missing or malformed (message names it and the stage to rerun).
    """
    from ..progress import progress

    cfg = config or ReportConfig()
    if not inputs.eval_dir.is_dir():
        raise InputFileError(f"{inputs.eval_dir}: evaluation folder not found; run 'quantkit evaluate' (dvc repro evaluate)")
    site_dirs = sorted(d for d in inputs.eval_dir.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not site_dirs:
        raise InputFileError(f"{inputs.eval_dir}: no site folders with per_image.csv; run 'quantkit evaluate' on at least one site set")
    dep_rec = _record(inputs.deployed)
    dep_thr = _thresholds(inputs.deployed_thresholds, inputs.deployed)
    cand_rec = _record(inputs.candidate) if inputs.candidate else None
    cand_thr = _thresholds(inputs.candidate_thresholds, inputs.candidate) if inputs.candidate_thresholds and inputs.candidate else None
    sites = []
    set_info: dict[str, dict[str, Any]] = {}
    for d in progress(site_dirs, total=len(site_dirs), desc="report", unit="site"):
        frame = _per_image(d / "per_image.csv")
        hist = read_json(d / "score_hist.json", "score histogram") if (d / "score_hist.json").exists() else None
        dets = read_json(d / "detections.json", "detections") if (d / "detections.json").exists() else None
        summary = read_json(d / "summary.json", "evaluation summary") if (d / "summary.json").exists() else {}
        drift = None
        if inputs.drift_dir is not None and (inputs.drift_dir / f"{d.name}.json").exists():
            drift = read_json(inputs.drift_dir / f"{d.name}.json", "drift result")
        images_dir = _images_dir(d.name, summary, inputs.site_sets)
        sites.append(SiteReport(d.name, tuple(site_metrics(d.name, frame, hist, cfg)), hist, drift, tuple(_examples(frame, dets, cfg.examples_per_site)), images_dir))
        set_info[d.name] = {**((summary.get("site_set") if isinstance(summary, dict) else None) or {}), **((drift or {}).get("site_set") or {})}
    dep_cal = (dep_rec.get("calibration_set") or {}).get("name", "?")
    cand_cal = (cand_rec.get("calibration_set") or {}).get("name", "?") if cand_rec else None
    same = bool(cand_rec) and cand_rec.get("fingerprint") == dep_rec.get("fingerprint")  # type: ignore[union-attr]
    decision, lines = verdict(sites, dep_cal, cand_cal, cfg, same_calibration=same)
    provenance = {
        "git_revision": _git_revision(),
        "versions": tool_versions(("quantkit", "onnx", "onnxruntime", "numpy", "pandas", "scipy", "matplotlib"), python=True),
        "records": {role: _record_prov(r) for role, r in (("deployed", dep_rec), ("candidate", cand_rec)) if r},
        "thresholds": {role: {"fingerprint": t.get("fingerprint"), "binding": t.get("binding")} for role, t in (("deployed", dep_thr), ("candidate", cand_thr)) if t},
        "site_sets": {name: {k: info.get(k) for k in ("set_id", "count", "camera", "lighting")} for name, info in set_info.items()},
    }
    return ShiftReport(
        title=cfg.title,
        decision=decision,
        verdict=tuple(lines),
        rule=cfg.rule,
        sites=tuple(sites),
        thresholds=tuple(threshold_table(dep_thr, cand_thr)),
        scale_moves=tuple(scale_moves(dep_rec, cand_rec, cfg.top_tensors)) if cand_rec else (),
        provenance=provenance,
        config=cfg,
    )


def _record(folder: Path) -> dict[str, Any]:
    """``record.json`` of a quantized folder as a dict, checked by :meth:`CalibrationRecord.load`
    (schema version, fields, fingerprint over the tensors table)."""
    from ..artifacts.record import CalibrationRecord

    return CalibrationRecord.load(folder).to_dict()


def _thresholds(path: Path, quantized: Path) -> dict[str, Any]:
    """A threshold set as a dict, after checking it is bound to the record (and quantized model file,
    when present) in ``quantized``: the same check as ``quantkit evaluate`` and ``quantkit bundle``.

    Raises:
        BindingMismatchError: the set was derived for another record or model.
        InputFileError / ConfigError: the file is missing, malformed or edited by hand.
    """
    from ..artifacts.thresholds import ThresholdSet
    from ..thresholds.binding import QUANT_MODEL

    model = quantized / QUANT_MODEL if quantized.is_dir() else None
    ts = ThresholdSet.load_bound(path, quantized, model_path=model if model is not None and model.is_file() else None)
    return ts.to_dict()


def _record_prov(rec: dict[str, Any]) -> dict[str, Any]:
    cs = rec.get("calibration_set") or {}
    return {
        "fingerprint": rec.get("fingerprint"),
        "model_digest": rec.get("model_digest"),
        "quantized_model_digest": rec.get("quantized_model_digest"),
        "calibration_set": cs.get("name"),
        "calibration_set_id": cs.get("set_id"),
        "method": (rec.get("config") or {}).get("method"),
        "versions": rec.get("versions"),
    }


def _images_dir(site: str, summary: dict[str, Any], site_sets: Path | None) -> Path | None:
    candidates = []
    ss = summary.get("site_set") if isinstance(summary, dict) else None
    if isinstance(ss, dict) and ss.get("path"):
        candidates.append(Path(ss["path"]))
    if site_sets is not None:
        candidates.insert(0, site_sets / site)
    candidates.append(Path("site_sets") / site)
    return next((c for c in candidates if c.is_dir()), None)

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

The candidate is *acceptable* when it is green on every site set; it *needs review* when it is
better than the deployed model somewhere but not green everywhere; otherwise the deployed model stays.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from .. import metrics as dist
from .._io import read_json
from ..config import Config
from ..errors import ConfigError, InputFileError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
INT8_VARIANTS = ("deployed", "candidate")
VARIANT_ORDER = ("fp32", "deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds")
STATUS_CODE = {"green": 0, "amber": 1, "red": 2}


@dataclasses.dataclass(frozen=True)
class ReportConfig(Config):
    """Options of ``quantkit report`` (``params.yaml: report``).

    Attributes:
        min_pixel_iou: lowest acceptable mean pixel IoU of an INT8 binarized map vs FP32's.
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
            f"A model passes a site set (green) when its binarized map agrees with FP32 at mean pixel IoU >= {self.min_pixel_iou:.2f} "
            f"and its detections per image stay within {100 * self.max_alarm_rate_change:.0f}% of FP32's; red below IoU "
            f"{self.min_pixel_iou - self.amber_band:.2f} or beyond {200 * self.max_alarm_rate_change:.0f}%; amber between. "
            "The candidate is acceptable when green on every site set (params.yaml: report)."
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
    decision: str  # "acceptable" | "needs review" | "keep deployed" | "no candidate"
    verdict: tuple[str, ...]
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
                    k: _round(v) for k, v in m.to_dict().items() if k not in ("site", "variant", "status") and v is not None
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
        out["verdict"] = {"candidate_acceptable": self.decision == "acceptable", "needs_review": self.decision == "needs review"}
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
        iou = float(rows["pixel_iou_vs_fp32"].astype(float).mean())
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
    """Tensors whose scales moved most between two ``record.json`` dicts, via :func:`quantkit.quantize.record.scale_diff`.

    Ranked by ``rel_change = max over channels |s_cand - s_dep| / s_dep``; tensors in only one record
    are left out. Rows ``{tensor, role, deployed_scale, candidate_scale, ratio, log2_ratio, rel_change}``
    (first channel's scales and their ratio).
    """
    from types import SimpleNamespace

    from ..quantize.record import TensorScale, scale_diff

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


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("quantkit", "onnx", "onnxruntime", "numpy", "pandas", "scipy", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# ------------------------------------------------------------------------------------------ verdict


_LIGHTING_STATS = {"brightness_mean", "brightness_p5", "brightness_p50", "brightness_p95", "contrast_rms", "clip_dark", "clip_bright"}
_CAMERA_STATS = {"width", "height", "sharpness_lapvar", "noise_sigma", "saturation_mean", "cast_rg", "cast_bg"}


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
    reasons = drift.get("reasons") or []
    return f"{head} ({reasons[0]})" if kinds and reasons else head


def verdict(sites: list[SiteReport], deployed_cal: str, candidate_cal: str | None, cfg: ReportConfig) -> tuple[str, list[str]]:
    """Decision and plain sentences for a quality lead (see the module docstring for the rule)."""
    lines: list[str] = []
    dep = {s.name: s.variant("deployed") for s in sites}
    cand = {s.name: s.variant("candidate") for s in sites}
    ok = [n for n, m in dep.items() if m and m.status == "green"]
    # compare with the site set taken under the calibration's own conditions (same name), else the best one
    home = deployed_cal if dep.get(deployed_cal) else max((n for n, m in dep.items() if m), key=lambda n: dep[n].pixel_iou_vs_fp32, default=None)  # type: ignore[union-attr]
    for s in sites:
        m = dep[s.name]
        if m is None or m.status == "green":
            continue
        ref = f" vs {dep[home].pixel_iou_vs_fp32:.2f} on {home}" if home and home != s.name else ""  # type: ignore[union-attr]
        lines.append(
            f"On {s.name} the deployed INT8 model (calibrated on {deployed_cal}) agrees with FP32 at IoU {m.pixel_iou_vs_fp32:.2f}{ref}"
            f" and changes detections per image by {100 * m.alarm_rate_change:+.0f}%: {_cause(s.drift)}."
        )
    if not lines:
        lines.append(f"The deployed INT8 model (calibrated on {deployed_cal}) agrees with FP32 on every site set (" + ", ".join(f"{n} IoU {dep[n].pixel_iou_vs_fp32:.2f}" for n in ok if dep[n]) + ").")  # type: ignore[union-attr]
    if not candidate_cal or not any(cand.values()):
        return ("keep deployed" if len(ok) == len(dep) else "needs review"), lines
    ups = [f"{n} to {c.pixel_iou_vs_fp32:.2f}" for n, c in cand.items() if c and dep[n] and c.pixel_iou_vs_fp32 > dep[n].pixel_iou_vs_fp32 + 1e-9]  # type: ignore[union-attr]
    downs = [f"{n} to {c.pixel_iou_vs_fp32:.2f}" for n, c in cand.items() if c and dep[n] and c.status != "green" and c.pixel_iou_vs_fp32 < dep[n].pixel_iou_vs_fp32 - 1e-9]  # type: ignore[union-attr]
    all_green = all(c is not None and c.status == "green" for c in cand.values())
    if all_green:
        decision = "acceptable"
    elif ups:
        decision = "needs review"
    else:
        decision = "keep deployed"
    sentence = f"Recalibrating on {candidate_cal} "
    sentence += ("raises agreement on " + ", ".join(ups)) if ups else "does not raise agreement on any site set"
    if downs:
        sentence += " but lowers " + ", ".join(downs)
    changed = [f"{n} {100 * c.alarm_rate_change:+.0f}%" for n, c in cand.items() if c and abs(c.alarm_rate_change) > cfg.max_alarm_rate_change]
    if changed:
        sentence += "; detections per image vs FP32: " + ", ".join(changed)
    lines.append(sentence + f" — {decision}.")
    return decision, lines


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
    dep_thr = read_json(inputs.deployed_thresholds, "threshold set")
    cand_rec = _record(inputs.candidate) if inputs.candidate else None
    cand_thr = read_json(inputs.candidate_thresholds, "threshold set") if inputs.candidate_thresholds else None
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
    decision, lines = verdict(sites, dep_cal, cand_cal, cfg)
    provenance = {
        "git_revision": _git_revision(),
        "versions": _versions(),
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
    from ..quantize.record import CalibrationRecord

    return CalibrationRecord.load(folder).to_dict()


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

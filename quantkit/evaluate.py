"""Decisions on a site set: FP32, deployed INT8 and candidate INT8, each at its bound thresholds.

Every image is decoded once and each model runs once on it (streaming: only one image's outputs are
in memory). Variants: ``fp32`` (FP32 thresholds from params), ``<role>`` (the role's threshold set)
and ``<role>@fp32-thresholds`` (the same INT8 outputs at the FP32 thresholds, i.e. what happens when
thresholds are not re-derived). Threshold sets are checked against their records first
(:meth:`ThresholdSet.check_binding`); a mismatch refuses before any inference.

Output folder (written atomically, docs/ARCHITECTURE.md):

* ``per_image.csv``: image, variant, n_detections, pixel_iou_vs_fp32, box_f1_vs_fp32, tp, fp, fn,
  latency_ms, then pixel_intersection, pixel_union, agree_tp, agree_fp, agree_fn (counts behind the
  ratios, so aggregates and bootstraps can be recomputed). tp/fp/fn are vs ground-truth boxes (empty
  when the set has no labels); box matching is greedy at IoU >= ``match_iou`` (polygon IoU, shapely).
* ``score_hist.json``: ``{bin_edges (1001 edges over [0, 1]), counts{model}}``: the output probability
  map (map heads) or candidate item scores, accumulated per model (bounded memory).
* ``detections.json``: per image and variant, polygons in source-image pixels (rounded ints) and scores.
* ``summary.json``: per variant aggregates: pixel IoU vs FP32 (sum of intersections / sum of unions),
  detections per image, alarm rate (share of images with >= 1 detection), precision/recall/F1 vs
  ground truth, box agreement F1 vs FP32, mean latency, images; plus thresholds and bindings.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ._io import atomic_output_dir, atomic_write_json, atomic_write_text
from .artifacts.thresholds import ThresholdSet
from .errors import ConfigError, InputFileError
from .note import ExportNote
from .progress import progress
from .thresholds.adapters import Adapter, Decision, f1, match_count
from .thresholds.binding import QUANT_MODEL
from .thresholds.operating_point import ThresholdsConfig, truth_in_model_pixels

log = logging.getLogger(__name__)

HIST_BINS = 1000
COLUMNS = ["image", "variant", "n_detections", "pixel_iou_vs_fp32", "box_f1_vs_fp32", "tp", "fp", "fn", "latency_ms",
           "pixel_intersection", "pixel_union", "agree_tp", "agree_fp", "agree_fn"]
FP32_SUFFIX = "@fp32-thresholds"


@dataclasses.dataclass(frozen=True, repr=False)
class EvalResult:
    """What :func:`evaluate` wrote: the folder and the summary dict (also ``summary.json``)."""

    path: Path
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), **self.summary}

    def __repr__(self) -> str:
        return f"EvalResult({self.path}, {self.summary.get('images')} images, variants={list(self.summary.get('variants', {}))})"


def _hist_values(adapter: Adapter, outputs: Mapping[str, np.ndarray], cand: Decision | None) -> np.ndarray:
    m = adapter.map_of(outputs)
    if m is not None:
        return m.ravel()
    return cand.scores if cand is not None else np.zeros(0, np.float32)


def _row(image: str, variant: str, dec: Decision, ref: Decision, truth: np.ndarray | None, latency_ms: float, min_iou: float) -> dict[str, Any]:
    row: dict[str, Any] = {"image": image, "variant": variant, "n_detections": len(dec), "latency_ms": round(latency_ms, 3)}
    if dec.mask is not None and ref.mask is not None:
        inter = int(np.count_nonzero(dec.mask & ref.mask))
        union = int(np.count_nonzero(dec.mask | ref.mask))
        row.update(pixel_intersection=inter, pixel_union=union, pixel_iou_vs_fp32=round(inter / union, 6) if union else 1.0)
    else:
        row.update(pixel_intersection="", pixel_union="", pixel_iou_vs_fp32="")
    a = match_count(dec.polygons, ref.polygons, pred_labels=dec.labels, truth_labels=ref.labels, min_iou=min_iou)
    row.update(agree_tp=a, agree_fp=len(dec) - a, agree_fn=len(ref) - a, box_f1_vs_fp32=round(f1(a, len(dec) - a, len(ref) - a), 6))
    if truth is not None:
        tp = match_count(dec.polygons, truth, min_iou=min_iou)
        row.update(tp=tp, fp=len(dec) - tp, fn=len(truth) - tp)
    else:
        row.update(tp="", fp="", fn="")
    return row


def _summarize(rows: list[dict[str, Any]], variants: list[str], labelled: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in variants:
        rs = [r for r in rows if r["variant"] == v]
        n = len(rs)
        s: dict[str, Any] = {"images": n}
        det = np.array([r["n_detections"] for r in rs], np.float64)
        s["detections_per_image"] = round(float(det.mean()), 6) if n else 0.0
        s["alarm_rate"] = round(float((det > 0).mean()), 6) if n else 0.0
        s["mean_latency_ms"] = round(float(np.mean([r["latency_ms"] for r in rs])), 3) if n else 0.0
        if rs and rs[0]["pixel_union"] != "":
            inter = sum(r["pixel_intersection"] for r in rs)
            union = sum(r["pixel_union"] for r in rs)
            s["pixel_iou_vs_fp32"] = round(inter / union, 6) if union else 1.0
        else:
            s["pixel_iou_vs_fp32"] = None
        at, af, an = (sum(r[k] for r in rs) for k in ("agree_tp", "agree_fp", "agree_fn"))
        s["box_f1_vs_fp32"] = round(f1(at, af, an), 6)
        if labelled:
            tp, fp, fn = (sum(r[k] for r in rs) for k in ("tp", "fp", "fn"))
            s.update(tp=tp, fp=fp, fn=fn, precision=round(tp / (tp + fp), 6) if tp + fp else None,
                     recall=round(tp / (tp + fn), 6) if tp + fn else None, f1=round(f1(tp, fp, fn), 6))
        else:
            s.update(tp=None, fp=None, fn=None, precision=None, recall=None, f1=None)
        out[v] = s
    return out


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def evaluate(site_dir: str | os.PathLike[str], fp32_dir: str | os.PathLike[str],
             quantized: Mapping[str, tuple[str | os.PathLike[str], str | os.PathLike[str]]],
             config: ThresholdsConfig, out: str | os.PathLike[str]) -> EvalResult:
    """Evaluate FP32 and quantized models on a site set and write the evaluation folder ``out``.

    Args:
        site_dir: a set folder (``images/`` + ``manifest.json``); labels are used when present.
        fp32_dir: the intake folder (``model.onnx`` + ``export_note.json``).
        quantized: role (``deployed``, ``candidate``) -> (quantized folder, threshold set JSON).
        config: ``params.yaml: thresholds`` (FP32 thresholds, adapter options, ``match_iou``).
        out: output folder, replaced whole on success, untouched on failure.

    Raises:
        BindingMismatchError: a threshold set does not belong to its quantized folder's record/model.
        InputFileError / ModelError / CalibrationSetError / ConfigError: bad inputs (one line each).
    """
    from .calibset import CalibrationSet
    from .calibset.reader import CalibrationSetReader
    from .runner import OrtRunner

    fdir = Path(fp32_dir)
    fmodel = fdir / "model.onnx"
    if fdir.is_file():
        raise InputFileError(f"{fdir}: --fp32 expects the intake folder (model.onnx + export_note.json, e.g. work/intake), not a model file")
    if not fmodel.is_file():
        raise InputFileError(f"{fmodel}: FP32 model not found; --fp32 expects the intake folder (model.onnx + export_note.json): run 'quantkit intake' first")
    note = ExportNote.load(fdir / "export_note.json")
    fp32_adapter = config.fp32_adapter()
    min_iou = config.operating_point.match_iou
    roles: dict[str, tuple[Path, ThresholdSet]] = {}
    for role, (qdir, tpath) in quantized.items():
        if role == "fp32" or FP32_SUFFIX in role:
            raise ConfigError(f"role name {role!r} is reserved; use e.g. deployed or candidate")
        qmodel = Path(qdir) / QUANT_MODEL
        if not qmodel.is_file():
            raise InputFileError(f"{qmodel}: quantized model not found; run 'quantkit quantize' first")
        ts = ThresholdSet.load_bound(tpath, qdir, model_path=qmodel)
        if ts.adapter != fp32_adapter.name:
            raise ConfigError(f"{tpath}: adapter {ts.adapter!r} differs from params thresholds.adapter {fp32_adapter.name!r}; re-bind")
        if ts.fp32_values != fp32_adapter.thresholds():
            log.warning("%s: FP32 thresholds %s differ from params %s; using params for the fp32 variants", tpath, ts.fp32_values, fp32_adapter.thresholds())
        roles[role] = (qmodel, ts)
    cset = CalibrationSet.load(site_dir)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    variants = ["fp32"] + [r for r in roles] + [r + FP32_SUFFIX for r in roles]
    adapters = {r: ts.make_adapter() for r, (_, ts) in roles.items()}
    fp32_for_role = {r: fp32_adapter.with_thresholds(fp32_adapter.thresholds()) for r in roles}
    edges = np.linspace(0.0, 1.0, HIST_BINS + 1)
    hist = {m: np.zeros(HIST_BINS, np.int64) for m in ["fp32", *roles]}
    rows: list[dict[str, Any]] = []
    detections: dict[str, dict[str, Any]] = {}
    labelled = all(e.text_boxes is not None for e in cset.entries)
    runners = {"fp32": OrtRunner(fmodel, name="fp32"), **{r: OrtRunner(m, name=r) for r, (m, _) in roles.items()}}
    for r in runners.values():
        r.activate()
    try:
        for entries, x, tfs in progress(reader.iter_with_transforms(), total=len(reader), desc=f"evaluate {cset.name}"):
            e, tf = entries[0], tfs[0]
            feed = {note.preprocessing.input_name: x}
            truth = truth_in_model_pixels(e.text_boxes, tf)
            out_fp = runners["fp32"].infer(feed)
            ref = fp32_adapter.decide(out_fp)
            lat = {"fp32": runners["fp32"].inference_times[-1] * 1e3}
            decs = {"fp32": ref}
            hist["fp32"] += np.histogram(np.clip(_hist_values(fp32_adapter, out_fp, fp32_adapter.candidates(out_fp) if fp32_adapter.map_of(out_fp) is None else None), 0, 1), edges)[0]
            for role in roles:
                o = runners[role].infer(feed)
                lat[role] = lat[role + FP32_SUFFIX] = runners[role].inference_times[-1] * 1e3
                decs[role] = adapters[role].decide(o)
                decs[role + FP32_SUFFIX] = fp32_for_role[role].decide(o)
                cand = None if adapters[role].map_of(o) is not None else adapters[role].candidates(o)
                hist[role] += np.histogram(np.clip(_hist_values(adapters[role], o, cand), 0, 1), edges)[0]
            detections[e.file] = {}
            for v in variants:
                rows.append(_row(e.file, v, decs[v], ref, truth, lat[v], min_iou))
                d = decs[v]
                poly = tf.to_image(d.polygons) if len(d) else d.polygons
                detections[e.file][v] = {"polygons": np.rint(poly).astype(int).tolist(),
                                         "scores": [round(float(s), 4) for s in d.scores]}
    finally:
        for r in runners.values():
            r.deactivate()
    summary = {
        "site_set": cset.to_dict(),
        "images": len(detections),
        "labelled": labelled,
        "adapter": fp32_adapter.name,
        "match_iou": min_iou,
        "variants": _summarize(rows, variants, labelled),
        "thresholds": {"fp32": fp32_adapter.thresholds(),
                       **{r: {"values": ts.values, "fp32_values": ts.fp32_values, "fingerprint": ts.fingerprint,
                              "record_fingerprint": ts.binding.record_fingerprint,
                              "calibration_set": ts.binding.calibration_set_name,
                              "integer_domain": {k: v.decision_value for k, v in ts.integer_domain.items()}}
                          for r, (_, ts) in roles.items()}},
    }
    with atomic_output_dir(out) as tmp:
        atomic_write_text(tmp / "per_image.csv", _csv(rows))
        atomic_write_json(tmp / "score_hist.json", {"bin_edges": [round(float(v), 6) for v in edges],
                                                    "counts": {k: v.tolist() for k, v in hist.items()},
                                                    "source": "probability map" if type(fp32_adapter).map_of is not Adapter.map_of else "item scores"})
        atomic_write_json(tmp / "detections.json", {"coordinates": "source image pixels", "images": detections})
        atomic_write_json(tmp / "summary.json", summary)
    return EvalResult(Path(out), summary)

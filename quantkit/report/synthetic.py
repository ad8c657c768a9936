"""Synthetic report inputs (one model's work folder and small site images) for tests and benchmarks.

Writes the pipeline's layout under ``root`` (``work/models/<model>/{quantize,thresholds,eval,drift}`` and ``site_sets``)
through the real artifact classes, with made-up but consistent numbers for a DB text detector: the deployed model
(calibrated by day) agrees less with FP32 on the ``night`` site, the candidate (calibrated at night) the other way.
Not used by the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_json, atomic_write_text

QUALITY = {"cam1-day": {"deployed": 0.95, "candidate": 0.65}, "cam1-night": {"deployed": 0.80, "candidate": 0.90}}
"""Pixel IoU vs FP32 per site and role (other sites: deployed 0.85, candidate 0.75)."""


def _box(rng: np.random.Generator, size: int) -> list[list[float]]:
    x, y = rng.uniform(0, size * 0.6, 2)
    w, h = rng.uniform(size * 0.15, size * 0.35), rng.uniform(size * 0.05, size * 0.12)
    return [[round(x, 1), round(y, 1)], [round(x + w, 1), round(y, 1)], [round(x + w, 1), round(y + h, 1)], [round(x, 1), round(y + h, 1)]]


NEAR_LINE_BASELINE = 0.03
"""Share of FP32's text-region scores planted within one step of ``box_thresh`` on the reference set (and, unless
``write_inputs(near_line=...)`` says otherwise, on every site set)."""


def _region_scores(rng: np.random.Generator, n: int, line: float, step: float, near: float) -> np.ndarray:
    """``n`` text-region scores (mean probabilities): a share ``near`` hugging ``line`` (within half a step of it, so
    within one integer step), the rest far from it (text near 0.85, background blobs near 0.15)."""
    k = round(near * n)
    hug = line + rng.uniform(-0.5, 0.5, k) * step
    far = np.where(rng.random(n - k) < 0.6, rng.normal(0.85, 0.04, n - k), rng.normal(0.15, 0.04, n - k))
    return np.clip(np.concatenate([hug, far]), 0.0, 1.0)


def _records(work: Path) -> dict[str, Any]:
    from ..artifacts.record import CalibrationRecord, SetRef, TensorScale
    from ..artifacts.thresholds import Binding, ThresholdSet
    from ..thresholds.integer_domain import integer_threshold
    from ..thresholds.near_line import NearLineCounter

    out = {}
    for role, lighting in (("deployed", "day"), ("candidate", "night")):
        tensors = [TensorScale(f"conv{i}_out", "activation", "uint8", None, (0.02 * (1 + i / 10) * (0.5 if role == "candidate" and i % 3 == 0 else 1.0),),
                               (0 if i else 128,), 0.0, 1.0, "minmax") for i in range(12)]
        tensors.append(TensorScale("sigmoid_0.tmp_0", "activation", "uint8", None, (1 / 255,), (0,), 0.0, 1.0, "minmax"))
        cs = SetRef(path=f"calibration_sets/cam1-{lighting}", set_id=("11" if role == "deployed" else "22") * 32, name=f"cam1-{lighting}",
                    camera="cam1", lighting=lighting, count=64)
        rec = CalibrationRecord(fingerprint="", model_digest="ab" * 32, quantized_model_digest=("cd" if role == "deployed" else "ef") * 32,
                                calibration_set=cs, config={"method": "minmax"}, config_hash="99" * 32, opset_before=12, opset_after=13,
                                versions={"onnx": "1.23", "onnxruntime": "1.32", "numpy": "2.4", "quantkit": "0.1.0"}, tensors=tuple(tensors)).sealed()
        rec.save(work / "quantize" / role / "record.json")
        t = 0.3 if role == "deployed" else 0.27
        box = integer_threshold(0.5 if role == "deployed" else 0.46, tensor="sigmoid_0.tmp_0", scale=1 / 255, zero_point=0, dtype="uint8",
                                comparison=">=", reduction="mean")
        baseline = NearLineCounter("box_thresh", box)
        baseline.add(_region_scores(np.random.default_rng(7), 400, box.float_value, box.scale, NEAR_LINE_BASELINE))
        ts = ThresholdSet(adapter="db_text", options={"unclip_ratio": 1.6}, values={"thresh": t, "box_thresh": 0.5 if role == "deployed" else 0.46},
                          fp32_values={"thresh": 0.3, "box_thresh": 0.5},
                          integer_domain={"thresh": integer_threshold(t, tensor="sigmoid_0.tmp_0", scale=1 / 255, zero_point=0, dtype="uint8"),
                                          "box_thresh": box},
                          binding=Binding.of(rec, ""), near_line=baseline.result())
        ts.save(work / "thresholds" / f"{role}.json")
        out[role] = (rec, ThresholdSet.load(work / "thresholds" / f"{role}.json"))
    return out


def _drift(site: str, si: int, n: int, camera: str, lighting: str, record_fp: str) -> Any:
    from ..artifacts.drift import ClippedTensor, Clipping, DriftResult, StatisticChange, StatisticEffect
    from ..artifacts.record import SetRef

    moved = site != "cam1-day"
    return DriftResult(
        site_set=SetRef(path=f"site_sets/{site}", set_id=f"{si:02d}" * 32, name=site, camera=camera, lighting=lighting, count=n),
        calibration_set=SetRef(path="calibration_sets/cam1-day", set_id="11" * 32, name="cam1-day", camera="cam1", lighting="day", count=64),
        statistics=tuple(StatisticEffect("brightness_mean", m, 2.5 if moved else 0.2, 1.0, moved) for m in ("wasserstein", "psi", "js")),
        changes=(StatisticChange("brightness_mean", 120.0, 38.0 if moved else 118.0, -0.68 if moved else -0.02, 3 if moved else 0, moved, 0.9 if moved else 0.1),),
        clipping=Clipping(0.004 if moved else 0.0004, 0.0003, 0.0013, moved, 8, 8, 13, (ClippedTensor("conv3_out", 0.01),)),
        changed=moved, reasons=("brightness fell 68% vs calibration (cam1-day)",) if moved else ("no image statistic moved beyond calibration (cam1-day) variability",),
        config={}, record_fingerprint=record_fp)


def _site_rows(rng: np.random.Generator, q: dict[str, float], name: str, gt: list[list[list[float]]], variants: Sequence[str],
               items: int = 3) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, np.ndarray]]:
    from ..evaluate.run import image_row
    from ..tasks.maps import DBTextAdapter
    from ..tasks.matching import item_counts

    primary = DBTextAdapter.primary_metric()
    rows, dets, scores = [], {}, {}
    n_fp32 = max(0, items + int(rng.integers(-1, 2)))
    for v in variants:
        base = v.split("@")[0]
        iou = 1.0 if base == "fp32" else float(np.clip(q[base] + rng.normal(0, 0.01), 0, 1))
        n = n_fp32 if iou > 0.85 else max(0, n_fp32 - 1)
        tp = min(n, 3) if iou > 0.7 else max(0, min(n, 3) - 1)
        union = 1000
        agree_tp = min(n, n_fp32) if iou > 0.85 else max(0, min(n, n_fp32) - 1)
        counts = {} if base == "fp32" else {"pixel_inter": float(round(iou * union)), "pixel_union": float(union),
                                            **item_counts("agree", agree_tp, n, n_fp32, 0.9 * agree_tp)}
        counts.update(item_counts("gt", tp, n, 3, 0.8 * tp))
        rows.append(image_row(name, v, n, counts, primary))
        polys = [gt[j] if base == "fp32" else [[p[0] + rng.normal(0, 2), p[1]] for p in gt[j]] for j in range(min(n, 3))]
        dets[v] = {"polygons": [[[int(round(x)), int(round(y))] for x, y in p] for p in polys], "scores": [0.8] * len(polys), "labels": [0] * len(polys)}
        scores[v] = np.clip(rng.beta(2, 5, 200) + (0.0 if base == "fp32" else (1 - iou) * 0.4), 0, 1)
    return rows, dets, scores


def write_inputs(root: str | Path, *, model: str = "ppocr_det", sites: Sequence[str] = ("cam1-day", "cam1-night", "cam2-day"),
                 images_per_site: int = 6, image_size: int = 96, write_images: bool = True, seed: int = 0,
                 quality: Mapping[str, Mapping[str, float]] | None = None, items: Mapping[str, int] | None = None,
                 labelled: bool = True, near_line: Mapping[str, float] | None = None) -> dict[str, Path]:
    """Write a synthetic report input tree; returns ``{"work": work/models/<model>, "site_sets": site_sets}``.

    ``quality``: site -> role -> pixel IoU vs FP32 (default :data:`QUALITY`); ``items``: site -> FP32's text regions per
    image (default 3, each image +-1); ``labelled``: whether the evaluations carry accuracy against labels;
    ``near_line``: site -> share of FP32's text-region scores planted within one integer step of each role's
    ``box_thresh`` (default :data:`NEAR_LINE_BASELINE`, the reference set's share), counted by the real
    :class:`quantkit.thresholds.near_line.NearLineCounter` against each threshold set's baseline."""
    from PIL import Image

    from ..artifacts.evaluation import EvalSummary, EvaluatedModel, MetricInfo
    from ..artifacts.record import SetRef
    from ..evaluate.run import rows_csv, summarize_rows
    from ..tasks.maps import DBTextAdapter
    from ..thresholds.near_line import NearLineCounter
    from ..thresholds.near_line import near_line as near_line_result

    root = Path(root)
    work = root / "work" / model
    rng = np.random.default_rng(seed)
    roles = _records(work)
    task = DBTextAdapter()
    variants = ["fp32", "deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds"]
    edges = np.linspace(0.0, 1.0, 51)
    for si, site in enumerate(sites):
        q = dict((quality if quality is not None else QUALITY).get(site, {"deployed": 0.85, "candidate": 0.75}))
        site_dir = root / "site_sets" / site
        camera, lighting = site.split("-") if "-" in site else (site, "")
        rows: list[dict[str, Any]] = []
        dets: dict[str, dict[str, Any]] = {}
        hist = {v: np.zeros(50, dtype=np.int64) for v in ("fp32", "deployed", "candidate")}
        for i in range(images_per_site):
            name = f"images/{i:04d}.jpg"
            if write_images:
                img = (rng.uniform(0, 1, (image_size, image_size, 3)) * (60 if "night" in site else 220)).astype(np.uint8)
                (site_dir / "images").mkdir(parents=True, exist_ok=True)
                Image.fromarray(img).save(site_dir / name, quality=70)
            r, d, s = _site_rows(rng, q, name, [_box(rng, image_size) for _ in range(3)], variants, (items or {}).get(site, 3))
            if not labelled:
                r = [{k: v for k, v in row.items() if not k.startswith("gt_")} for row in r]
            rows += r
            dets[name] = d
            for v in hist:
                hist[v] += np.histogram(s[v], edges)[0]
        near = {}
        for r, (_, ts) in roles.items():
            counter = NearLineCounter("box_thresh", ts.integer_domain["box_thresh"])
            share = (near_line or {}).get(site, NEAR_LINE_BASELINE)
            counter.add(_region_scores(np.random.default_rng(100 + si), 40 * images_per_site, ts.integer_domain["box_thresh"].float_value,
                                       ts.integer_domain["box_thresh"].scale, share))
            near[r] = near_line_result(counter.result(), ts.near_line, 3, "cam1-day")
        out = work / "eval" / site
        atomic_write_text(out / "per_image.csv", rows_csv(rows, task.primary_metric().name))
        atomic_write_json(out / "score_hist.json", {"bin_edges": edges.tolist(), "counts": {v: c.tolist() for v, c in hist.items()}, "source": task.SCORES})
        atomic_write_json(out / "detections.json", {"coordinates": "source image pixels", "images": dets})
        EvalSummary(site_set=SetRef(set_id=f"{si:02d}" * 32, name=site, camera=camera, lighting=lighting, count=images_per_site),
                    fp32_model_digest="ab" * 32, task=task.name, task_options=task.options(), primary_metric=task.primary_metric().name,
                    metrics=tuple([MetricInfo(m.name, m.label, "agreement", m.higher_is_better, m.description) for m in task.AGREEMENT]
                                  + [MetricInfo(m.name, m.label, "accuracy", m.higher_is_better, m.description) for m in task.ACCURACY]),
                    item=task.ITEM, scores=task.SCORES, labelled=labelled, images=images_per_site, fp32_thresholds=task.thresholds(),
                    variants=summarize_rows(rows, variants, task, labelled),
                    models={r: EvaluatedModel(rec.fingerprint, ts.binding.quantized_model_digest, rec.set_name, ts.fingerprint, dict(ts.values),
                                              dict(ts.fp32_values), {k: v.decision_value for k, v in ts.integer_domain.items()})
                            for r, (rec, ts) in roles.items()}, near_line=near).save(out / "summary.json")
        _drift(site, si, images_per_site, camera, lighting, roles["deployed"][0].fingerprint).save(work / "drift" / f"{site}.json")
    return {"work": work, "site_sets": root / "site_sets"}


def write_verification(work: str | Path, runtimes: Mapping[str, str], *, sites: Sequence[str] = ("cam1-day", "cam1-night", "cam2-day")) -> Path:
    """Write ``work/verify.json`` for the deployed bundle of a :func:`write_inputs` tree: runtime -> ``verified``
    (everything agrees), ``numbers`` (decisions agree, a golden output differs: deployable with a warning),
    ``failed`` (decisions disagree: not deployable) or ``absent`` (not installed)."""
    from ..artifacts.record import CalibrationRecord
    from ..artifacts.thresholds import ThresholdSet

    work = Path(work)
    rec = CalibrationRecord.load(work / "quantize" / "deployed")
    ts = ThresholdSet.load(work / "thresholds" / "deployed.json")
    return _verification(rec, ts, runtimes, sites).save(work / "verify.json")


def write_target(work: str | Path, runtime: str, state: str, *, sites: Sequence[str] = ("cam1-day", "cam1-night", "cam2-day")) -> Path:
    """Write ``work/targets/<runtime>/`` of a :func:`write_inputs` tree as the main job's ``place`` .. ``verify`` stages
    would: ``quantize/`` (the deployed record with ``calibration.ranges_from`` naming it), ``thresholds.json`` and
    ``verify.json`` of that runtime in ``state`` (as in :func:`write_verification`). Returns the folder."""
    import dataclasses
    import shutil

    from ..artifacts.record import CalibrationRecord
    from ..artifacts.thresholds import ThresholdSet

    work = Path(work)
    folder = work / "targets" / runtime
    shutil.copytree(work / "quantize" / "deployed", folder / "quantize")
    rec = CalibrationRecord.load(folder / "quantize")
    rec = dataclasses.replace(rec, calibration={**(rec.calibration or {}), "ranges_from": rec.fingerprint})
    rec.save(CalibrationRecord.path_in(folder / "quantize"))
    shutil.copy(work / "thresholds" / "deployed.json", folder / "thresholds.json")
    _verification(rec, ThresholdSet.load(folder / "thresholds.json"), {runtime: state}, sites).save(folder / "verify.json")
    return folder


def _verification(rec: Any, ts: Any, runtimes: Mapping[str, str], sites: Sequence[str]) -> Any:
    from ..artifacts.verification import DeploymentVerification, RuntimeResult, SiteAgreement

    results = []
    for name, state in runtimes.items():
        if state == "absent":
            results.append(RuntimeResult(name, False))
            continue
        agree = 1.0 if state != "failed" else 0.6
        fails = {"verified": (), "numbers": ("[output] 0001 prob: 6.25% of elements beyond 2 steps",),
                 "failed": ("[decision] 0001: box F1 0.60 < 1.00 vs the simulation's decisions",)}[state]
        results.append(RuntimeResult(name, True, "1.0", f"{name} 1.0", {}, state == "verified", fails, 0.98,
                                     tuple(SiteAgreement(s, f"{i:02d}" * 32, 8, "box_f1", agree, 24, 24, 8 if agree == 1.0 else 3)
                                           for i, s in enumerate(sites)),
                                     state != "failed", "'conv3_out' (Conv 'conv3')" if state == "numbers" else ""))
    return DeploymentVerification("quantkit-bundle-0123456789abcdef.tar", "12" * 32, rec.fingerprint, ts.fingerprint, "db_text", tuple(results))

"""Synthetic report inputs (eval, drift, records, thresholds, small site images) for tests and benchmarks.

Writes the artifact layout of ``docs/ARCHITECTURE.md`` under ``root`` with made-up but consistent
numbers: the deployed model agrees less with FP32 on the ``night`` site, the candidate the other way.
Not used by the pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_json, atomic_write_text

VARIANTS = ("fp32", "deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds")


def _box(rng: np.random.Generator, size: int) -> list[list[float]]:
    x, y = rng.uniform(0, size * 0.6, 2)
    w, h = rng.uniform(size * 0.15, size * 0.35), rng.uniform(size * 0.05, size * 0.12)
    return [[round(x, 1), round(y, 1)], [round(x + w, 1), round(y, 1)], [round(x + w, 1), round(y + h, 1)], [round(x, 1), round(y + h, 1)]]


def write_inputs(
    root: str | Path,
    *,
    sites: Sequence[str] = ("cam1-day", "cam1-night", "cam2-day"),
    images_per_site: int = 6,
    image_size: int = 96,
    write_images: bool = True,
    seed: int = 0,
) -> dict[str, Path]:
    """Write a synthetic report input tree; returns the paths the report command takes.

    Keys: ``eval, drift, site_sets, deployed, deployed_thresholds, candidate, candidate_thresholds``.
    """
    from PIL import Image

    from ..artifacts.record import CalibrationRecord, TensorScale
    from ..thresholds.binding import ThresholdSet

    root = Path(root)
    rng = np.random.default_rng(seed)
    edges = np.linspace(0.0, 1.0, 51)
    records: dict[str, dict[str, Any]] = {}
    for role, lighting in (("deployed", "day"), ("candidate", "night")):
        tensors = []
        for i in range(12):
            s = 0.02 * (1 + i / 10) * (0.5 if (role == "candidate" and i % 3 == 0) else 1.0)
            tensors.append({"name": f"conv{i}_out", "role": "activation", "dtype": "uint8", "axis": None, "scale": [s], "zero_point": [0 if i else 128], "range_min": -128 * s if i == 0 else 0.0, "range_max": 255 * s, "calibrator": "minmax"})
        tensors.append({"name": "sigmoid_0.tmp_0", "role": "activation", "dtype": "uint8", "axis": None, "scale": [1 / 255], "zero_point": [0], "range_min": 0.0, "range_max": 1.0, "calibrator": "minmax"})
        rec: dict[str, Any] = {
            "schema_version": 1, "fingerprint": f"{role}-fp-" + "0" * 20, "model_digest": "ab" * 32, "quantized_model_digest": ("cd" if role == "deployed" else "ef") * 32,
            "calibration_set": {"path": f"calibration_sets/cam1-{lighting}", "set_id": (("11" if role == "deployed" else "22") * 32), "name": f"cam1-{lighting}", "camera": "cam1", "lighting": lighting, "count": 64},
            "config": {"method": "minmax"}, "config_hash": "99" * 32, "opset_before": 12, "opset_after": 13,
            "versions": {"onnx": "1.23", "onnxruntime": "1.32", "numpy": "2.4", "quantkit": "0.1.0"}, "tensors": tensors,
        }
        rec["fingerprint"] = CalibrationRecord.compute_fingerprint(
            [TensorScale.from_dict(t) for t in tensors], rec["model_digest"], rec["calibration_set"]["set_id"], rec["config_hash"])
        atomic_write_json(root / "work" / "quantize" / role / "record.json", rec)
        records[role] = rec
        t = 0.3 if role == "deployed" else 0.27
        code = 77 if role == "deployed" else 69
        thr = {"adapter": "db_text", "values": {"thresh": t, "box_thresh": 0.5 if role == "deployed" else 0.46},
               "fp32_values": {"thresh": 0.3, "box_thresh": 0.5},
               "integer_domain": {"thresh": {"tensor": "sigmoid_0.tmp_0", "dtype": "uint8", "scale": 1 / 255, "zero_point": 0, "float_value": t,
                                             "comparison": ">", "reduction": "none", "value": code, "decision_value": code, "mean_code_threshold": float(code),
                                             "rounding": "ceil"}},
               "binding": {"model_digest": "ab" * 32, "record_fingerprint": rec["fingerprint"], "calibration_set_id": rec["calibration_set"]["set_id"],
                           "calibration_set_name": rec["calibration_set"]["name"]},
               "operating_point": {"reference_pixel_iou": 0.95}}
        ThresholdSet.from_dict(thr).save(root / "work" / "thresholds" / f"{role}.json")  # sealed: bound to the record above
    quality = {"cam1-day": {"deployed": 0.95, "candidate": 0.65}, "cam1-night": {"deployed": 0.80, "candidate": 0.90}}
    for si, site in enumerate(sites):
        q = quality.get(site, {"deployed": 0.85, "candidate": 0.75})
        site_dir = root / "site_sets" / site
        rows: list[dict[str, Any]] = []
        dets: dict[str, dict[str, Any]] = {}
        entries: list[dict[str, Any]] = []
        hist = {v: np.zeros(50, dtype=np.int64) for v in VARIANTS}
        for i in range(images_per_site):
            name = f"images/{i:04d}.jpg"
            if write_images:
                img = (rng.uniform(0, 1, (image_size, image_size, 3)) * (60 if "night" in site else 220)).astype(np.uint8)
                (site_dir / "images").mkdir(parents=True, exist_ok=True)
                Image.fromarray(img).save(site_dir / name, quality=70)
            gt = [_box(rng, image_size) for _ in range(3)]
            entries.append({"file": name, "labels": {"text_boxes": gt}})
            dets[name] = {}
            n_fp32 = 3 + int(rng.integers(-1, 2))
            for v in VARIANTS:
                base = v.split("@")[0]
                iou = 1.0 if base == "fp32" else float(np.clip(q[base] + rng.normal(0, 0.01), 0, 1))
                n = n_fp32 if iou > 0.85 else max(0, n_fp32 - 1)
                tp = min(n, 3) if iou > 0.7 else max(0, min(n, 3) - 1)
                rows.append({"image": name, "variant": v, "n_detections": n, "pixel_iou_vs_fp32": round(iou, 4), "box_f1_vs_fp32": round(min(1.0, iou + 0.02), 4), "tp": tp, "fp": n - tp, "fn": 3 - tp, "latency_ms": 40.0 if base == "fp32" else 25.0})
                dets[name][v] = [{"box": gt[j] if base == "fp32" else [[p[0] + rng.normal(0, 2), p[1]] for p in gt[j]], "score": float(rng.uniform(0.5, 0.9))} for j in range(min(n, 3))]
                shift = 0.0 if base == "fp32" else (1 - iou) * 0.4
                scores = np.clip(rng.beta(2, 5, 200) + shift, 0, 1)
                hist[v] += np.histogram(scores, edges)[0]
        import pandas as pd

        out = root / "work" / "eval" / site
        atomic_write_text(out / "per_image.csv", pd.DataFrame(rows).to_csv(index=False, lineterminator="\n"))
        atomic_write_json(out / "score_hist.json", {"bin_edges": edges.tolist(), "counts": {v: c.tolist() for v, c in hist.items()}})
        atomic_write_json(out / "detections.json", {"schema_version": 1, "images": dets})
        atomic_write_json(out / "summary.json", {"site_set": {"name": site, "path": f"site_sets/{site}", "set_id": f"{si:02d}" * 32, "count": images_per_site}})
        camera, lighting = site.split("-") if "-" in site else (site, "")
        atomic_write_json(site_dir / "manifest.json", {"schema_version": 1, "set_id": f"{si:02d}" * 32, "name": site, "kind": "site", "camera": camera, "lighting": lighting, "count": images_per_site, "images": entries})
        moved = site != "cam1-day"
        drift = {
            "schema_version": 1, "site_set": {"name": site, "path": f"site_sets/{site}", "set_id": f"{si:02d}" * 32, "camera": camera, "lighting": lighting, "count": images_per_site},
            "calibration_set": {"name": "cam1-day", "path": "calibration_sets/cam1-day", "set_id": "11" * 32, "camera": "cam1", "lighting": "day", "count": 64},
            "statistics": [{"name": "brightness_mean", "metric": m, "effect": (2.5 if moved else 0.2), "threshold": 1.0, "moved": moved} for m in ("wasserstein", "psi", "js")],
            "changes": [{"name": "brightness_mean", "calibration_median": 120.0, "site_median": 38.0 if moved else 118.0, "relative_change": -0.68 if moved else -0.02, "metrics_moved": 3 if moved else 0, "moved": moved, "separation": 0.9 if moved else 0.1}],
            "clipping": {"rate": 0.004 if moved else 0.0004, "baseline": 0.0003, "threshold": 0.0013, "moved": moved, "images": 8, "baseline_images": 8, "tensors": 13, "worst": [{"tensor": "conv3_out", "rate": 0.01}]},
            "recalibrate": moved, "reasons": ["brightness fell 68% vs calibration (cam1-day)"] if moved else ["no image statistic moved beyond calibration (cam1-day) variability"],
            "config": {},
        }
        atomic_write_json(root / "work" / "drift" / f"{site}.json", drift)
    return {
        "eval": root / "work" / "eval", "drift": root / "work" / "drift", "site_sets": root / "site_sets",
        "deployed": root / "work" / "quantize" / "deployed", "deployed_thresholds": root / "work" / "thresholds" / "deployed.json",
        "candidate": root / "work" / "quantize" / "candidate", "candidate_thresholds": root / "work" / "thresholds" / "candidate.json",
    }

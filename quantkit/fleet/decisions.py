"""The fleet's one contact with the task adapter: FP32 and INT8 outputs of one image -> summary columns.

Everything task-specific the fleet needs (decoding outputs, what agreement with FP32 means, which
metric is primary) is asked here and nowhere else in :mod:`quantkit.fleet`; the rest of the package
only sums the integer columns listed in :data:`SUM_COLUMNS` and calls :func:`aggregate`.

Today the adapter comes from the deployed threshold set (``ThresholdSet.make_adapter()``, INT8 at
its bound thresholds; ``make_adapter(fp32=True)``, FP32 at the FP32 thresholds), and agreement is
computed as ``quantkit.evaluate`` does: box agreement by greedy polygon matching at IoU >=
``match_iou`` (:func:`quantkit.thresholds.adapters.match_count`), pixel IoU of the binarized maps
for map heads.

Columns per image (``None`` where the adapter has no such notion):

=====================  =======  ====================================================================
column                 type     meaning
=====================  =======  ====================================================================
n_det_fp32, n_det_int8 int      decisions (boxes, text lines, top-1 classes) of each model
max_score_fp32/int8    float    highest decision score (0 when there is none)
agree_tp/fp/fn         int      INT8 decisions matched / unmatched to FP32's, FP32 decisions missed
box_f1_vs_fp32         float    F1 of those counts (1.0 when both are empty)
pixel_intersection     int      pixels set in both binarized maps (map heads)
pixel_union            int      pixels set in either map (map heads)
pixel_iou_vs_fp32      float    intersection / union (1.0 when both are empty; map heads)
agreement              float    the adapter's primary agreement metric for this image
=====================  =======  ====================================================================
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

SUM_COLUMNS: tuple[str, ...] = ("n_det_fp32", "n_det_int8", "agree_tp", "agree_fp", "agree_fn", "pixel_intersection", "pixel_union")
"""Integer columns whose sums over any group of images give that group's agreement (:func:`aggregate`)."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("n_det_fp32", "int64"), ("n_det_int8", "int64"), ("max_score_fp32", "float64"), ("max_score_int8", "float64"),
    ("agree_tp", "int64"), ("agree_fp", "int64"), ("agree_fn", "int64"), ("box_f1_vs_fp32", "float64"),
    ("pixel_intersection", "int64"), ("pixel_union", "int64"), ("pixel_iou_vs_fp32", "float64"), ("agreement", "float64"),
)
"""``(name, pandas/arrow dtype)`` of :meth:`DecisionSummarizer.summarize`'s columns, in order."""

PRIMARY_LABELS = {"pixel_iou_vs_fp32": "pixel IoU vs FP32", "box_f1_vs_fp32": "box F1 vs FP32"}


class DecisionSummarizer:
    """Decides FP32 and INT8 outputs of one image with the deployed threshold set and compares them.

    Args:
        thresholds: the deployed threshold set JSON (``quantkit bind`` output).
        match_iou: IoU at which an INT8 decision matches an FP32 one (``thresholds.operating_point.match_iou``).

    Raises:
        InputFileError / ConfigError: the threshold set is missing, edited or names an unknown adapter.
    """

    def __init__(self, thresholds: str | os.PathLike[str], *, match_iou: float = 0.5) -> None:
        from ..thresholds.adapters import Adapter
        from ..thresholds.binding import ThresholdSet

        ts = ThresholdSet.load(thresholds)
        self.int8 = ts.make_adapter()
        self.fp32 = ts.make_adapter(fp32=True)
        self.match_iou = float(match_iou)
        self.fingerprint = ts.fingerprint
        has_map = type(self.int8).map_of is not Adapter.map_of
        self.primary = "pixel_iou_vs_fp32" if has_map else "box_f1_vs_fp32"

    def summarize(self, fp32_outputs: Mapping[str, np.ndarray], int8_outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Summary columns (:data:`COLUMNS`) of one image from each model's raw outputs (batch 1)."""
        from ..thresholds.adapters import f1, match_count

        ref = self.fp32.decide(fp32_outputs)
        dec = self.int8.decide(int8_outputs)
        a = match_count(dec.polygons, ref.polygons, pred_labels=dec.labels, truth_labels=ref.labels, min_iou=self.match_iou)
        row: dict[str, Any] = {
            "n_det_fp32": len(ref), "n_det_int8": len(dec),
            "max_score_fp32": round(float(ref.scores.max()), 6) if len(ref) else 0.0,
            "max_score_int8": round(float(dec.scores.max()), 6) if len(dec) else 0.0,
            "agree_tp": a, "agree_fp": len(dec) - a, "agree_fn": len(ref) - a,
            "box_f1_vs_fp32": round(f1(a, len(dec) - a, len(ref) - a), 6),
            "pixel_intersection": None, "pixel_union": None, "pixel_iou_vs_fp32": None,
        }
        if dec.mask is not None and ref.mask is not None:
            inter = int(np.count_nonzero(dec.mask & ref.mask))
            union = int(np.count_nonzero(dec.mask | ref.mask))
            row.update(pixel_intersection=inter, pixel_union=union, pixel_iou_vs_fp32=round(inter / union, 6) if union else 1.0)
        row["agreement"] = row[self.primary]
        return row


def check_deployed(thresholds: str | os.PathLike[str], quantized: str | os.PathLike[str], int8_model: str | os.PathLike[str]) -> str:
    """Refuse a threshold set that was not bound to this quantized folder's record and model file.

    Returns:
        The threshold set's fingerprint (part of every shard key).

    Raises:
        BindingMismatchError: the set was derived for another calibration or model (names the ``bind`` command).
        InputFileError / ConfigError: the set or record is missing or malformed.
    """
    from ..thresholds.binding import load_threshold_set

    return load_threshold_set(thresholds, quantized, model_path=int8_model).fingerprint


def aggregate(sums: Mapping[str, float], images: int, primary: str) -> dict[str, float | None]:
    """Agreement of a group of scored images from its :data:`SUM_COLUMNS` sums.

    Returns:
        ``agreement`` (the primary metric), ``pixel_iou_vs_fp32`` (sum of intersections / sum of
        unions, None without maps), ``box_f1_vs_fp32``, ``det_fp32_per_image``, ``det_int8_per_image``;
        every value None when ``images`` is 0.
    """
    from ..thresholds.adapters import f1

    if images <= 0:
        return {"agreement": None, "pixel_iou_vs_fp32": None, "box_f1_vs_fp32": None, "det_fp32_per_image": None, "det_int8_per_image": None}
    union = sums.get("pixel_union", 0)
    iou = (sums.get("pixel_intersection", 0) / union if union else 1.0) if primary == "pixel_iou_vs_fp32" else None
    box_f1 = f1(sums.get("agree_tp", 0), sums.get("agree_fp", 0), sums.get("agree_fn", 0))
    out = {"pixel_iou_vs_fp32": iou, "box_f1_vs_fp32": box_f1,
           "det_fp32_per_image": sums.get("n_det_fp32", 0) / images, "det_int8_per_image": sums.get("n_det_int8", 0) / images}
    out["agreement"] = out[primary]
    return out

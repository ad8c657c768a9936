"""Does the FP32 detector find the rendered text? Recall/precision of PP-OCR det against a set's labels.

Detection: the model run by :class:`quantkit.runner.OrtRunner` on inputs from
:class:`quantkit.calibset.CalibrationSetReader` (the given preprocessing), boxes from rapidocr's
``DBPostProcess`` (PaddleOCR's DB post-processing; defaults ``thresh=0.3, box_thresh=0.5,
unclip_ratio=1.6``, the package's deployed values), mapped back to image pixels with the reader's
:class:`~quantkit.note.Transform`. Matching: greedy one-to-one by polygon IoU (shapely) >= ``iou``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from ..errors import CalibrationSetError


@dataclasses.dataclass(frozen=True)
class RecallResult:
    """Box counts and rates of a detector against ground-truth text quads."""

    images: int
    gt_boxes: int
    detections: int
    matched: int
    iou: float

    @property
    def recall(self) -> float:
        return self.matched / self.gt_boxes if self.gt_boxes else float("nan")

    @property
    def precision(self) -> float:
        return self.matched / self.detections if self.detections else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "recall": self.recall, "precision": self.precision}

    def __repr__(self) -> str:
        return f"RecallResult(recall={self.recall:.3f}, precision={self.precision:.3f}, gt={self.gt_boxes}, det={self.detections})"


def _iou(a: Any, b: Any) -> float:
    inter = a.intersection(b).area
    union = a.union(b).area
    return float(inter / union) if union > 0 else 0.0


def match_boxes(gt: list[np.ndarray], det: list[np.ndarray], iou: float = 0.5) -> int:
    """Number of greedy one-to-one matches with polygon IoU >= ``iou`` (quads ``(4, 2)`` in pixels)."""
    from shapely.geometry import Polygon

    gp = [Polygon(g).buffer(0) for g in gt]
    dp = [Polygon(d).buffer(0) for d in det]
    pairs = sorted(((_iou(g, d), i, j) for i, g in enumerate(gp) for j, d in enumerate(dp)), reverse=True)
    used_g: set[int] = set()
    used_d: set[int] = set()
    for v, i, j in pairs:
        if v < iou:
            break
        if i not in used_g and j not in used_d:
            used_g.add(i)
            used_d.add(j)
    return len(used_g)


def detector_recall(
    cset: Any,
    model: str | os.PathLike[str],
    *,
    preprocessing: Any = None,
    limit: int | None = None,
    thresh: float = 0.3,
    box_thresh: float = 0.5,
    unclip_ratio: float = 1.6,
    iou: float = 0.5,
) -> RecallResult:
    """Run the DB text detector ``model`` over (the first ``limit`` images of) ``cset`` and match its boxes.

    Raises:
        CalibrationSetError: the set has no ``labels.text_boxes``.
        ModelError: the model cannot be loaded.
    """
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

    from ..calibset.reader import CalibrationSetReader
    from ..note import Preprocessing
    from ..runner import OrtRunner

    if any(e.text_boxes is None for e in cset.entries):
        raise CalibrationSetError(f"{cset.root}: images without labels.text_boxes; recall needs a labelled (demo) set")
    pre = preprocessing or Preprocessing()
    sub = cset if limit is None else dataclasses.replace(cset, entries=cset.entries[:limit])
    post = DBPostProcess(thresh=thresh, box_thresh=box_thresh, unclip_ratio=unclip_ratio)
    n_gt = n_det = n_match = n_img = 0
    with OrtRunner(model) as runner:
        for entries, x, tfs in CalibrationSetReader(sub, pre).iter_with_transforms():
            out = next(iter(runner.infer({pre.input_name: x}).values()))
            for k, (entry, tf) in enumerate(zip(entries, tfs)):
                boxes, _ = post(out[k:k + 1], (x.shape[2], x.shape[3]) if pre.layout == "NCHW" else x.shape[1:3])
                det = [tf.to_image(np.asarray(b, np.float64)) for b in boxes]
                gt = [np.asarray(q, np.float64) for q in entry.text_boxes or ()]
                n_gt += len(gt)
                n_det += len(det)
                n_match += match_boxes(gt, det, iou)
                n_img += 1
    return RecallResult(images=n_img, gt_boxes=n_gt, detections=n_det, matched=n_match, iou=iou)

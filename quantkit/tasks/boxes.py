"""Box detectors: raw detection tensors -> boxes after score filtering and class-wise NMS.

Agreement with FP32: box F1 at IoU ``match_iou`` after NMS (primary), precision/recall vs FP32 and the mean
IoU of matched boxes; against ground-truth ``labels.boxes``: precision, recall, F1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, ModelError
from .base import Decision, DecisionTensor, MetricSpec, Outputs, Shapes, TaskAdapter, ThresholdSpec, empty_decision, register_adapter
from .maps import item_metrics
from .matching import box_iou, item_counts, match


def corners(xyxy: np.ndarray) -> np.ndarray:
    """``(K, 4)`` boxes ``x0, y0, x1, y1`` -> ``(K, 4, 2) float32`` corner polygons, clockwise from top-left."""
    x0, y0, x1, y1 = (xyxy[:, i] for i in range(4))
    return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1).astype(np.float32)


def nms(xyxy: np.ndarray, scores: np.ndarray, labels: np.ndarray, iou_thresh: float) -> np.ndarray:
    """Indices kept by class-wise greedy NMS (OpenCV ``cv2.dnn.NMSBoxesBatched``), sorted by score descending."""
    import cv2

    xywh = np.stack([xyxy[:, 0], xyxy[:, 1], xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]], axis=1)
    # score_threshold below every kept score: the score threshold was applied before, with its own comparison
    idx = cv2.dnn.NMSBoxesBatched(xywh.tolist(), scores.tolist(), labels.tolist(), float(scores.min()) - 1.0, float(iou_thresh))
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    return idx[np.argsort(-scores[idx], kind="stable")]


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class BoxDetectorAdapter(TaskAdapter):
    """YOLO-style boxes ``[N, K, 4+1+C]`` (``cx, cy, w, h`` in input pixels, objectness, class scores).

    ``objectness: false`` reads ``[N, K, 4+C]``. Score = objectness x best class score; items with
    ``score > score_thresh`` go through class-wise greedy NMS at ``iou_thresh``. ``score_thresh`` applies to
    the output tensor; ``iou_thresh`` does not.
    """

    name: ClassVar[str] = "box_detector"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (
        ThresholdSpec("score_thresh", True, ">", "none", (0.05, 0.95), objective="box_f1"),
        ThresholdSpec("iou_thresh", False, ">", "none", (0.3, 0.7), objective="box_f1"),
    )
    PRIMARY: ClassVar[str] = "score_thresh"
    AGREEMENT: ClassVar[tuple[MetricSpec, ...]] = item_metrics("agree", "FP32", "box")
    ACCURACY: ClassVar[tuple[MetricSpec, ...]] = item_metrics("gt", "ground truth", "box")
    LABELS: ClassVar[str] = "boxes"
    SCORES: ClassVar[str] = "candidate box scores"
    ITEM: ClassVar[str] = "box"

    score_thresh: float = 0.25
    iou_thresh: float = 0.45
    objectness: bool = True
    match_iou: float = 0.5

    def validate(self) -> None:
        for k in ("score_thresh", "iou_thresh", "match_iou"):
            if not 0.0 <= getattr(self, k) <= 1.0:
                raise ConfigError(f"task.options.{k}: {getattr(self, k)} must be in [0, 1]")

    @property
    def _first(self) -> int:
        return 5 if self.objectness else 4

    def check_outputs(self, shapes: Shapes) -> None:
        name, shape = self._output_shape(shapes)
        if len(shape) != 3 or (isinstance(shape[2], int) and shape[2] <= self._first):
            raise self.layout_error(name, shape, f"box_detector [N, K, {self._first}+C]", "declare the output layout in task.options")

    def _rows(self, outputs: Outputs) -> np.ndarray:
        a = self.select_output(outputs)
        if a.ndim != 3 or a.shape[0] != 1 or a.shape[2] <= self._first:
            raise ModelError(f"task 'box_detector': expected a [1, K, {self._first}+C] output, got shape {list(a.shape)}")
        return np.asarray(a[0], np.float32)

    def _decide(self, outputs: Outputs) -> Decision:
        a = self._rows(outputs)
        cls = a[:, self._first:]
        labels = cls.argmax(axis=1)
        scores = cls[np.arange(a.shape[0]), labels] * (a[:, 4] if self.objectness else 1.0)
        keep = self.keep(scores, self.score_thresh)
        if not keep.any():
            return empty_decision()
        b, s, lab = a[keep, :4], scores[keep].astype(np.float32), labels[keep]
        xyxy = np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], axis=1)
        idx = nms(xyxy, s, lab, self.iou_thresh)
        return Decision(corners(xyxy[idx]), s[idx], lab[idx].astype(np.int64))

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        name, shape = self._output_shape(shapes)
        stop = shape[2] if isinstance(shape[2], int) else self._first + 1
        return (DecisionTensor(name, 2, 4, int(stop), 0.0, 1.0, "objectness and class scores"),)

    def _items(self, prefix: str, ref: Decision, got: Decision) -> dict[str, float]:
        tp, s = match(box_iou(got.polygons, ref.polygons), pred_labels=got.labels, truth_labels=ref.labels,
                      min_iou=self.match_iou) if len(got) and len(ref) else (0, 0.0)
        return item_counts(prefix, tp, len(got), len(ref), s)

    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:
        return self._items("agree", ref, got)

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        boxes = (labels or {}).get(self.LABELS)
        if boxes is None:
            return None
        b = np.asarray(boxes, np.float32).reshape(-1, 5) if len(boxes) else np.zeros((0, 5), np.float32)
        xyxy = b[:, :4] * np.array([transform.scale_x, transform.scale_y] * 2, np.float32)
        return Decision(corners(xyxy), np.ones(len(b), np.float32), b[:, 4].astype(np.int64))

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        return self._items("gt", truth, got)

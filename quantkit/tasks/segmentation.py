"""Binary segmentation: a per-pixel probability map -> a mask and its connected regions as items.

``segmentation``: output ``[N, 1, H, W]`` or ``[N, H, W]``, probabilities in [0, 1] (or logits with
``sigmoid: true``). mask = ``prob > thresh``; items = the mask's 8-connected components (OpenCV
``cv2.connectedComponentsWithStats``) of at least ``min_area`` pixels, each as its bounding box with the mean
probability over the component as its score, kept when ``score >= score_thresh``. Boxes are in map pixels
(the model input's pixels when the map has the input's size).

Agreement with FP32: pixel IoU of the masks (primary), F1 / precision / recall of the regions matched one to one
at box IoU ``match_iou`` and their mean matched IoU. Against ground truth ``labels.boxes`` =
``[[x0, y0, x1, y1, class], ...]`` (image pixels; the class is ignored): region precision, recall, F1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, ModelError
from .base import (
    DecisionTensor,
    MetricSpec,
    Outputs,
    Shapes,
    TaskAdapter,
    ThresholdSpec,
)
from .boxdecode import corners, logit, sigmoid
from .boxes import LOGIT_RANGE
from .decision import Decision, empty_decision
from .maps import PIXEL_IOU, item_metrics, map_agreement_counts
from .matching import box_iou, item_counts, match
from .registry import register_adapter


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class SegmentationAdapter(TaskAdapter):
    """Binary segmentation head (see the module docstring)."""

    name: ClassVar[str] = "segmentation"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (
        ThresholdSpec("thresh", True, ">", "none", (0.05, 0.95), objective="pixel_iou"),
        ThresholdSpec("score_thresh", True, ">=", "mean", (0.05, 0.95), objective="box_f1"),
    )
    PRIMARY: ClassVar[str] = "score_thresh"
    AGREEMENT: ClassVar[tuple[MetricSpec, ...]] = (PIXEL_IOU, *item_metrics("agree", "FP32", "region"))
    DECISION_METRIC: ClassVar[str] = "box_f1"
    ACCURACY: ClassVar[tuple[MetricSpec, ...]] = item_metrics("gt", "ground truth", "region")
    LABELS: ClassVar[str] = "boxes"
    SCORES: ClassVar[str] = "probability map"
    ITEM: ClassVar[str] = "region"

    thresh: float = 0.5
    score_thresh: float = 0.5
    min_area: int = 4
    sigmoid: bool = False
    match_iou: float = 0.5

    def validate(self) -> None:
        for k in ("thresh", "score_thresh", "match_iou"):
            if not 0.0 <= getattr(self, k) <= 1.0:
                raise ConfigError(f"task.options.{k}: {getattr(self, k)} must be in [0, 1]")
        if self.min_area < 1:
            raise ConfigError(f"task.options.min_area: {self.min_area} must be at least 1 pixel")

    def check_outputs(self, shapes: Shapes) -> None:
        name, shape = self._output_shape(shapes)
        if not (len(shape) == 3 or (len(shape) == 4 and not (isinstance(shape[1], int) and shape[1] > 1))):
            raise self.layout_error(name, shape, "segmentation [N, 1, H, W] or [N, H, W] (one probability map)",
                                    "pick the map output with task.options.output (multi-class maps are not built in)")

    def probability_map(self, outputs: Outputs) -> np.ndarray:
        """``(H, W) float32`` probabilities of a batch-of-one output."""
        arr = self.select_output(outputs)
        if arr.shape[:1] != (1,) or not (arr.ndim == 3 or (arr.ndim == 4 and arr.shape[1] == 1)):
            raise ModelError(f"task 'segmentation': expected a [1, 1, H, W] or [1, H, W] map, got shape {list(arr.shape)}")
        m = np.asarray(arr.reshape(arr.shape[-2:]), np.float32)
        return sigmoid(m) if self.sigmoid else m

    def _components(self, prob: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(xyxy (K, 4), mean probability (K,))`` of the mask's components of at least ``min_area`` pixels."""
        import cv2

        n, lab, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
        area = stats[1:, cv2.CC_STAT_AREA].astype(np.float64)
        sums = np.bincount(lab.ravel(), weights=prob.ravel().astype(np.float64), minlength=n)[1:]
        big = area >= self.min_area
        x, y = stats[1:, cv2.CC_STAT_LEFT], stats[1:, cv2.CC_STAT_TOP]
        xyxy = np.stack([x, y, x + stats[1:, cv2.CC_STAT_WIDTH], y + stats[1:, cv2.CC_STAT_HEIGHT]], axis=1).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (sums / np.where(area > 0, area, 1.0)).astype(np.float32)
        return xyxy[big], mean[big]

    def _decide(self, outputs: Outputs) -> Decision:
        prob = self.probability_map(outputs)
        mask = prob > np.float32(self.thresh)
        xyxy, score = self._components(prob, mask)
        keep = self.keep(score, self.score_thresh)
        if not keep.any():
            return empty_decision(mask)
        return Decision(corners(xyxy[keep]), score[keep], np.zeros(int(keep.sum()), np.int64), mask)

    def histogram_values(self, outputs: Outputs, candidates: Decision | None = None) -> np.ndarray:
        return self.probability_map(outputs).ravel()

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        name, _ = self._output_shape(shapes)
        lo, hi = LOGIT_RANGE if self.sigmoid else (0.0, 1.0)
        return (DecisionTensor(name, None, 0, 1, lo, hi, "probability map"),)

    def tensor_value(self, spec: ThresholdSpec, value: float) -> float | None:
        if not self.sigmoid:
            return float(value)
        return logit(value) if spec.reduction == "none" else None  # a mean of probabilities is no logit's mean

    # -- agreement -------------------------------------------------------------------------------------
    def _items(self, prefix: str, ref: Decision, got: Decision) -> dict[str, float]:
        tp, s = match(box_iou(got.polygons, ref.polygons), min_iou=self.match_iou) if len(got) and len(ref) else (0, 0.0)
        return item_counts(prefix, tp, len(got), len(ref), s)

    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:
        out = self._items("agree", ref, got)
        if ref.mask is not None and got.mask is not None:
            out["pixel_inter"] = float(np.count_nonzero(ref.mask & got.mask))
            out["pixel_union"] = float(np.count_nonzero(ref.mask | got.mask))
        return out

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        boxes = (labels or {}).get(self.LABELS)
        if boxes is None:
            return None
        b = np.asarray(boxes, np.float32).reshape(-1, 5) if len(boxes) else np.zeros((0, 5), np.float32)
        xyxy = transform.to_model(b[:, :4].reshape(-1, 2, 2), what="region boxes").reshape(-1, 4)
        return Decision(corners(xyxy), np.ones(len(b), np.float32), np.zeros(len(b), np.int64))

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        return self._items("gt", truth, got)

    def sweep(self, name: str, grid: np.ndarray, refs: Sequence[Decision | None], outputs: Sequence[Outputs],
              truth: bool = False) -> dict[str, np.ndarray]:
        """For ``thresh`` against FP32: pixel intersection/union per candidate in one pass per image
        (:func:`quantkit.tasks.maps.map_agreement_counts`); otherwise the default."""
        if name != "thresh" or truth:
            return super().sweep(name, grid, refs, outputs, truth)
        inter, union = map_agreement_counts([self.probability_map(o) for o in outputs],
                                            [r.mask if r is not None else None for r in refs], grid)
        return {"pixel_inter": inter.astype(np.float64), "pixel_union": union.astype(np.float64)}

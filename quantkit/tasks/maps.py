"""Map heads: a per-pixel probability map binarized, then regions as items (DB text detection).

``db_text``: PP-OCR's DB head, post-processing by :func:`quantkit.tasks.dbpost.db_boxes` (a port of rapidocr's
``DBPostProcess``, ``rapidocr_onnxruntime/ch_ppocr_det/utils.py``, itself a port of PaddleOCR's
``ppocr/postprocess/db_postprocess.py``) with rapidocr's deployed defaults (``config.yaml``: thresh 0.3, box_thresh 0.5, unclip_ratio 1.6,
max_candidates 1000, use_dilation true, score_mode fast). Agreement with FP32: pixel IoU of the binarized maps
(primary) and box F1 of the text regions at IoU 0.5; against ground-truth text quads: precision, recall, F1.
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
from .dbpost import db_boxes
from .decision import Decision, empty_decision
from .matching import item_counts, match, polygon_iou
from .registry import register_adapter


def item_metrics(prefix: str, vs: str, item: str) -> tuple[MetricSpec, ...]:
    """F1, precision, recall and mean matched IoU of items matched one-to-one (counts from
    :func:`quantkit.tasks.matching.item_counts` with the same ``prefix``). Agreement with FP32 (``prefix
    "agree"``) names them ``box_f1, box_precision, box_recall, matched_iou``; against ground truth (``"gt"``)
    ``f1, precision, recall, mean_iou``."""
    f1, p, r, iou = ("box_f1", "box_precision", "box_recall", "matched_iou") if prefix == "agree" else ("f1", "precision", "recall", "mean_iou")
    items = item + ("es" if item.endswith(("s", "x", "ch", "sh")) else "s")  # box -> boxes, text region -> text regions
    return (
        MetricSpec(f1, f"{item} F1 vs {vs}", f"{prefix}_f1_num", f"{prefix}_f1_den",
                   description=f"how well the {items} match {vs}'s one to one (1 = the same {items})"),
        MetricSpec(p, f"{item} precision vs {vs}", f"{prefix}_tp", f"{prefix}_got", description=f"share of {items} found that {vs} also has"),
        MetricSpec(r, f"{item} recall vs {vs}", f"{prefix}_tp", f"{prefix}_ref", description=f"share of {vs}'s {items} that were found"),
        MetricSpec(iou, f"mean IoU of matched {items} vs {vs}", f"{prefix}_iou_sum", f"{prefix}_tp",
                   description=f"how exactly matched {items} overlap {vs}'s (1 = identical)"),
    )


PIXEL_IOU = MetricSpec("pixel_iou", "pixel IoU vs FP32", "pixel_inter", "pixel_union",
                       description="overlap of the areas both models mark (intersection over union of the binarized maps)")


def truth_quads(quads: Any, transform: Any) -> np.ndarray:
    """Ground-truth quads (image pixels, ``(B, 4, 2)``) in model-input pixels (``transform``: a
    :class:`quantkit.note.Transform`; it refuses, with a ConfigError, an image that a crop cut)."""
    q = np.asarray(quads, dtype=np.float32).reshape(-1, 4, 2)
    return transform.to_model(q, what="text quads")


def map_agreement_counts(maps: Sequence[np.ndarray], ref_masks: Sequence[np.ndarray | None], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per image and candidate ``t``: intersection and union of ``(map > t)`` with the reference mask.

    One ``searchsorted`` + ``bincount`` per image (no per-candidate pass): ``v > grid[j]`` iff
    ``searchsorted(grid, v, "left") > j``. Returns two ``(N, C) int64`` arrays.
    """
    inter = np.zeros((len(maps), len(grid)), np.int64)
    union = np.zeros_like(inter)
    c32 = grid.astype(np.float32)
    for i, (m, ref) in enumerate(zip(maps, ref_masks)):
        if ref is None:
            continue
        idx = np.searchsorted(c32, m.astype(np.float32).ravel(), side="left")
        r = ref.ravel()
        cin = np.bincount(idx[r], minlength=len(grid) + 1)
        cout = np.bincount(idx[~r], minlength=len(grid) + 1)
        inter[i] = cin[::-1].cumsum()[::-1][1:]  # count with idx > j
        union[i] = int(r.sum()) + cout[::-1].cumsum()[::-1][1:]
    return inter, union


def _check_unit(where: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where}: {value} must be in [0, 1]")


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class DBTextAdapter(TaskAdapter):
    """PP-OCR DB text detection: probability map ``[N, 1, H, W]`` float32 in [0, 1] -> text polygons.

    ``thresh`` binarizes the map (pixel ``> thresh``); ``box_thresh`` keeps a polygon whose mean
    probability (rapidocr ``box_score_fast``) is ``>= box_thresh``; ``unclip_ratio`` grows polygons
    (Vatti clipping, distance = area x ratio / perimeter). Both thresholds apply to the sigmoid map.
    Polygons are in map (= model input) pixels; ``match_iou`` is the IoU at which two regions match.
    """

    name: ClassVar[str] = "db_text"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (
        ThresholdSpec("thresh", True, ">", "none", (0.05, 0.95), objective="pixel_iou"),
        ThresholdSpec("box_thresh", True, ">=", "mean", (0.05, 0.95), objective="box_f1"),
    )
    PRIMARY: ClassVar[str] = "box_thresh"
    AGREEMENT: ClassVar[tuple[MetricSpec, ...]] = (PIXEL_IOU, *item_metrics("agree", "FP32", "text region"))
    ACCURACY: ClassVar[tuple[MetricSpec, ...]] = item_metrics("gt", "ground truth", "text region")
    LABELS: ClassVar[str] = "text_boxes"
    SCORES: ClassVar[str] = "probability map"
    ITEM: ClassVar[str] = "text region"
    DECISION_METRIC: ClassVar[str] = "box_f1"

    thresh: float = 0.3
    box_thresh: float = 0.5
    unclip_ratio: float = 1.6
    max_candidates: int = 1000
    use_dilation: bool = True
    score_mode: str = "fast"
    match_iou: float = 0.5

    def validate(self) -> None:
        _check_unit("task.options.thresh", self.thresh)
        _check_unit("task.options.box_thresh", self.box_thresh)
        _check_unit("task.options.match_iou", self.match_iou)
        if self.unclip_ratio <= 0:
            raise ConfigError(f"task.options.unclip_ratio: {self.unclip_ratio} must be positive")
        if self.score_mode not in ("fast", "slow"):
            raise ConfigError(f"task.options.score_mode: {self.score_mode!r} must be 'fast' or 'slow'")

    def check_outputs(self, shapes: Shapes) -> None:
        name, shape = self._output_shape(shapes)
        if len(shape) != 4 or (isinstance(shape[1], int) and shape[1] != 1):
            raise self.layout_error(name, shape, "db_text [N, 1, H, W] (a probability map)",
                                    "pick the map output with task.options.output or declare the model's task")

    def _map(self, outputs: Outputs) -> np.ndarray:
        arr = self.select_output(outputs)
        if arr.ndim != 4 or arr.shape[1] != 1 or arr.shape[0] != 1:
            raise ModelError(f"task 'db_text': expected a [1, 1, H, W] probability map, got shape {list(arr.shape)}")
        return np.asarray(arr[0, 0], np.float32)

    def _decide(self, outputs: Outputs) -> Decision:
        prob = self._map(outputs)
        boxes, scores = db_boxes(prob, thresh=self.thresh, box_thresh=self.box_thresh, max_candidates=self.max_candidates,
                                 unclip_ratio=self.unclip_ratio, score_mode=self.score_mode, use_dilation=self.use_dilation)
        mask = prob > np.float32(self.thresh)
        if len(scores) == 0:
            return empty_decision(mask)
        return Decision(np.asarray(boxes, np.float32).reshape(-1, 4, 2), np.asarray(scores, np.float32),
                        np.zeros(len(scores), np.int64), mask)

    def histogram_values(self, outputs: Outputs, candidates: Decision | None = None) -> np.ndarray:
        return self._map(outputs).ravel()

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        name, _ = self._output_shape(shapes)
        return (DecisionTensor(name, None, 0, 1, 0.0, 1.0, "probability map"),)

    def _items(self, prefix: str, ref: Decision, got: Decision) -> dict[str, float]:
        tp, s = match(polygon_iou(got.polygons, ref.polygons), pred_labels=got.labels, truth_labels=ref.labels,
                      min_iou=self.match_iou) if len(got) and len(ref) else (0, 0.0)
        return item_counts(prefix, tp, len(got), len(ref), s)

    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:
        out = self._items("agree", ref, got)
        if ref.mask is not None and got.mask is not None:
            out["pixel_inter"] = float(np.count_nonzero(ref.mask & got.mask))
            out["pixel_union"] = float(np.count_nonzero(ref.mask | got.mask))
        return out

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        quads = (labels or {}).get(self.LABELS)
        if quads is None:
            return None
        q = truth_quads(quads, transform)
        return Decision(q, np.ones(len(q), np.float32), np.zeros(len(q), np.int64))

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        return self._items("gt", truth, got)

    def sweep(self, name: str, grid: np.ndarray, refs: Sequence[Decision | None], outputs: Sequence[Outputs],
              truth: bool = False) -> dict[str, np.ndarray]:
        if name != "thresh" or truth:
            return super().sweep(name, grid, refs, outputs, truth)
        inter, union = map_agreement_counts([self._map(o) for o in outputs], [r.mask if r is not None else None for r in refs], grid)
        return {"pixel_inter": inter.astype(np.float64), "pixel_union": union.astype(np.float64)}

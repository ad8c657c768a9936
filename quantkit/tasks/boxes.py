"""Box detectors: raw detection tensors -> boxes after score filtering and greedy NMS.

Every layout is declared in ``params.yaml: task.options`` and checked against the model's real output shapes
(:meth:`BoxDetectorAdapter.check_outputs`):

=========================  ===================================================  ==================================
``layout``                 output(s)                                            models
=========================  ===================================================  ==================================
``rows``                   ``[N, K, 4+1+C]`` (``objectness``), ``[N, K, 4+C]``  YOLOv5/v7 exports, decoded YOLOX
``rows`` + ``decode``      the same, raw grid head: ``decode: yolox|yolov5``    YOLOX raw head (ddddocr), YOLOv5
                           with ``strides`` (and ``anchors`` for yolov5)        without its ``Detect`` decode
``channels``               ``[N, 4+C, K]`` (transposed, no objectness)          YOLOv8 / YOLO11
``separate``               ``boxes_output [N, K, 4]`` + ``output`` scores        SSD, RT-DETR (``sigmoid: true``
                           ``[N, K, C]`` (or ``[N, K]``)                         for its logits)
=========================  ===================================================  ==================================

Boxes are ``box_format`` ``cxcywh`` / ``xywh`` / ``xyxy`` / ``yxyx``, in input pixels or ``normalized`` (0..1 of
the input size, ``input_size`` = [height, width], taken from the model by :meth:`~BoxDetectorAdapter.with_model`
when not declared). Grid decoding formulas and their sources: :mod:`quantkit.tasks.boxdecode`.

Score of a candidate = best class score x objectness (YOLOv5/YOLOX ``conf = obj_conf * cls_conf``), after the
optional ``sigmoid``; ``background_class`` (SSD's class 0) never wins. Candidates with ``score > score_thresh``
go through greedy NMS at ``iou_thresh`` (class-wise, or across classes with ``class_agnostic``; ``nms_offset: 1``
for pixel-inclusive box areas as YOLOX's demo and ddddocr compute them, see :func:`~quantkit.tasks.boxdecode.nms`).

Thresholds: ``score_thresh`` is compared with the scores output (:meth:`~BoxDetectorAdapter.threshold_tensor`);
its integer-domain form is the threshold on that tensor's own scale (:meth:`~BoxDetectorAdapter.tensor_value`:
the logit when ``sigmoid`` is on). Where the score is the product objectness x class score, the tensor holds
the two factors, not the product: a candidate passes only if both factors are ``> score_thresh`` (each is
<= 1), so the integer form is a necessary pre-filter on each factor's code, not the exact rule; the exact rule
is the float product. ``iou_thresh`` is compared with box IoUs (no tensor).

Agreement with FP32: box F1 at IoU ``match_iou`` after NMS (primary), precision/recall vs FP32 and the mean IoU
of matched boxes; detections per image come from the decisions. Against ground-truth ``labels.boxes`` =
``[[x0, y0, x1, y1, class], ...]`` in image pixels: precision, recall, F1, mean IoU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from ..errors import ConfigError, ModelError
from ..note import METADATA_KEY, ExportNote
from .base import (
    DecisionTensor,
    MetricSpec,
    Outputs,
    Shapes,
    TaskAdapter,
    ThresholdSpec,
)
from .boxdecode import (
    corners,
    decode_yolov5,
    decode_yolox,
    grid_cells,
    logit,
    nms,
    sigmoid,
    to_xyxy,
)
from .decision import Decision, empty_decision
from .maps import item_metrics
from .matching import box_iou, item_counts, match
from .registry import register_adapter

__all__ = ["BoxDetectorAdapter", "corners", "nms"]

TRANSPOSED_MIN = 1024
"""More values per candidate than this (and than candidates) reads as a transposed layout: no detector has over a
thousand classes, while every anchor-free head proposes thousands of boxes."""

#: What marks pixel boxes that are not (``BoxDetectorAdapter.check_reference``), among at least ``RAW_MIN`` of FP32's boxes
#: (above the score threshold, after NMS: a post-NMS list padded with zeros is not judged by its padding): a
#: share of negative widths or heights above ``RAW_SHARE``, or 99 % of the coordinates within ``RAW_EXTENT`` pixels of 0.
RAW_SHARE, RAW_EXTENT, RAW_MIN = 0.25, 4.0, 20

LOGIT_RANGE = (-8.0, 8.0)
"""Nominal range of score logits for the effective-levels check (sigmoid 0.0003..0.9997)."""


def _known(d: Any) -> bool:
    return isinstance(d, int) and d > 0


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class BoxDetectorAdapter(TaskAdapter):
    """Box detector (see the module docstring for layouts, decoding and thresholds).

    ``output``: the output with the rows (``rows``/``channels``) or the scores (``separate``);
    ``boxes_output``: the boxes output (``separate`` only). ``objectness``: None = the layout's usual
    (``rows``: yes; ``channels``, ``separate``: no).
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
    layout: Literal["rows", "channels", "separate"] = "rows"
    objectness: bool | None = None
    decode: Literal["none", "yolox", "yolov5"] = "none"
    strides: tuple[int, ...] = ()
    anchors: tuple[tuple[float, ...], ...] = ()
    box_format: Literal["cxcywh", "xywh", "xyxy", "yxyx"] = "cxcywh"
    normalized: bool = False
    input_size: tuple[int, int] = (0, 0)
    sigmoid: bool = False
    boxes_output: str = ""
    background_class: int = -1
    class_agnostic: bool = False
    nms_offset: float = 0.0
    match_iou: float = 0.5

    # -- options ---------------------------------------------------------------------------------------
    def validate(self) -> None:
        for k in ("score_thresh", "iou_thresh", "match_iou"):
            if not 0.0 <= getattr(self, k) <= 1.0:
                raise ConfigError(f"task.options.{k}: {getattr(self, k)} must be in [0, 1]")
        if self.layout == "separate":
            if not self.output or not self.boxes_output:
                raise ConfigError("task.options: layout 'separate' needs both 'output' (the scores output) and 'boxes_output' named")
            if self.objectness:
                raise ConfigError("task.options.objectness: layout 'separate' has no objectness channel; remove it")
        if self.decode != "none":
            if self.layout == "separate" or not self.strides:
                raise ConfigError(f"task.options.decode: {self.decode!r} decodes a grid head in layout 'rows' or 'channels' "
                                  "and needs 'strides' (e.g. [8, 16, 32])")
            if self.box_format != "cxcywh" or self.normalized:
                raise ConfigError(f"task.options.decode: {self.decode!r} yields cxcywh boxes in pixels; drop box_format/normalized")
        if self.decode == "yolov5":
            if len(self.anchors) != len(self.strides) or any(len(a) != len(self.anchors[0]) or len(a) % 2 for a in self.anchors):
                raise ConfigError("task.options.anchors: decode 'yolov5' needs one list [w0, h0, w1, h1, ...] (pixels) per stride, "
                                  "all of the same length")
            if not self.sigmoid:
                raise ConfigError("task.options.sigmoid: decode 'yolov5' reads the raw logits of Detect; set sigmoid: true")
        if self.nms_offset not in (0.0, 1.0):
            raise ConfigError(f"task.options.nms_offset: {self.nms_offset} must be 0 (continuous boxes) or 1 (pixel-inclusive)")
        if any(s <= 0 for s in self.strides) or any(d < 0 for d in self.input_size):
            raise ConfigError("task.options: strides and input_size must be positive")

    @property
    def has_objectness(self) -> bool:
        return self.objectness if self.objectness is not None else self.layout == "rows"

    @property
    def _first(self) -> int:
        """Index of the first class score in a row (4 box values, then objectness if any)."""
        return 5 if self.has_objectness else 4

    @property
    def _per_cell(self) -> int:
        return len(self.anchors[0]) // 2 if self.decode == "yolov5" else 1

    def _declared(self) -> str:
        f = f"{self._first}+C"
        if self.layout == "rows":
            what = f"rows [N, K, {f}]"
        elif self.layout == "channels":
            what = f"channels [N, {f}, K]"
        else:
            return f"separate: boxes {self.boxes_output!r} [N, K, 4] + scores {self.output!r} [N, K, C]"
        if self.decode != "none":
            what += f" with {self.decode} grid decoding at strides {list(self.strides)}"
            if _known(self.input_size[0]):
                what += f" on a {self.input_size[0]}x{self.input_size[1]} input (K = {self._cells()})"
        return what

    def _cells(self) -> int:
        return grid_cells(self.input_size, self.strides, self._per_cell)

    def with_model(self, model: Any) -> BoxDetectorAdapter:
        """Fill ``input_size`` from the model when the layout needs it and it is not declared: the export note's
        ``input_size`` (intake writes it), else the first input's static spatial dims (NCHW when dim 1 is 1, 3
        or 4, else NHWC)."""
        if _known(self.input_size[0]) or not (self.normalized or self.decode != "none"):
            return self
        size = _model_input_size(model)
        return self.replace(input_size=size) if size else self

    def threshold_tensor(self, spec: ThresholdSpec) -> str:
        return self.output

    def tensor_value(self, spec: ThresholdSpec, value: float) -> float | None:
        if spec.name != "score_thresh":
            return None
        return logit(value) if self.sigmoid else float(value)

    # -- layout ----------------------------------------------------------------------------------------
    def check_outputs(self, shapes: Shapes) -> None:
        name, shape = self._output_shape(shapes)
        if self.layout == "separate":
            self._check_separate(shapes, name, shape)
            return
        fix = "declare the output's layout in task.options (layout, objectness, decode, strides)"
        if len(shape) != 3:
            raise self.layout_error(name, shape, self._declared(), fix)
        f, k = (shape[2], shape[1]) if self.layout == "rows" else (shape[1], shape[2])
        self._check_rows(name, shape, k, f, fix)

    def _check_rows(self, name: str, shape: Any, k: Any, f: Any, fix: str) -> None:
        """K candidates of F values each: F > first class channel; a grid head has exactly its cells; otherwise a
        candidate axis much longer than the value axis read as values is the transposed layout (YOLOv8's
        [1, 84, 8400] read as rows: F = 8400 values per box). A short list of candidates with many classes (a
        post-NMS [1, 10, 85]) is not flagged: only value axes of :data:`TRANSPOSED_MIN` or more entries are."""
        other = "channels" if self.layout == "rows" else "rows"
        if _known(f) and f <= self._first:
            raise self.layout_error(name, shape, self._declared(), fix)
        if self.decode != "none" and _known(self.input_size[0]):
            if _known(k) and k != self._cells():
                raise self.layout_error(name, shape, self._declared(), "check layout, strides, anchors and input_size against the model")
        elif _known(f) and _known(k) and k < f and f >= TRANSPOSED_MIN:
            raise self.layout_error(name, shape, self._declared(), f"it looks transposed: try layout '{other}'")

    def _check_separate(self, shapes: Shapes, name: str, shape: Any) -> None:
        bname, bshape = self._output_shape(shapes, self.boxes_output)
        if len(bshape) != 3 or (_known(bshape[2]) and bshape[2] != 4):
            raise self.layout_error(bname, bshape, self._declared(), "boxes_output must name the [N, K, 4] boxes output")
        if len(shape) not in (2, 3) or (len(shape) == 3 and _known(shape[2]) and shape[2] <= max(0, self.background_class)):
            raise self.layout_error(name, shape, self._declared(), "output must name the [N, K, C] scores output")
        if _known(shape[1]) and _known(bshape[1]) and shape[1] != bshape[1]:
            raise self.layout_error(name, shape, self._declared(), f"boxes {bname!r} have {bshape[1]} rows, scores {shape[1]}")

    # -- decisions -------------------------------------------------------------------------------------
    def _size(self) -> tuple[int, int]:
        if not _known(self.input_size[0]) or not _known(self.input_size[1]):
            raise ModelError(f"task 'box_detector': the input size is unknown ({'normalized boxes' if self.normalized else 'grid decoding'} "
                             "needs it); set task.options.input_size to the model input's [height, width]")
        return self.input_size

    def _parts(self, outputs: Outputs) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """``(boxes (K, 4), objectness (K,) or None, class scores (K, C))`` float32 of a batch of one, as stored."""
        a = self.select_output(outputs)
        if a.shape[:1] != (1,):
            raise ModelError(f"task 'box_detector': expected batch 1, got output shape {list(a.shape)}")
        if self.layout == "separate":
            b = self.select_output(outputs, self.boxes_output)
            if b.ndim != 3 or b.shape[0] != 1 or b.shape[2] != 4 or a.ndim not in (2, 3) or a.shape[1] != b.shape[1]:
                raise self.layout_error(f"{self.output}, {self.boxes_output}", [*a.shape, "/", *b.shape], self._declared(), "check the outputs")
            s = np.asarray(a[0], np.float32)
            return np.asarray(b[0], np.float32), None, s.reshape(s.shape[0], -1)
        if a.ndim != 3:
            raise self.layout_error(self.output or "output 0", list(a.shape), self._declared(), "declare the layout in task.options")
        rows = np.asarray(a[0] if self.layout == "rows" else a[0].T, np.float32)
        self._check_rows(self.output or "output 0", list(a.shape), rows.shape[0], rows.shape[1], "declare the layout in task.options")
        return rows[:, :4], (rows[:, 4] if self.has_objectness else None), rows[:, self._first:]

    def scored_boxes(self, outputs: Outputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every candidate before thresholds: ``(xyxy (K, 4) input pixels, score (K,), label (K,) int64)``."""
        raw, obj, cls = self._parts(outputs)
        if self.decode == "yolox":
            raw = decode_yolox(raw, self._size(), self.strides)
        elif self.decode == "yolov5":
            raw = decode_yolov5(raw, self._size(), self.strides, self.anchors)
        xyxy = to_xyxy(raw, self.box_format)
        if self.normalized:
            h, w = self._size()
            xyxy = xyxy * np.array([w, h, w, h], np.float32)
        if self.sigmoid:
            cls = sigmoid(cls)
            obj = None if obj is None else sigmoid(obj)
        if 0 <= self.background_class < cls.shape[1]:
            cls = cls.copy()
            cls[:, self.background_class] = -np.inf
        labels = cls.argmax(axis=1)
        scores = cls[np.arange(cls.shape[0]), labels]
        if obj is not None:
            scores = scores * obj
        return xyxy, scores.astype(np.float32), labels.astype(np.int64)

    def check_reference(self, refs: Sequence[Decision]) -> None:
        """Refuse FP32's boxes, read as pixels (``decode`` none, not ``normalized``; at least :data:`RAW_MIN` over
        ``refs``), that are not pixel boxes: more than :data:`RAW_SHARE` of them with a negative width or height, or 99 %
        of their coordinates within :data:`RAW_EXTENT` pixels of the origin. Both are a grid head's raw offsets read as
        decoded boxes (ddddocr's YOLOX ``[1, 3549, 6]``: offsets about 0..1.5) or normalized boxes read as pixels."""
        if self.decode != "none" or self.normalized:
            return
        corners_ = [r.polygons for r in refs if len(r)]
        if not corners_ or sum(len(c) for c in corners_) < RAW_MIN:
            return
        c = np.concatenate(corners_)
        xyxy = np.stack([c[:, 0, 0], c[:, 0, 1], c[:, 2, 0], c[:, 2, 1]], 1)  # corners() keeps x0, y0 first and x1, y1 third
        neg = float(np.mean((xyxy[:, 2] < xyxy[:, 0]) | (xyxy[:, 3] < xyxy[:, 1])))
        extent = float(np.percentile(np.abs(xyxy), 99))
        if neg > RAW_SHARE or extent <= RAW_EXTENT:
            what = f"{100 * neg:.0f}% have a negative width or height" if neg > RAW_SHARE else f"99% of their coordinates lie within {extent:.2g} pixels of 0"
            raise ModelError(f"task 'box_detector': of the FP32 model's {len(xyxy)} boxes from output {self.output or 'output 0'!r} read as "
                             f"{self.box_format} pixels, {what}: the head looks undecoded (grid offsets) or normalized; set task.options.decode "
                             f"(yolox, yolov5) with its strides, or normalized: true, or check box_format")

    def _decide(self, outputs: Outputs) -> Decision:
        xyxy, scores, labels = self.scored_boxes(outputs)
        keep = self.keep(scores, self.score_thresh)
        if not keep.any():
            return empty_decision()
        b, s, lab = xyxy[keep], scores[keep], labels[keep]
        idx = nms(b, s, lab, self.iou_thresh, self.class_agnostic, self.nms_offset)
        return Decision(corners(b[idx]), s[idx], lab[idx])

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        """The score channels: channels ``first..`` of the last axis (``rows``), of axis 1 (``channels``), or
        the whole scores output (``separate``); values in 0..1, or logits with ``sigmoid``."""
        name, shape = self._output_shape(shapes)
        lo, hi = LOGIT_RANGE if self.sigmoid else (0.0, 1.0)
        what = "objectness and class scores" if self.has_objectness else "class scores"
        if self.layout == "separate":
            return (DecisionTensor(name, None, 0, 1, lo, hi, what),)
        axis = 2 if self.layout == "rows" else 1
        stop = shape[axis] if len(shape) > axis and _known(shape[axis]) else self._first + 1
        return (DecisionTensor(name, axis, 4, int(stop), lo, hi, what),)

    # -- agreement -------------------------------------------------------------------------------------
    def _items(self, prefix: str, ref: Decision, got: Decision) -> dict[str, float]:
        tp, s = match(box_iou(got.polygons, ref.polygons), pred_labels=got.labels, truth_labels=ref.labels,
                      min_iou=self.match_iou) if len(got) and len(ref) else (0, 0.0)
        return item_counts(prefix, tp, len(got), len(ref), s)

    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:
        return self._items("agree", ref, got)

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        """Ground truth ``labels.boxes`` = ``[[x0, y0, x1, y1, class], ...]`` (image pixels) in model-input pixels.

        Raises:
            ConfigError: the preprocessing cropped the image (``shortest_side_crop``): boxes at the edges would be cut.
        """
        boxes = (labels or {}).get(self.LABELS)
        if boxes is None:
            return None
        b = np.asarray(boxes, np.float32).reshape(-1, 5) if len(boxes) else np.zeros((0, 5), np.float32)
        xyxy = transform.to_model(b[:, :4].reshape(-1, 2, 2), what="boxes").reshape(-1, 4)
        return Decision(corners(xyxy), np.ones(len(b), np.float32), b[:, 4].astype(np.int64))

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        return self._items("gt", truth, got)


def _model_input_size(model: Any) -> tuple[int, int] | None:
    """``(height, width)`` of an ``onnx.ModelProto``'s input: from its export note, else its first input's
    static dims; None when neither says."""
    if any(p.key == METADATA_KEY for p in getattr(model, "metadata_props", ())):
        return ExportNote.from_model(model).preprocessing.input_size
    graph = getattr(model, "graph", None)
    if graph is None or not graph.input:
        return None
    init = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init]
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim] if inputs else []
    if len(dims) != 4:
        return None
    hw = dims[2:4] if dims[1] in (1, 3, 4) else dims[1:3]
    return (int(hw[0]), int(hw[1])) if all(v > 0 for v in hw) else None

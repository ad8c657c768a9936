"""Box decoding helpers: grid/stride decoding of raw YOLO heads, box formats, greedy NMS, corner polygons.

Pure numpy; the adapter that uses them is :class:`quantkit.tasks.boxes.BoxDetectorAdapter`.

Grid decoding (one row per grid cell, levels in ``strides`` order, cells row-major: ``x`` fastest):

* **YOLOX raw head** (``decode: yolox``), as YOLOX ``yolox/models/yolo_head.py`` ``YOLOXHead.decode_outputs``
  and its numpy port ``yolox/utils/demo_utils.py`` ``demo_postprocess`` (the same code ddddocr ships in
  ``ddddocr/core/detection_engine.py``)::

      cx = (tx + grid_x) * stride        cy = (ty + grid_y) * stride
      w  = exp(tw) * stride              h  = exp(th) * stride

  The exported head already applies the sigmoid to objectness and class scores (``YOLOXHead.forward`` in
  inference: ``cat([reg, obj.sigmoid(), cls.sigmoid()])``), so ``sigmoid`` stays false.
* **YOLOv5/v7 raw head** (``decode: yolov5``; the ``Detect`` layer's input, exported without its decode),
  as ultralytics/yolov5 ``models/yolo.py`` ``Detect.forward`` (v6.0+) and ``Detect._make_grid``
  (grid = cell - 0.5)::

      s = sigmoid(raw)   (every channel)
      cx = (2 * s_x - 0.5 + grid_x) * stride         cy = (2 * s_y - 0.5 + grid_y) * stride
      w  = (2 * s_w) ** 2 * anchor_w                 h  = (2 * s_h) ** 2 * anchor_h

  anchors in input pixels per level (the model yaml's ``anchors``, e.g. ``[10,13, 16,30, 33,23]`` for stride
  8); rows per level ordered (anchor, y, x), as ``x.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def corners(xyxy: np.ndarray) -> np.ndarray:
    """``(K, 4)`` boxes ``x0, y0, x1, y1`` -> ``(K, 4, 2) float32`` corner polygons, clockwise from top-left."""
    x0, y0, x1, y1 = (xyxy[:, i] for i in range(4))
    return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1).astype(np.float32)


def to_xyxy(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """``(K, 4)`` boxes in ``box_format`` -> ``(K, 4) float32`` ``x0, y0, x1, y1`` (same units).

    ``cxcywh``: centre and size; ``xywh``: top-left corner and size (COCO); ``xyxy``: two corners;
    ``yxyx``: two corners, y first (TensorFlow Object Detection API SSD exports).
    """
    b = np.asarray(boxes, np.float32)
    if box_format == "cxcywh":
        half = b[:, 2:4] / 2
        return np.concatenate([b[:, 0:2] - half, b[:, 0:2] + half], axis=1)
    if box_format == "xywh":
        return np.concatenate([b[:, 0:2], b[:, 0:2] + b[:, 2:4]], axis=1)
    if box_format == "xyxy":
        return b.copy()
    if box_format == "yxyx":
        return b[:, [1, 0, 3, 2]].copy()
    raise ValueError(f"unknown box format {box_format!r}")


def grid_cells(input_size: tuple[int, int], strides: Sequence[int], per_cell: int = 1) -> int:
    """Rows a grid head has: ``per_cell * sum((H // s) * (W // s))`` over ``strides`` (``per_cell``: anchors)."""
    h, w = input_size
    return per_cell * sum((h // s) * (w // s) for s in strides)


def _grid(input_size: tuple[int, int], strides: Sequence[int], per_cell: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: cell ``(x, y)`` ``(K, 2)``, stride ``(K, 1)`` and anchor index within its level ``(K,)``."""
    h, w = input_size
    xy, st, an = [], [], []
    for s in strides:
        hs, ws = h // s, w // s
        xv, yv = np.meshgrid(np.arange(ws), np.arange(hs))
        cell = np.stack([xv, yv], axis=2).reshape(-1, 2)
        xy.append(np.tile(cell, (per_cell, 1)))
        st.append(np.full((per_cell * hs * ws, 1), s))
        an.append(np.repeat(np.arange(per_cell), hs * ws))
    return (np.concatenate(xy).astype(np.float32), np.concatenate(st).astype(np.float32), np.concatenate(an))


def decode_yolox(raw: np.ndarray, input_size: tuple[int, int], strides: Sequence[int]) -> np.ndarray:
    """``(K, 4)`` raw YOLOX box regressions -> ``(K, 4) float32`` ``cx, cy, w, h`` in input pixels (formula above)."""
    xy, st, _ = _grid(input_size, strides, 1)
    r = np.asarray(raw, np.float32)
    with np.errstate(over="ignore"):
        wh = np.exp(r[:, 2:4]) * st
    return np.concatenate([(r[:, 0:2] + xy) * st, wh], axis=1)


def decode_yolov5(raw: np.ndarray, input_size: tuple[int, int], strides: Sequence[int],
                  anchors: Sequence[Sequence[float]]) -> np.ndarray:
    """``(K, 4)`` raw YOLOv5 box logits -> ``(K, 4) float32`` ``cx, cy, w, h`` in input pixels (formula above);
    ``anchors[level]`` = ``[w0, h0, w1, h1, ...]`` in pixels."""
    na = len(anchors[0]) // 2
    xy, st, an = _grid(input_size, strides, na)
    level = np.repeat(np.arange(len(strides)), [na * (input_size[0] // s) * (input_size[1] // s) for s in strides])
    table = np.asarray(anchors, np.float32).reshape(len(strides), na, 2)
    s = sigmoid(raw[:, 0:4])
    return np.concatenate([(2 * s[:, 0:2] - 0.5 + xy) * st, (2 * s[:, 2:4]) ** 2 * table[level, an]], axis=1)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, float32, without overflow warnings (``scipy.special.expit``)."""
    from scipy.special import expit

    return expit(np.asarray(x, np.float32)).astype(np.float32)


def logit(p: float) -> float:
    """Inverse of :func:`sigmoid` for a probability ``p`` (``±inf`` at 0 and 1)."""
    from scipy.special import logit as _logit

    return float(_logit(np.float64(p)))


def nms(xyxy: np.ndarray, scores: np.ndarray, labels: np.ndarray, iou_thresh: float, class_agnostic: bool = False,
        offset: float = 0.0) -> np.ndarray:
    """Indices kept by greedy NMS, by score descending: a box is dropped when its IoU with a kept, higher-scoring
    box is ``> iou_thresh``; class-wise (boxes of different labels never suppress each other) unless
    ``class_agnostic``.

    ``offset`` is added to widths and heights: 0 for continuous coordinates (OpenCV ``cv2.dnn.NMSBoxes``,
    torchvision), 1 for pixel-inclusive boxes (``x1 - x0 + 1``) as py-faster-rcnn's ``py_cpu_nms``, YOLOX
    ``yolox/utils/demo_utils.py`` ``nms`` and ddddocr compute them.
    """
    if len(scores) == 0:
        return np.zeros(0, np.int64)
    b = np.asarray(xyxy, np.float64)
    if not class_agnostic:  # shift each class to its own region (torchvision ``batched_nms``)
        b = b + (np.asarray(labels, np.float64) * (b.max() - b.min() + 2 * offset + 1))[:, None]
    x0, y0, x1, y1 = b.T
    areas = (x1 - x0 + offset) * (y1 - y0 + offset)
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        w = np.clip(np.minimum(x1[i], x1[rest]) - np.maximum(x0[i], x0[rest]) + offset, 0, None)
        h = np.clip(np.minimum(y1[i], y1[rest]) - np.maximum(y0[i], y0[rest]) + offset, 0, None)
        inter = w * h
        union = areas[i] + areas[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_thresh]
    return np.asarray(keep, np.int64)

"""DB text-detection post-processing: a probability map to text quadrilaterals and their scores.

A port of rapidocr's ``DBPostProcess`` (``rapidocr_onnxruntime/ch_ppocr_det/utils.py`` in
rapidocr-onnxruntime 1.4.4, Apache-2.0; itself a port of PaddleOCR's
``ppocr/postprocess/db_postprocess.py``, Apache-2.0), so that the ``db_text`` adapter works without the demo
extra. The steps, constants and numerics are rapidocr's, line for line (``tests/test_tasks_dbpost.py``
checks the boxes and scores are equal to rapidocr's where it is installed): binarize ``pred > thresh``,
optionally dilate with a 2x2 kernel, take contours (``cv2.findContours``, ``RETR_LIST``,
``CHAIN_APPROX_SIMPLE``), for each of the first ``max_candidates`` the minimum-area rectangle (dropped when
its short side is under 3 px), its score (mean probability inside the rectangle, ``fast``, or inside the
contour, ``slow``), dropped when ``< box_thresh``; then grown by Vatti offsetting (pyclipper, round joins,
distance = area x ``unclip_ratio`` / perimeter, from DB: Liao et al., "Real-time Scene Text Detection with
Differentiable Binarization", AAAI 2020, eq. 9), re-boxed (dropped under 5 px) and rounded to pixels.
"""

from __future__ import annotations

import numpy as np

MIN_SIZE = 3
"""Short side, in map pixels, under which a candidate box is dropped (rapidocr's ``self.min_size``); a grown box
must reach ``MIN_SIZE + 2``."""


def db_boxes(prob: np.ndarray, *, thresh: float, box_thresh: float, max_candidates: int, unclip_ratio: float,
             score_mode: str, use_dilation: bool) -> tuple[np.ndarray, list[float]]:
    """Text quadrilaterals of one probability map ``prob`` ``(H, W)`` float32, in its own pixels.

    Returns ``(boxes, scores)``: ``int32 (K, 4, 2)`` corner points (x, y; top-left, top-right, bottom-right,
    bottom-left as ``get_mini_boxes`` orders them) and ``K`` float scores, in contour order.
    """
    import cv2

    h, w = prob.shape
    segmentation = prob > thresh
    mask = cv2.dilate(segmentation.astype(np.uint8), np.array([[1, 1], [1, 1]])) if use_dilation else segmentation
    outs = cv2.findContours((mask * 255).astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    contours = outs[1] if len(outs) == 3 else outs[0]

    boxes, scores = [], []
    for contour in contours[:max_candidates]:
        points, sside = _mini_box(contour)
        if sside < MIN_SIZE:
            continue
        score = _score_fast(prob, points.reshape(-1, 2)) if score_mode == "fast" else _score_slow(prob, contour)
        if box_thresh > score:
            continue
        box, sside = _mini_box(_unclip(points, unclip_ratio))
        if sside < MIN_SIZE + 2:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / w * w), 0, w)
        box[:, 1] = np.clip(np.round(box[:, 1] / h * h), 0, h)
        boxes.append(box.astype(np.int32))
        scores.append(score)
    return np.array(boxes, dtype=np.int32), scores


def _mini_box(contour: np.ndarray) -> tuple[np.ndarray, float]:
    """The minimum-area rectangle's corners ordered as rapidocr's ``get_mini_boxes``, and its short side."""
    import cv2

    rect = cv2.minAreaRect(contour)
    points = sorted(list(cv2.boxPoints(rect)), key=lambda x: x[0])
    i1, i4 = (0, 1) if points[1][1] > points[0][1] else (1, 0)
    i2, i3 = (2, 3) if points[3][1] > points[2][1] else (3, 2)
    return np.array([points[i1], points[i2], points[i3], points[i4]]), min(rect[1])


def _score_fast(bitmap: np.ndarray, box_in: np.ndarray) -> float:
    """Mean of ``bitmap`` inside the polygon ``box_in`` (rapidocr ``box_score_fast``)."""
    import cv2

    h, w = bitmap.shape[:2]
    box = box_in.copy()
    xmin = np.clip(np.floor(box[:, 0].min()).astype(np.int32), 0, w - 1)
    xmax = np.clip(np.ceil(box[:, 0].max()).astype(np.int32), 0, w - 1)
    ymin = np.clip(np.floor(box[:, 1].min()).astype(np.int32), 0, h - 1)
    ymax = np.clip(np.ceil(box[:, 1].max()).astype(np.int32), 0, h - 1)
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    box[:, 0] = box[:, 0] - xmin
    box[:, 1] = box[:, 1] - ymin
    cv2.fillPoly(mask, box.reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(bitmap[ymin:ymax + 1, xmin:xmax + 1], mask)[0]


def _score_slow(bitmap: np.ndarray, contour_in: np.ndarray) -> float:
    """Mean of ``bitmap`` inside the contour itself (rapidocr ``box_score_slow``)."""
    import cv2

    h, w = bitmap.shape[:2]
    contour = np.reshape(contour_in.copy(), (-1, 2))
    xmin = np.clip(np.min(contour[:, 0]), 0, w - 1)
    xmax = np.clip(np.max(contour[:, 0]), 0, w - 1)
    ymin = np.clip(np.min(contour[:, 1]), 0, h - 1)
    ymax = np.clip(np.max(contour[:, 1]), 0, h - 1)
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    contour[:, 0] = contour[:, 0] - xmin
    contour[:, 1] = contour[:, 1] - ymin
    cv2.fillPoly(mask, contour.reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(bitmap[ymin:ymax + 1, xmin:xmax + 1], mask)[0]


def _unclip(box: np.ndarray, unclip_ratio: float) -> np.ndarray:
    """``box`` grown by area x ``unclip_ratio`` / perimeter (rapidocr ``unclip``), as ``(P, 1, 2)`` points."""
    import pyclipper
    from shapely.geometry import Polygon

    poly = Polygon(box)
    distance = poly.area * unclip_ratio / poly.length
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return np.array(offset.Execute(distance)).reshape((-1, 1, 2))

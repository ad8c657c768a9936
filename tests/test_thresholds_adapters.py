"""Task adapters: DB text (rapidocr post-processing), classifier (PP-OCR direction model), box detector + NMS."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

from quantkit.errors import ConfigError, ModelError
from quantkit.thresholds import (ADAPTERS, Adapter, BoxDetectorAdapter, ClassifierAdapter, DBTextAdapter, ThresholdSpec,
                                 make_adapter, match_count, register_adapter)
from quantkit.thresholds.adapters import empty_decision


def _prob_map() -> np.ndarray:
    p = np.full((1, 1, 64, 96), 0.05, np.float32)
    p[0, 0, 10:20, 10:60] = 0.9   # a strong text line
    p[0, 0, 40:48, 20:50] = 0.42  # a weak one: binarized at 0.3, box score ~0.37 (border pixels count)
    return p


def test_db_thresholds_split_pixels_and_boxes():
    out = {"sigmoid": _prob_map()}
    d = DBTextAdapter().decide(out)  # thresh 0.3, box_thresh 0.5
    assert len(d) == 1 and 0.7 < d.scores[0] < 0.9
    assert d.mask.sum() == 10 * 50 + 8 * 30
    xs, ys = d.polygons[0][:, 0], d.polygons[0][:, 1]
    assert xs.min() <= 10 and xs.max() >= 59 and ys.min() <= 10 and ys.max() >= 19  # unclipped outward
    assert len(DBTextAdapter(box_thresh=0.3).decide(out)) == 2
    assert len(DBTextAdapter(thresh=0.5, box_thresh=0.3).decide(out)) == 1  # weak line not binarized
    cand = DBTextAdapter().candidates(out)
    assert len(cand) == 2 and DBTextAdapter().keep(cand.scores, 0.5).sum() == 1


def test_db_rejects_wrong_layout_and_values():
    with pytest.raises(ModelError, match=r"\[N, 1, H, W\]"):
        DBTextAdapter().decide({"y": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(ConfigError, match="thresholds.thresh"):
        DBTextAdapter(thresh=1.5)
    with pytest.raises(ConfigError, match="unknown option 'treshold'"):
        make_adapter("db_text", {"treshold": 0.3})


def test_classifier_on_pp_ocr_direction_model():
    import cv2
    from PIL import Image, ImageDraw

    from quantkit.demo import CLS_MODEL, packaged_model_path
    from quantkit.runner import OrtRunner

    im = Image.new("RGB", (192, 48), (255, 255, 255))
    ImageDraw.Draw(im).text((6, 8), "LOT 4521 SN88", fill=(0, 0, 0), font_size=28)
    upright = np.asarray(im)
    batch = np.stack([upright, cv2.rotate(upright, cv2.ROTATE_180)]).astype(np.float32)
    x = ((batch / 255 - 0.5) / 0.5).transpose(0, 3, 1, 2).astype(np.float32)
    with OrtRunner(packaged_model_path(CLS_MODEL)) as r:
        out = r.infer({"x": x})
    decs = ClassifierAdapter(cls_thresh=0.5).decide_batch(out)
    assert [int(d.labels[0]) for d in decs] == [0, 1]  # '0' and '180'
    rot = ClassifierAdapter(cls_thresh=0.5, positive_class=1).decide_batch(out)
    assert [len(d) for d in rot] == [0, 1]
    assert len(ClassifierAdapter(cls_thresh=1.0).decide_batch(out)[0]) == 0  # score > 1.0 never holds


def _yolo_model_bytes(dets: np.ndarray) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph([helper.make_node("Identity", ["c"], ["out"]),
                           helper.make_node("Shape", ["images"], ["unused"])], "yolo",
                          [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, list(dets.shape))],
                          [numpy_helper.from_array(dets.astype(np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_box_detector_nms_and_score_threshold_through_a_tiny_model():
    from quantkit.runner import OrtRunner

    dets = np.array([[
        [16, 16, 10, 10, 0.9, 0.9, 0.1],   # class 0, score 0.81
        [17, 16, 10, 10, 0.8, 0.9, 0.1],   # overlaps the first (IoU ~0.82): suppressed
        [17, 16, 10, 10, 0.8, 0.1, 0.9],   # same place, class 1: kept (class-wise NMS)
        [5, 5, 4, 4, 0.3, 0.9, 0.1],       # score 0.27
    ]], np.float32)
    with OrtRunner(_yolo_model_bytes(dets)) as r:
        out = r.infer({"images": np.zeros((1, 3, 32, 32), np.float32)})
    d = BoxDetectorAdapter(score_thresh=0.25, iou_thresh=0.45).decide(out)
    assert len(d) == 3 and sorted(d.labels.tolist()) == [0, 0, 1]
    assert np.allclose(sorted(d.scores.tolist()), [0.27, 0.72, 0.81], atol=1e-5)
    assert len(BoxDetectorAdapter(score_thresh=0.3).decide(out)) == 2
    cand = BoxDetectorAdapter().candidates(out)  # primary filter relaxed, NMS kept
    assert len(cand) == 3
    assert BoxDetectorAdapter().spec("iou_thresh").on_output is False


def test_matching_is_one_to_one_and_label_aware():
    sq = np.array([[[0, 0], [10, 0], [10, 10], [0, 10]]], np.float32)
    two = np.concatenate([sq, sq + 1])
    assert match_count(two, sq) == 1
    assert match_count(sq, sq, pred_labels=[0], truth_labels=[1]) == 0
    assert match_count(sq, sq + 8) == 0


def test_users_can_register_their_own_adapter():
    @register_adapter
    @dataclasses.dataclass(frozen=True, repr=False)
    class HeatmapAdapter(Adapter):
        name: ClassVar[str] = "test_heatmap"
        THRESHOLDS: ClassVar[tuple] = (ThresholdSpec("peak", True, ">", "none"),)
        PRIMARY: ClassVar[str] = "peak"
        peak: float = 0.5

        def _decide_one(self, arr):
            return empty_decision()

    try:
        a = make_adapter("test_heatmap", {"peak": 0.7})
        assert a.thresholds() == {"peak": 0.7} and a.with_thresholds({"peak": 0.2}).peak == 0.2
    finally:
        ADAPTERS.pop("test_heatmap")
    with pytest.raises(ConfigError, match="not registered"):
        make_adapter("test_heatmap")

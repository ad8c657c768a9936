"""Box detector adapter: every layout on a generated model with known FP32 decisions, layout refusals,
agreement counts by hand, ground truth, threshold semantics."""

from __future__ import annotations

import numpy as np
import pytest
from models import const_model, run, shapes, yolov5_head, yolox_head

from quantkit.errors import ConfigError, ModelError
from quantkit.note import Transform
from quantkit.tasks import Decision, make_adapter
from quantkit.tasks.boxes import BoxDetectorAdapter, corners

STRIDES = (8, 16, 32)
ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))


def _xyxy(d: Decision) -> np.ndarray:
    return np.concatenate([d.polygons.min(1), d.polygons.max(1)], axis=1)


def _expect(d: Decision, xyxy: list, labels: list, scores: list) -> None:
    assert d.labels.tolist() == labels
    np.testing.assert_allclose(_xyxy(d), np.asarray(xyxy, np.float32), atol=1e-3)
    np.testing.assert_allclose(d.scores, scores, atol=1e-5)


def _adapter(model, **options) -> BoxDetectorAdapter:
    a = make_adapter("box_detector", options).with_model(model)
    a.check_outputs(shapes(model))
    return a


# rows: cx, cy, w, h, objectness, class 0, class 1 (YOLOv5/v7 export)
ROWS = np.zeros((1, 8, 7), np.float32)
ROWS[0, :5] = [
    [20, 20, 10, 10, 0.9, 0.9, 0.1],  # A: class 0, 0.81
    [21, 20, 10, 10, 0.8, 0.9, 0.1],  # B: class 0, 0.72, IoU 0.82 with A: suppressed
    [21, 20, 10, 10, 0.8, 0.1, 0.9],  # C: class 1, 0.72: kept class-wise, suppressed across classes
    [50, 50, 8, 6, 0.5, 0.2, 0.6],    # D: class 1, 0.30
    [5, 5, 4, 4, 0.2, 0.9, 0.1],      # E: 0.18, below 0.25
]


def test_rows_with_objectness_yolov5_export():
    m = const_model({"output0": ROWS})
    out = run(m)
    a = _adapter(m, score_thresh=0.25, iou_thresh=0.45)
    _expect(a.decide(out), [[15, 15, 25, 25], [16, 15, 26, 25], [46, 47, 54, 53]], [0, 1, 1], [0.81, 0.72, 0.30])
    agnostic = a.replace(class_agnostic=True).decide(out)
    _expect(agnostic, [[15, 15, 25, 25], [46, 47, 54, 53]], [0, 1], [0.81, 0.30])
    assert len(a.with_thresholds({"score_thresh": 0.1}).decide(out)) == 4  # E joins


def test_candidates_filtered_equal_decide_at_each_threshold():
    out = run(const_model({"output0": ROWS}))
    a = BoxDetectorAdapter()
    cand = a.candidates(out)
    for t in (0.0, 0.2, 0.25, 0.5, 0.75, 0.9):
        d = a.with_thresholds({"score_thresh": t}).decide(out)
        c = cand.select(a.keep(cand.scores, t))
        np.testing.assert_array_equal(c.polygons, d.polygons)
        np.testing.assert_array_equal(c.labels, d.labels)


def test_yolox_raw_grid_head_is_decoded_with_strides():
    boxes = {9: (12, 13, 20, 10, 0.9, [0.95]),         # stride 8, cell (1, 1)
             64 + 5: (24, 20, 30, 40, 0.8, [0.9]),      # stride 16, cell (1, 1)
             80: (40, 40, 50, 50, 0.3, [0.5])}          # stride 32, cell (0, 0): score 0.15
    m = const_model({"output": yolox_head(boxes, (64, 64), STRIDES, 1)}, input_shape=(1, 3, 64, 64))
    out = run(m)
    a = _adapter(m, decode="yolox", strides=list(STRIDES), score_thresh=0.25, class_agnostic=True)
    assert a.input_size == (64, 64)  # from the model's input
    _expect(a.decide(out), [[2, 8, 22, 18], [9, 0, 39, 40]], [0, 0], [0.855, 0.72])
    _expect(a.with_thresholds({"score_thresh": 0.1}).decide(out), [[2, 8, 22, 18], [9, 0, 39, 40], [15, 15, 65, 65]],
            [0, 0, 0], [0.855, 0.72, 0.15])
    raw = BoxDetectorAdapter(score_thresh=0.25).decide(out)  # read without decoding: offsets, not pixels
    assert not np.allclose(_xyxy(raw)[:1], [[2, 8, 22, 18]], atol=1)


def test_yolov5_raw_head_is_decoded_with_anchors():
    boxes = {64 + 2 * 8 + 3: (28, 20, 20, 28, 0.9, [0.2, 0.8]),   # stride 8, anchor 1, cell (2, 3)
             192 + 1 * 4 + 2: (40, 24, 36, 50, 0.7, [0.9, 0.1])}  # stride 16, anchor 0, cell (1, 2)
    head = yolov5_head(boxes, (64, 64), list(STRIDES), ANCHORS, 2)
    assert head.shape == (1, 252, 7)
    m = const_model({"output": head}, input_shape=(1, 3, 64, 64))
    a = _adapter(m, decode="yolov5", strides=list(STRIDES), anchors=[list(x) for x in ANCHORS], sigmoid=True)
    _expect(a.decide(run(m)), [[18, 6, 38, 34], [22, -1, 58, 49]], [1, 0], [0.72, 0.63])


def test_channels_yolov8_transposed_without_objectness():
    rows = np.zeros((2100, 7), np.float32)  # cx, cy, w, h, 3 class scores; an anchor-free head proposes thousands of boxes
    rows[0] = [30, 30, 20, 20, 0.1, 0.8, 0.05]
    rows[3] = [60, 30, 10, 30, 0.6, 0.1, 0.1]
    rows[7] = [31, 30, 20, 20, 0.1, 0.5, 0.05]  # same place as row 0, lower: suppressed
    m = const_model({"output0": rows.T[None]})
    a = _adapter(m, layout="channels", score_thresh=0.25)
    assert a.has_objectness is False
    _expect(a.decide(run(m)), [[20, 20, 40, 40], [55, 15, 65, 45]], [1, 0], [0.8, 0.6])
    with pytest.raises(ModelError) as e:  # the same tensor read as rows: 7 boxes with 2096 classes
        make_adapter("box_detector", {"layout": "rows", "objectness": False}).check_outputs(shapes(m))
    assert "'output0'" in str(e.value) and "[1x7x2100]" in str(e.value) and "layout 'channels'" in str(e.value)
    # a short post-NMS list with many classes is not mistaken for a transposed head
    make_adapter("box_detector", {"layout": "rows", "objectness": True}).check_outputs({"dets": [1, 10, 85]})


@pytest.mark.parametrize("layout, shape, other", [("rows", [1, 84, 8400], "channels"), ("channels", [1, 3549, 6], "rows")])
def test_transposed_declarations_are_refused_in_one_line(layout, shape, other):
    with pytest.raises(ModelError) as e:
        make_adapter("box_detector", {"layout": layout}).check_outputs({"output0": shape})
    msg = str(e.value)
    assert "\n" not in msg and "'output0'" in msg and "x".join(map(str, shape)) in msg and layout in msg and other in msg


def test_grid_declaration_is_checked_against_the_rows():
    head = {"output": [1, 3549, 6]}  # ddddocr's common_det.onnx: 52*52 + 26*26 + 13*13 cells of a 416x416 input
    make_adapter("box_detector", {"decode": "yolox", "strides": [8, 16, 32], "input_size": [416, 416]}).check_outputs(head)
    with pytest.raises(ModelError, match=r"'output' has shape \[1x3549x6\] but the declared layout is rows .*yolox.*\[8, 16\].*K = 3380"):
        make_adapter("box_detector", {"decode": "yolox", "strides": [8, 16], "input_size": [416, 416]}).check_outputs(head)
    with pytest.raises(ModelError, match="input size is unknown"):
        make_adapter("box_detector", {"decode": "yolox", "strides": [8]}).decide({"output": np.zeros((1, 8, 6), np.float32)})


def test_separate_ssd_boxes_and_softmax_scores_with_background():
    boxes = np.array([[[0.1, 0.1, 0.3, 0.5], [0.5, 0.5, 0.9, 0.9], [0.12, 0.1, 0.3, 0.5], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.1, 0.85, 0.05], [0.3, 0.1, 0.6], [0.2, 0.7, 0.1], [0.9, 0.05, 0.05]]], np.float32)  # class 0: background
    m = const_model({"boxes": boxes, "scores": scores}, input_shape=(1, 3, 100, 200))
    a = _adapter(m, layout="separate", boxes_output="boxes", output="scores", box_format="xyxy", normalized=True,
                 background_class=0, score_thresh=0.3)
    assert a.input_size == (100, 200) and a.threshold_tensor(a.spec("score_thresh")) == "scores"
    _expect(a.decide(run(m)), [[20, 10, 60, 50], [100, 50, 180, 90]], [1, 2], [0.85, 0.6])
    with pytest.raises(ModelError, match=r"'scores' has shape \[1x4x3\] .*separate"):  # the two names swapped
        make_adapter("box_detector", {"layout": "separate", "boxes_output": "scores", "output": "boxes"}).check_outputs(shapes(m))


def test_separate_rtdetr_queries_with_sigmoid_logits():
    boxes = np.array([[[0.25, 0.5, 0.2, 0.4], [0.75, 0.5, 0.1, 0.2], [0.5, 0.5, 0.1, 0.1]]], np.float32)  # cxcywh, 0..1
    probs = np.array([[[0.9, 0.02], [0.1, 0.7], [0.1, 0.2]]])
    logits = np.log(probs / (1 - probs)).astype(np.float32)
    m = const_model({"pred_boxes": boxes, "logits": logits}, input_shape=(1, 3, 64, 64))
    a = _adapter(m, layout="separate", boxes_output="pred_boxes", output="logits", normalized=True, sigmoid=True, score_thresh=0.5)
    _expect(a.decide(run(m)), [[9.6, 19.2, 22.4, 44.8], [44.8, 25.6, 51.2, 38.4]], [0, 1], [0.9, 0.7])
    spec = a.spec("score_thresh")
    assert a.tensor_value(spec, 0.5) == pytest.approx(0.0) and a.tensor_value(spec, 0.9) == pytest.approx(np.log(9))
    assert a.decision_tensors(shapes(m))[0].output == "logits" and a.decision_tensors(shapes(m))[0].lo < 0


@pytest.mark.parametrize("fmt, row", [("xywh", [10, 20, 30, 40]), ("xyxy", [10, 20, 40, 60]), ("yxyx", [20, 10, 60, 40]),
                                      ("cxcywh", [25, 40, 30, 40])])
def test_box_formats_in_pixels(fmt, row):
    rows = np.zeros((1, 6, 6), np.float32)
    rows[0, 0] = [*row, 0.9, 0.2]
    m = const_model({"out": rows})
    _expect(_adapter(m, objectness=False, box_format=fmt).decide(run(m)), [[10, 20, 40, 60]], [0], [0.9])


def test_agreement_counts_by_hand():
    a = BoxDetectorAdapter()

    def dec(xyxy, labels):
        return Decision(corners(np.asarray(xyxy, np.float32)), np.ones(len(labels), np.float32), np.asarray(labels, np.int64))

    ref1 = dec([[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10]], [0, 0, 0])
    got1 = dec([[0, 0, 10, 10], [25, 0, 35, 10], [40, 0, 50, 10], [60, 0, 70, 10]], [0, 0, 1, 0])  # moved (IoU 1/3), wrong class, extra
    ref2 = dec([[0, 0, 10, 10]], [0])
    got2 = dec([[1, 1, 11, 11]], [0])  # IoU 81/119
    c1, c2 = a.agreement(ref1, got1), a.agreement(ref2, got2)
    assert (c1["agree_tp"], c1["agree_fp"], c1["agree_fn"]) == (1, 3, 2)
    assert a.primary_metric().value(c1) == pytest.approx(2 / 7)
    pooled = {k: c1[k] + c2[k] for k in c1}
    assert a.primary_metric().value(pooled) == pytest.approx(4 / 9)  # 2*2 / (2*2 + 3 + 2)
    assert a.metric("matched_iou").value(pooled) == pytest.approx((1 + 81 / 119) / 2)
    assert a.metric("box_precision").value(pooled) == pytest.approx(2 / 5)
    assert a.metric("box_recall").value(pooled) == pytest.approx(2 / 4)
    empty = a.agreement(dec(np.zeros((0, 4)), []), dec(np.zeros((0, 4)), []))
    assert a.primary_metric().value(empty) == 1.0  # nothing to find, nothing found


def test_ground_truth_boxes_in_model_pixels():
    a = BoxDetectorAdapter()
    t = a.truth({"boxes": [[20, 40, 60, 80, 1]]}, Transform(scale_y=0.5, scale_x=0.25))
    np.testing.assert_allclose(_xyxy(t), [[5, 20, 15, 40]])
    assert t.labels.tolist() == [1]
    assert a.truth({"text_boxes": []}, Transform(1, 1)) is None
    got = Decision(corners(np.array([[5, 20, 15, 40]], np.float32)), np.ones(1, np.float32), np.array([1]))
    assert a.metric("f1").value(a.accuracy(t, got)) == 1.0


def test_decision_tensors_name_the_score_channels():
    def where(t):
        return t.output, t.axis, t.start, t.stop

    assert where(BoxDetectorAdapter().decision_tensors({"o": [1, 3549, 6]})[0]) == ("o", 2, 4, 6)
    assert where(BoxDetectorAdapter(layout="channels").decision_tensors({"o": [1, 84, 8400]})[0]) == ("o", 1, 4, 84)
    d = BoxDetectorAdapter(layout="separate", output="s", boxes_output="b").decision_tensors({"b": [1, 9, 4], "s": [1, 9, 3]})[0]
    assert (d.output, d.axis) == ("s", None)
    a = BoxDetectorAdapter()
    assert a.tensor_value(a.spec("score_thresh"), 0.3) == 0.3 and a.tensor_value(a.spec("iou_thresh"), 0.45) is None


@pytest.mark.parametrize("options, field", [
    ({"layout": "separate", "output": "scores"}, "boxes_output"),
    ({"decode": "yolox"}, "strides"),
    ({"decode": "yolov5", "strides": [8, 16], "sigmoid": True, "anchors": [[10, 13]]}, "anchors"),
    ({"decode": "yolov5", "strides": [8], "anchors": [[10, 13]]}, "sigmoid"),
    ({"layout": "diagonal"}, "layout"),
    ({"score_thresh": 2.0}, "score_thresh"),
])
def test_bad_options_are_refused_naming_the_field(options, field):
    with pytest.raises(ConfigError, match=field):
        make_adapter("box_detector", options)


def test_input_size_comes_from_the_export_note():
    from quantkit.note import ExportNote, Preprocessing

    m = const_model({"output": np.zeros((1, 4, 6), np.float32)}, input_shape=("N", 3, "H", "W"))
    a = make_adapter("box_detector", {"normalized": True})
    assert a.with_model(m).input_size == (0, 0)  # symbolic input, no note: unknown
    ExportNote(preprocessing=Preprocessing(input_size=(96, 128))).embed(m)
    assert a.with_model(m).input_size == (96, 128)


def test_nms_pixel_inclusive_offset_and_class_wise_groups():
    from quantkit.tasks.boxdecode import nms

    xyxy = np.array([[0, 0, 10, 10], [4, 0, 14, 10], [4, 0, 14, 10]], np.float32)  # IoU 60/140 = 0.43, or 77/165 = 0.47 with +1
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    labels = np.array([0, 0, 1])
    assert nms(xyxy, scores, labels, 0.45).tolist() == [0, 1, 2]
    assert nms(xyxy, scores, labels, 0.45, offset=1).tolist() == [0, 2]          # class 1 is not suppressed by class 0
    assert nms(xyxy, scores, labels, 0.45, class_agnostic=True).tolist() == [0, 1]  # identical boxes 1 and 2
    assert nms(xyxy, scores, labels, 0.45, class_agnostic=True, offset=1).tolist() == [0]


def test_fp32_boxes_that_are_not_pixel_boxes_are_refused_naming_decode():
    """A grid head's raw offsets read as pixel boxes (ddddocr's YOLOX [1, 3549, 6] without ``decode``: 122 boxes on 8
    images, every coordinate within 2.5 pixels of 0) are refused where FP32's decisions are first used (bind, demo
    check); real pixel boxes, and a handful of boxes, pass."""
    from quantkit.tasks.boxdecode import corners
    from quantkit.tasks.decision import Decision

    def decisions(xyxy):
        b = np.asarray(xyxy, np.float32)
        return [Decision(corners(b), np.ones(len(b), np.float32), np.zeros(len(b), np.int64))]

    a = make_adapter("box_detector", {"layout": "rows", "objectness": True})
    rng = np.random.default_rng(0)
    cxcywh = np.column_stack([rng.uniform(0, 1.5, (2, 60)).T, rng.uniform(0.8, 1.5, (2, 60)).T])
    raw = np.column_stack([cxcywh[:, :2] - cxcywh[:, 2:] / 2, cxcywh[:, :2] + cxcywh[:, 2:] / 2])
    with pytest.raises(ModelError) as e:
        a.check_reference(decisions(raw))
    assert "looks undecoded" in str(e.value) and "task.options.decode" in str(e.value) and "60 boxes" in str(e.value)
    flipped = raw.copy()
    flipped[:, [0, 2]] = np.column_stack([rng.uniform(10, 300, 60), rng.uniform(0, 5, 60)])  # x1 < x0: negative widths
    with pytest.raises(ModelError, match="negative width or height"):
        a.check_reference(decisions(flipped))
    a.check_reference(decisions(raw * 300))  # pixel boxes
    a.check_reference(decisions(raw[:10]))  # too few to judge
    make_adapter("box_detector", {"layout": "rows", "objectness": True, "normalized": True, "input_size": [416, 416]}).check_reference(decisions(raw))

"""The ``ort-float-decode`` placement (issue 37): a YOLOv8-style channels head whose output concatenates box
coordinates in pixels with 0-1 class scores. ORT's placement puts the scores on the boxes' grid (one scale for the
Concat), so they collapse to a few steps; with the decoding tail in float they keep their values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_quantize_fixtures import _write_intake, make_set

from quantkit.quantize import StaticQuantConfig, quantize
from quantkit.quantize.placement import (
    ORT,
    ORT_FLOAT_DECODE,
    decode_tail,
    plan_placement,
)
from quantkit.runtimes import make_runtime

SIZE = 16
TAIL = ("box_mul", "box_sigmoid", "concat", "reshape", "score_sigmoid", "split")


def channels_head_model() -> onnx.ModelProto:
    """x [1, 3, 16, 16] -> Conv (6 channels) -> Reshape [1, 6, 256] -> Split [4, 2]: boxes = Sigmoid * 320 (pixels),
    scores = Sigmoid (0-1) -> Concat -> y [1, 6, 256], the layout of a YOLOv8 output after its decode."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 1, (6, 3, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 6, SIZE * SIZE], np.int64), "shape"),
             numpy_helper.from_array(np.array([4, 2], np.int64), "splits"),
             numpy_helper.from_array(np.array(320.0, np.float32), "px")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             helper.make_node("Split", ["r", "splits"], ["b", "s"], name="split", axis=1),
             helper.make_node("Sigmoid", ["b"], ["bs"], name="box_sigmoid"),
             helper.make_node("Mul", ["bs", "px"], ["boxes"], name="box_mul"),
             helper.make_node("Sigmoid", ["s"], ["scores"], name="score_sigmoid"),
             helper.make_node("Concat", ["boxes", "scores"], ["y"], name="concat", axis=1)]
    g = helper.make_graph(nodes, "yolo_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, SIZE * SIZE])], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_decode_tail_is_everything_after_the_last_conv():
    m = channels_head_model()
    assert decode_tail(m) == TAIL
    assert plan_placement(ORT_FLOAT_DECODE, m, ["Concat", "Conv", "Mul", "Reshape", "Sigmoid", "Split"], ["conv"]).nodes_to_exclude == tuple(sorted(("conv", *TAIL)))
    assert plan_placement(ORT, m, ["Conv"], []).nodes_to_exclude == ()


@pytest.fixture(scope="module")
def scores_error(tmp_path_factory):
    root = tmp_path_factory.mktemp("decode_tail")
    intake = _write_intake(channels_head_model(), root / "intake", SIZE)
    cset = make_set(root / "set", 3, size=32)
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, SIZE, SIZE)).astype(np.float32)
    with make_runtime("onnxruntime", intake / "model.onnx") as r:
        ref = r.infer({"x": x})["y"]
    err = {}
    for placement in ("ort", "ort-float-decode"):
        quantize(intake, StaticQuantConfig(placement=placement), out=root / placement, calibration_set=cset)
        with make_runtime("onnxruntime", root / placement / "model_int8.onnx") as r:
            got = r.infer({"x": x})["y"]
        err[placement] = float(np.abs(got[:, 4:] - ref[:, 4:]).max())
    return err


def test_scores_on_the_boxes_grid_collapse_with_ort_placement(scores_error):
    assert scores_error["ort"] > 0.3  # one step of a 0-320 grid is 1.25: a score is 0 or 1.25


def test_scores_keep_their_values_with_the_decoding_tail_in_float(scores_error):
    assert scores_error["ort-float-decode"] < 0.05


def test_the_collapse_finding_names_the_float_decode_placement(tmp_path, run_cli):
    """ORT's placement collapses the scores of the channels head; quantize records the collapse with its fix, and
    ``quantkit compare`` and bind's likely causes name ``placement: ort-float-decode``. With that placement nothing collapses."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.thresholds.causes import likely_causes

    intake = _write_intake(channels_head_model(), tmp_path / "intake", SIZE)
    cset = make_set(tmp_path / "set", 3, size=32)
    code, out, err = run_cli(["quantize", intake, "--calibration-set", cset, "--out", tmp_path / "ort"])
    assert code == 0, err
    assert "set quantize.placement: ort-float-decode" in out
    rec = CalibrationRecord.load(tmp_path / "ort")
    (c,) = rec.calibration["collapsed_outputs"]
    assert c["tensor"] == "y" and c["fix"] == "placement: ort-float-decode" and set(c["channels"]) >= {4, 5}
    code, out, err = run_cli(["compare", intake, tmp_path / "ort", "--set", cset, "--no-runtimes"])
    assert code == 0, err
    assert "COLLAPSED: output 'y'" in out and "set quantize.placement: ort-float-decode" in out
    assert any("placement: ort-float-decode" in cause.fix for cause in likely_causes(rec))
    fixed = quantize(intake, StaticQuantConfig(placement="ort-float-decode"), out=tmp_path / "fd", calibration_set=cset)
    assert not fixed.calibration.get("collapsed_outputs")

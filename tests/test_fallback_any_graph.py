"""Fallback on graphs unlike the demo: unnamed nodes, a detector whose boxes and scores share one output."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_quantize_fixtures import _write_intake, make_set

from quantkit.quantize import StaticQuantConfig, quantize
from quantkit.quantize.fallback import FallbackConfig, agreement_metric, precision_fallback
from quantkit.quantize.fallback.graph import named_copy
from quantkit.tasks.boxes import BoxDetectorAdapter

SIZE = 16


def make_concat_detector(folder):
    """``x[1,3,16,16] -> Conv -> Relu``, then boxes ``Sigmoid(Conv) * 470`` (pixels) and scores ``Sigmoid(Conv)``
    concatenated into one ``[1, 256, 5]`` output (cx, cy, w, h, score); no node has a name. One 8-bit scale
    for 0..470 and 0..1 leaves the scores a single step (the public "all confidences 0 after INT8" bug)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.6, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.4, (4, 8, 1, 1)).astype(np.float32), "wb"),
             numpy_helper.from_array(rng.normal(0, 0.8, (1, 8, 1, 1)).astype(np.float32), "ws"),
             numpy_helper.from_array(np.array([0.5], np.float32), "bs"),
             numpy_helper.from_array(np.array(470.0, np.float32), "pix"),
             numpy_helper.from_array(np.array([1, 5, SIZE * SIZE], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "wb"], ["b0"]),
             helper.make_node("Sigmoid", ["b0"], ["b1"]),
             helper.make_node("Mul", ["b1", "pix"], ["boxes"]),
             helper.make_node("Conv", ["r", "ws", "bs"], ["s0"]),
             helper.make_node("Sigmoid", ["s0"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "shape"], ["flat"]),
             helper.make_node("Transpose", ["flat"], ["y"], perm=[0, 2, 1])]
    g = helper.make_graph(nodes, "concat-detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SIZE * SIZE, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return _write_intake(onnx.shape_inference.infer_shapes(m), folder, SIZE)


def test_named_copy_is_deterministic_and_keeps_given_names():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="Relu_0"),
                           helper.make_node("Relu", ["b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g)
    a, n = named_copy(m)
    b, _ = named_copy(m)
    assert n == 2 and [x.name for x in a.graph.node] == ["Relu_0_2", "Relu_0", "Relu_2"] == [x.name for x in b.graph.node]
    assert [x.name for x in m.graph.node] == ["", "Relu_0", ""]  # the input model is not touched
    assert named_copy(a) == (a, 0)


def test_fallback_recovers_collapsed_scores_on_an_unnamed_graph(tmp_path):
    intake = make_concat_detector(tmp_path / "intake")
    cset = make_set(tmp_path / "set", 6, size=SIZE)
    quantize(intake, StaticQuantConfig(), out=tmp_path / "base", calibration_set=cset)  # intake left the nodes unnamed
    metric = agreement_metric(BoxDetectorAdapter(objectness=False, score_thresh=0.5, iou_thresh=0.45))  # the task's primary: box F1 vs FP32
    config = FallbackConfig.from_dict({"target": 0.95, "latency": {"threads": [1], "repeats": 3, "warmup": 0}})
    r = precision_fallback(intake, config, reference_sets=[cset], out=tmp_path / "fb", base=tmp_path / "base", metric=metric)
    assert r.metric.startswith("box_f1(box_detector")
    assert r.renamed_nodes == 10 and r.rounds[0].metric < 0.5  # collapsed: most INT8 scores fall to zero
    assert r.met_on_search and r.met == (r.metric_after >= 0.95) and len(r.rounds) > 1
    names = [n.name for n in named_copy(onnx.load(str(intake / "model.onnx")))[0].graph.node]
    assert "Concat_7" in r.kept_names and set(r.kept_names) <= set(names)
    q = onnx.load(str(tmp_path / "fb" / "model_int8.onnx"))
    assert any(n.op_type == "Concat" and n.name == "Concat_7" for n in q.graph.node)  # the Concat runs in float

"""The one registry of tiny generated ONNX models the tests use (:data:`MODELS`), built with ``onnx.helper``.

* engine fault kinds and output checks: :func:`output_feeds_activation_model`, :func:`variable_shape_model`,
  :func:`concat_head_model` (boxes and scores sharing one output), :func:`conv_relu_conv_model`;
* runtime fusions: :func:`scaled_conv_qdq_model` (a Conv OpenVINO fuses with the float ops after it);
* a text-map head for the pipeline tests: :func:`tiny_map_model`;
* task adapters: :func:`const_model` (outputs are designed tensors) and the raw-head encoders.

``const_model({"out": array, ...})`` builds a graph whose outputs are Identity copies of constant initializers
(plus an input the graph reads through Shape, so it is a normal one-input model); ORT runs it and the outputs
are exactly the designed arrays. The encoders below build raw head tensors from boxes in pixels by inverting
the decoding formulas (:mod:`quantkit.tasks.boxdecode`), so a test knows the FP32 decisions exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def const_model(outputs: Mapping[str, np.ndarray], input_shape: Sequence[int] = (1, 3, 32, 32),
                metadata: Mapping[str, str] | None = None, dims: Mapping[str, Sequence[Any]] | None = None) -> Any:
    """An ``onnx.ModelProto`` with input ``images`` and one output per entry, equal to the given array.

    ``dims`` overrides an output's declared shape (e.g. symbolic dims ``["N", "K", 6]``)."""
    from onnx import TensorProto, checker, helper, numpy_helper

    nodes = [helper.make_node("Shape", ["images"], ["_shape"])]
    inits, outs = [], []
    for name, arr in outputs.items():
        arr = np.asarray(arr, np.float32)
        inits.append(numpy_helper.from_array(arr, f"{name}_const"))
        nodes.append(helper.make_node("Identity", [f"{name}_const"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list((dims or {}).get(name, arr.shape))))
    g = helper.make_graph(nodes, "designed", [helper.make_tensor_value_info("images", TensorProto.FLOAT, list(input_shape))], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    for k, v in (metadata or {}).items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    checker.check_model(m)
    return m


def run(model: Any) -> dict[str, np.ndarray]:
    """Outputs of one inference of ``model`` on a zero input (ONNX Runtime, CPU)."""
    from quantkit.runner import OrtRunner

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    with OrtRunner(model.SerializeToString()) as r:
        return r.infer({"images": np.zeros(shape, np.float32)})


def shapes(model: Any) -> dict[str, list[Any]]:
    """Declared output shapes as a consumer reads them: an int, or the symbolic name."""
    return {o.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in o.type.tensor_type.shape.dim]
            for o in model.graph.output}


def logit(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, np.float64)
    return np.log(p / (1 - p))


def cells(input_size: tuple[int, int], strides: Sequence[int], per_cell: int = 1) -> list[tuple[int, int, int, int]]:
    """``(level stride, anchor, gy, gx)`` of every row of a grid head, in row order (x fastest)."""
    h, w = input_size
    return [(s, a, gy, gx) for s in strides for a in range(per_cell) for gy in range(h // s) for gx in range(w // s)]


def yolox_head(boxes: Mapping[int, tuple[float, float, float, float, float, Sequence[float]]], input_size: tuple[int, int],
               strides: Sequence[int], n_cls: int, background: float = 0.01) -> np.ndarray:
    """Raw YOLOX head ``[1, K, 5+C]``: ``boxes[row] = (cx, cy, w, h, obj, cls scores)`` in pixels at those rows;
    other rows get a zero regression and ``background`` scores. Inverse of ``cx = (tx + gx) * s``,
    ``w = exp(tw) * s``."""
    rows = cells(input_size, strides)
    out = np.zeros((1, len(rows), 5 + n_cls), np.float32)
    out[0, :, 4:] = background
    for r, (cx, cy, w, h, obj, cls) in boxes.items():
        s, _, gy, gx = rows[r]
        out[0, r, :4] = [cx / s - gx, cy / s - gy, np.log(w / s), np.log(h / s)]
        out[0, r, 4] = obj
        out[0, r, 5:] = cls
    return out


def yolov5_head(boxes: Mapping[int, tuple[float, float, float, float, float, Sequence[float]]], input_size: tuple[int, int],
                strides: Sequence[int], anchors: Sequence[Sequence[float]], n_cls: int) -> np.ndarray:
    """Raw YOLOv5 ``Detect`` logits ``[1, K, 5+C]`` (rows: level, anchor, y, x). Inverse of
    ``cx = (2 sigmoid(tx) - 0.5 + gx) * s``, ``w = (2 sigmoid(tw))^2 * anchor_w``; other rows score ~0."""
    na = len(anchors[0]) // 2
    rows = cells(input_size, strides, na)
    out = np.full((1, len(rows), 5 + n_cls), -12.0, np.float32)
    out[0, :, :4] = 0.0
    for r, (cx, cy, w, h, obj, cls) in boxes.items():
        s, a, gy, gx = rows[r]
        aw, ah = (anchors[strides.index(s)][2 * a], anchors[strides.index(s)][2 * a + 1])
        sx, sy = (cx / s - gx + 0.5) / 2, (cy / s - gy + 0.5) / 2
        sw, sh = np.sqrt(w / aw) / 2, np.sqrt(h / ah) / 2
        out[0, r, :4] = logit(np.array([sx, sy, sw, sh]))
        out[0, r, 4] = logit(obj)
        out[0, r, 5:] = logit(np.asarray(cls))
    return out


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    return m


def _x(size: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])


def _w(name: str, shape: tuple[int, ...], seed: int, scale: float = 0.5) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).normal(0, scale, shape).astype(np.float32), name)


def output_feeds_activation_model(size: int = 16, op: str = "Relu") -> onnx.ModelProto:
    """``y1 = Conv(x)`` is a graph output AND the only input of ``op`` (Relu or Clip(0, 6)); ``y2 = Conv(op(y1))``."""
    act = helper.make_node("Relu", ["y1"], ["r"], name="act") if op == "Relu" else \
        helper.make_node("Clip", ["y1", "zero", "six"], ["r"], name="act")
    inits = [_w("w1", (4, 3, 3, 3), 1), _w("w2", (2, 4, 1, 1), 2)]
    if op == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array(6, np.float32), "six")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y1"], name="conv1", pads=[1, 1, 1, 1]), act,
             helper.make_node("Conv", ["r", "w2"], ["y2"], name="conv2")]
    outs = [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, size, size]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 2, size, size])]
    return _model(nodes, [_x(size)], outs, inits)


def reshaped_softmax_output_model(size: int = 16) -> onnx.ModelProto:
    """``y = Reshape(Softmax(Conv(x), axis=1), [1, 4, S*S])``: the graph output is a Reshape of a quantized tensor, so
    ORT gives it its input's scale (PP-OCR rec's tail after intake: ``softmax_11.tmp_0_intermediate`` -> Reshape)."""
    inits = [_w("w1", (4, 3, 3, 3), 5), numpy_helper.from_array(np.array([1, 4, size * size], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c"], ["y_intermediate"], name="softmax", axis=1),
             helper.make_node("Reshape", ["y_intermediate", "shape"], ["y"], name="reshape")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, size * size])]
    return _model(nodes, [_x(size)], outs, inits)


def variable_shape_model(size: int = 16, threshold: float = 0.5, consumer: str = "Mul") -> onnx.ModelProto:
    """``r = Relu(Conv(x))``; ``vals = GatherND(r, NonZero(r > threshold)^T)`` (its length depends on the image)
    then ``out = consumer(vals, 2)``; ``y = Conv(r)``. A huge ``threshold`` makes ``vals`` empty on every image."""
    inits = [_w("w1", (4, 3, 3, 3), 3), _w("w2", (2, 4, 1, 1), 4), numpy_helper.from_array(np.array(threshold, np.float32), "thr"),
             numpy_helper.from_array(np.array(2, np.float32), "two")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu1"),
             helper.make_node("Greater", ["r", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nonzero"),
             helper.make_node("Transpose", ["nz"], ["nzt"], name="tr", perm=[1, 0]),
             helper.make_node("GatherND", ["r", "nzt"], ["vals"], name="gather"),
             helper.make_node(consumer, ["vals", "two"], ["out"], name="post"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, size, size]),
            helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    return _model(nodes, [_x(size)], outs, inits)


def concat_head_model(size: int = 16, split: bool = False, box_scale: float = 470.0) -> onnx.ModelProto:
    """A detector head: ``Conv(x)`` gives 5 numbers per cell, reshaped to ``[1, S*S, 5]``; boxes =
    ``sigmoid(first 4) * box_scale`` (pixels), scores = ``sigmoid(last)`` (0..1). ``split=False``: one output
    ``det = Concat(boxes, scores, axis=-1)`` (one scale for both); ``split=True``: outputs ``boxes`` and ``scores``."""
    n = size * size
    ints = {k: numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
            {"shape": [1, 5, n], "s0": [0], "s4": [4], "s5": [5], "ax2": [2]}.items()}
    inits = [_w("w1", (5, 3, 1, 1), 5, 1.0), numpy_helper.from_array(np.array(box_scale, np.float32), "bs"), *ints.values()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="head"),
             helper.make_node("Reshape", ["h", "shape"], ["f"], name="flat"),
             helper.make_node("Transpose", ["f"], ["t"], name="cells", perm=[0, 2, 1]),
             helper.make_node("Slice", ["t", "s0", "s4", "ax2"], ["braw"], name="slice_boxes"),
             helper.make_node("Slice", ["t", "s4", "s5", "ax2"], ["sraw"], name="slice_scores"),
             helper.make_node("Sigmoid", ["braw"], ["bsig"], name="box_sigmoid"),
             helper.make_node("Mul", ["bsig", "bs"], ["boxes"], name="to_pixels"),
             helper.make_node("Sigmoid", ["sraw"], ["scores"], name="score_sigmoid")]
    if split:
        outs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, n, 4]),
                helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, n, 1])]
    else:
        nodes.append(helper.make_node("Concat", ["boxes", "scores"], ["det"], name="concat", axis=-1))
        outs = [helper.make_tensor_value_info("det", TensorProto.FLOAT, [1, n, 5])]
    return _model(nodes, [_x(size)], outs, inits)


def conv_relu_conv_model(size: int = 16, extra_int_output: bool = False) -> onnx.ModelProto:
    """``y = Conv(Relu(Conv(x)))``; with ``extra_int_output`` also ``cls = ArgMax(y, axis=1)`` (int64, never quantized)."""
    inits = [_w("w1", (8, 3, 3, 3), 6), _w("w2", (4, 8, 3, 3), 7)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu1"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, size, size])]
    if extra_int_output:
        nodes.append(helper.make_node("ArgMax", ["y"], ["cls"], name="argmax", axis=1, keepdims=0))
        outs.append(helper.make_tensor_value_info("cls", TensorProto.INT64, [1, size, size]))
    return _model(nodes, [_x(size)], outs, inits)


def scaled_conv_qdq_model(size: int = 16) -> onnx.ModelProto:
    """A QDQ model with Q/DQ on the Conv inputs only (as the ``openvino`` placement writes it), where the middle Conv's
    output is scaled, shifted and activated in float: ``y = conv3(HardSwish(conv2(Relu(conv1(x))) * s + a))``.

    OpenVINO folds ``* s + a`` into ``conv2`` and names the fused kernel after a generated ``Multiply_<n>`` that covers
    only ``add2`` (issue 39: a MobileOne block of PP-OCR's detector, 28 such kernels). uint8 activations (scale 1/64),
    int8 weights (scale 1/128), per tensor."""
    rng = np.random.default_rng(11)
    a_scale, w_scale = np.float32(1 / 64), np.float32(1 / 128)
    inits = [numpy_helper.from_array(a_scale, "a_scale"), numpy_helper.from_array(np.uint8(0), "a_zp"),
             numpy_helper.from_array(w_scale, "w_scale"), numpy_helper.from_array(np.int8(0), "w_zp"),
             numpy_helper.from_array(np.array([0.7], np.float32), "s2"),
             numpy_helper.from_array(rng.uniform(-0.2, 0.2, (1, 8, 1, 1)).astype(np.float32), "a2")]
    nodes = []
    for name, shape in (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (1, 8, 1, 1))):
        inits.append(numpy_helper.from_array(rng.integers(-60, 60, shape).astype(np.int8), f"{name}_q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", "w_scale", "w_zp"], [name], name=f"{name}_dq"))

    def qdq(t: str) -> str:
        nodes.extend([helper.make_node("QuantizeLinear", [t, "a_scale", "a_zp"], [f"{t}_q"], name=f"{t}_quant"),
                      helper.make_node("DequantizeLinear", [f"{t}_q", "a_scale", "a_zp"], [f"{t}_dq"], name=f"{t}_dequant")])
        return f"{t}_dq"

    nodes.append(helper.make_node("Conv", [qdq("x"), "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c1"], ["r1"], name="relu1"))
    nodes.append(helper.make_node("Conv", [qdq("r1"), "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]))
    nodes += [helper.make_node("Mul", ["c2", "s2"], ["m2"], name="mul2"), helper.make_node("Add", ["m2", "a2"], ["s2a"], name="add2"),
              helper.make_node("HardSwish", ["s2a"], ["h2"], name="hswish2")]
    nodes.append(helper.make_node("Conv", [qdq("h2"), "w3"], ["y"], name="conv3"))
    return _model(nodes, [_x(size)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, size, size])], inits)


def tiny_map_model(size: int = 32, *, names: bool = True, opset: int = 13) -> onnx.ModelProto:
    """x [1,3,S,S] -> Conv 3x3 -> Relu -> Conv 1x1 -> Sigmoid -> y [1,1,S,S] (a stand-in text-map head)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((1, 4, 1, 1)) * 0.5).astype(np.float32), "w2")
    n = (lambda s: s) if names else (lambda s: "")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name=n("conv1"), pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name=n("relu1")),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name=n("conv2")),
             helper.make_node("Sigmoid", ["c2"], ["y"], name=n("sigmoid"))]
    g = helper.make_graph(nodes, "tiny_map", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "H", "W"])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="quantkit-tests")
    m.ir_version = 8
    return m


def activation_chains_model(size: int = 16) -> onnx.ModelProto:
    """Conv chains as detectors write them: ``a = SiLU(conv1(x))`` (Sigmoid -> Mul), ``b = HardSwish(conv2(a))``
    (HardSigmoid -> Mul), a residual ``s = a + b``, an SE block's broadcast ``m = s * Sigmoid(conv3(GAP(s)))`` and
    ``y = conv4(m)``, a float graph output."""
    inits = [_w("w1", (4, 3, 3, 3), 11), _w("w2", (4, 4, 3, 3), 12), _w("w3", (4, 4, 1, 1), 13), _w("w4", (2, 4, 1, 1), 14)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["g1"], name="silu_sigmoid"),
             helper.make_node("Mul", ["c1", "g1"], ["a"], name="silu_mul"),
             helper.make_node("Conv", ["a", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("HardSigmoid", ["c2"], ["g2"], name="hswish_sigmoid", alpha=1.0 / 6),
             helper.make_node("Mul", ["c2", "g2"], ["b"], name="hswish_mul"),
             helper.make_node("Add", ["a", "b"], ["s"], name="residual_add"),
             helper.make_node("GlobalAveragePool", ["s"], ["p"], name="se_pool"),
             helper.make_node("Conv", ["p", "w3"], ["c3"], name="conv3"),
             helper.make_node("Sigmoid", ["c3"], ["g3"], name="se_sigmoid"),
             helper.make_node("Mul", ["s", "g3"], ["m"], name="se_mul"),
             helper.make_node("Conv", ["m", "w4"], ["y"], name="conv4")]
    return _model(nodes, [_x(size)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, size, size])], inits)


MODELS = {
    "const": const_model,
    "output_feeds_activation": output_feeds_activation_model,
    "variable_shape": variable_shape_model,
    "concat_head": concat_head_model,
    "conv_relu_conv": conv_relu_conv_model,
    "scaled_conv_qdq": scaled_conv_qdq_model,
    "tiny_map": tiny_map_model,
    "activation_chains": activation_chains_model,
}
"""Name -> builder; :func:`build` makes one with its default arguments (``const`` needs its outputs)."""


def build(name: str, **kwargs: Any) -> onnx.ModelProto:
    """The registered model ``name`` built with ``kwargs``."""
    return MODELS[name](**kwargs)

"""Shared builders for the quantize tests (imported by name; holds no tests itself).

* :func:`make_intake` — the embedded PP-OCR detector prepared like ``quantkit intake`` would: input
  fixed to ``1x3xSxS``, opset 13, export note embedded and as a sidecar.
* :func:`make_tiny_intake` — a 3-node Conv/Relu/Conv model built with ``onnx.helper`` (milliseconds).
* :func:`make_set` — a registered calibration set of crops of scikit-image's sample photos.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, version_converter

from quantkit.note import ExportNote, Preprocessing

PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "retina.jpg", "page.png", "text.png",
          "camera.png", "coins.png", "brick.png", "grass.png"]


def _write_intake(model: onnx.ModelProto, folder: Path, size: int) -> Path:
    note = ExportNote(preprocessing=Preprocessing(input_size=(size, size), resize_policy="stretch"))
    note.embed(model)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    note.save(folder / "export_note.json")
    return folder


def make_intake(folder: Path, size: int = 96, opset: int = 13) -> Path:
    """The real detector at ``1x3xSxS``, ``opset`` (12 keeps the shipped opset)."""
    from quantkit.demo import packaged_model_path

    m = onnx.load(str(packaged_model_path()))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, (1, 3, size, size)):
        d.Clear()
        d.dim_value = v
    for o in m.graph.output:
        for d, v in zip(o.type.tensor_type.shape.dim, (1, 1, size, size)):
            d.Clear()
            d.dim_value = v
    if opset != 12:
        m = version_converter.convert_version(m, opset)
    m = onnx.shape_inference.infer_shapes(m)
    return _write_intake(m, folder, size)


def make_tiny_intake(folder: Path, size: int = 16, opset: int = 13) -> Path:
    """``x[1,3,S,S] -> Conv(4) -> Relu -> Conv(2) -> y``, weights from a fixed seed."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.5, (2, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu1"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, size, size])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    return _write_intake(m, folder, size)


def make_set(folder: Path, n: int = 8, size: int = 128, name: str = "test-set", seed: int = 0) -> Path:
    """Register ``n`` PNG crops (``size`` px, seeded) of scikit-image's photos as a calibration set."""
    import skimage
    from PIL import Image

    from quantkit.calibset import register_set

    data = Path(skimage.__file__).parent / "data"
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        im = Image.open(data / PHOTOS[i % len(PHOTOS)]).convert("RGB")
        w, h = im.size
        s = min(w, h, size * 2)
        x0, y0 = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
        im.crop((x0, y0, x0 + s, y0 + s)).resize((size, size)).save(folder / "images" / f"{i:04d}.png")
    register_set(folder, name=name, kind="calibration", camera="cam1", lighting="day", site="test")
    return folder


# -- tiny generated models for the engine's fault kinds (issue 17) and output checks (issue 12) ---------------------
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


def write_model_intake(model: onnx.ModelProto, folder: Path, size: int) -> Path:
    """An intake folder for any generated model (note: ``size`` x ``size``, stretch)."""
    return _write_intake(model, folder, size)


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

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


def make_tiny_intake(folder: Path, size: int = 16, opset: int = 13, channels: int = 2) -> Path:
    """``x[1,3,S,S] -> Conv(4) -> Relu -> Conv(channels) -> y``, weights from a fixed seed (``channels=1``: a map
    in db_text's layout ``[1, 1, S, S]``)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.5, (2, 4, 1, 1)).astype(np.float32)[:channels], "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu1"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])], [w1, b1, w2])
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


def write_model_intake(model: onnx.ModelProto, folder: Path, size: int) -> Path:
    """An intake folder for any generated model (note: ``size`` x ``size``, stretch)."""
    return _write_intake(model, folder, size)

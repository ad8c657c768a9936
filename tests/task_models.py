"""Tiny generated ONNX models for the task-adapter tests: each output is a designed tensor.

``const_model({"out": array, ...})`` builds a graph whose outputs are Identity copies of constant initializers
(plus an input the graph reads through Shape, so it is a normal one-input model); ORT runs it and the outputs
are exactly the designed arrays. The encoders below build raw head tensors from boxes in pixels by inverting
the decoding formulas (:mod:`quantkit.tasks.boxdecode`), so a test knows the FP32 decisions exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


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

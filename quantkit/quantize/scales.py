"""Scales read from a quantized model into :class:`quantkit.artifacts.TensorScale` rows.

Scales are read from the quantized model itself, not from the calibrator. :func:`extract_scales` reads ONNX
Runtime's files: ORT names every quantization parameter ``<tensor>_scale`` / ``<tensor>_zero_point`` (biases:
``<bias>_quantized_scale``), used by QuantizeLinear/DequantizeLinear (QDQ), QLinear* (QOperator) and
ConvInteger/MatMulInteger (dynamic) nodes alike, so one reader covers all three formats. :func:`qdq_scales` reads
any QDQ file by its nodes, whatever the parameters are called (NNCF's ``scale_<tensor>_1``, weights stored as
integers behind a DequantizeLinear). The record type itself is :class:`quantkit.artifacts.CalibrationRecord`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..artifacts.record import TensorScale
from ..dtypes import int_type_of_onnx
from ..errors import ModelError


def extract_scales(qmodel: Any, fp32_model: Any, *, ranges: Any = None, calibrator: str = "") -> tuple[TensorScale, ...]:
    """Read every quantized tensor's parameters from a quantized ``onnx.ModelProto``.

    Args:
        qmodel: the model ORT wrote (QDQ, QOperator or dynamic).
        fp32_model: the float model it came from (to tell weights from activations and read weight ranges).
        ranges: ORT ``TensorsData`` from calibration (activation ``range_min/max``), or None.
        calibrator: method name written into activation rows.

    Returns:
        Tensors sorted by name.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in qmodel.graph.initializer}
    fp_inits = {i.name: i for i in fp32_model.graph.initializer}
    axis_of: dict[str, int] = {}
    for n in qmodel.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) >= 2:
            for a in n.attribute:
                if a.name == "axis":
                    axis_of[n.input[1]] = int(a.i)
        if n.op_type == "QLinearConv" and len(n.input) >= 5:
            axis_of.setdefault(n.input[4], 0)
    out = []
    for sname in sorted(inits):
        if not sname.endswith("_scale"):
            continue
        base = sname[: -len("_scale")]
        zname = base + "_zero_point"
        if zname not in inits:
            continue
        scale = numpy_helper.to_array(inits[sname]).astype(np.float32).reshape(-1)
        zp_init = inits[zname]
        zp = numpy_helper.to_array(zp_init).reshape(-1)
        it = int_type_of_onnx(zp_init.data_type)
        dtype = it.name if it is not None else str(zp_init.data_type)
        name = base[: -len("_quantized")] if base.endswith("_quantized") and base[: -len("_quantized")] in fp_inits else base
        rmin = rmax = None
        if name in fp_inits:
            w = numpy_helper.to_array(fp_inits[name])
            role = "bias" if dtype == "int32" else "weight"
            rmin, rmax = (float(w.min()), float(w.max())) if w.size else (None, None)
            cal = "weights"
        else:
            role = "activation"
            cal = calibrator
            if ranges is not None and name in ranges:
                lo, hi = ranges[name].range_value
                rmin, rmax = float(np.min(lo)), float(np.max(hi))
        axis = axis_of.get(sname) if scale.size > 1 else None
        out.append(TensorScale(name=name, role=role, dtype=dtype, axis=axis, scale=tuple(float(s) for s in scale),
                               zero_point=tuple(int(z) for z in zp), range_min=rmin, range_max=rmax, calibrator=cal))
    return tuple(sorted(out, key=lambda t: t.name))


def qdq_scales(qmodel: Any, fp32_model: Any, *, calibrator: str) -> tuple[TensorScale, ...]:
    """Read every quantized tensor's parameters from the Q/DQ nodes of a QDQ ``onnx.ModelProto``, by node, not by name.

    A ``QuantizeLinear`` of an activation gives its row (named by the float tensor it reads, role ``activation``);
    a ``DequantizeLinear`` of an integer initializer (a weight stored quantized, as NNCF writes them) gives the row of
    the float initializer that its consumer reads at the same input in ``fp32_model`` (matched by node name; NNCF keeps
    the float model's node names), role ``weight`` (``bias`` for int32). A ``QuantizeLinear`` of a float initializer is
    a weight too. Scales in float units per integer step, zero points integers; ``axis`` is the node's (default 1)
    for per-channel parameters. Weight rows carry the float weight's min and max; activation rows no range (the file
    does not hold the statistics it was made from).

    Args:
        qmodel: the quantized model. fp32_model: the float model it was quantized from (same node names).
        calibrator: written into activation rows (e.g. ``"nncf"``).

    Returns:
        Rows sorted by name. A tensor quantized twice with different parameters (for two consumers) keeps its
        name on the first row; the others are named ``<tensor>:<first consumer node>``.

    Raises:
        ModelError: a Q/DQ node whose scale or zero point is not an initializer.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in qmodel.graph.initializer}
    fp_inits = {i.name: i for i in fp32_model.graph.initializer}
    fp_nodes = {n.name: n for n in fp32_model.graph.node if n.name}
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for n in qmodel.graph.node:
        for k, x in enumerate(n.input):
            consumers.setdefault(x, []).append((n, k))
    rows: dict[str, TensorScale] = {}
    for n in qmodel.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        src = n.input[0]
        if n.op_type == "QuantizeLinear":
            name, weight = src, src in fp_inits or src in inits
        elif src in inits:
            name, weight = _weight_name(n, consumers, fp_nodes, src), True
        else:
            continue  # the DequantizeLinear of an activation: its QuantizeLinear gave the row
        missing = [x for x in n.input[1:3] if x and x not in inits]
        if missing:
            raise ModelError(f"{n.name or n.op_type}: quantization parameter {missing[0]!r} is not an initializer; the file is not a static QDQ model")
        scale = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32).reshape(-1)
        if len(n.input) > 2 and n.input[2]:
            zp_init = inits[n.input[2]]
            zp, it = numpy_helper.to_array(zp_init).reshape(-1), int_type_of_onnx(zp_init.data_type)
            dtype = it.name if it is not None else str(zp_init.data_type)
        else:  # ONNX: no zero point = 0 of uint8
            zp, dtype = np.zeros(1, np.int64), "uint8"
        axis = next((int(a.i) for a in n.attribute if a.name == "axis"), 1) if scale.size > 1 else None
        rmin = rmax = None
        if weight:
            role, cal = ("bias" if dtype == "int32" else "weight"), "weights"
            if name in fp_inits:
                w = numpy_helper.to_array(fp_inits[name])
                rmin, rmax = (float(w.min()), float(w.max())) if w.size else (None, None)
        else:
            role, cal = "activation", calibrator
        row = TensorScale(name=name, role=role, dtype=dtype, axis=axis, scale=tuple(float(v) for v in scale),
                          zero_point=tuple(int(z) for z in zp), range_min=rmin, range_max=rmax, calibrator=cal)
        if name in rows and rows[name] != row:
            first = next((c.name or c.op_type for c, _ in consumers.get(n.output[0], [])), n.name)
            row = dataclasses.replace(row, name=f"{name}:{first}")
        rows.setdefault(row.name, row)
    return tuple(sorted(rows.values(), key=lambda t: t.name))


def _weight_name(dq: Any, consumers: dict[str, list[tuple[Any, int]]], fp_nodes: dict[str, Any], stored: str) -> str:
    """The float initializer a weight ``DequantizeLinear`` stands for: what the same-named consumer node reads at the same
    input in the float model; ``stored`` (the integer initializer's own name) when no consumer matches."""
    for node, k in consumers.get(dq.output[0], []):
        fp = fp_nodes.get(node.name)
        if fp is not None and node.op_type == fp.op_type and k < len(fp.input) and fp.input[k]:
            return str(fp.input[k])
    return stored

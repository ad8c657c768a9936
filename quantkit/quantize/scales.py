"""Scales read from a quantized model into :class:`quantkit.artifacts.TensorScale` rows.

Scales are read from the quantized model itself, not from the calibrator: ONNX Runtime names every
quantization parameter ``<tensor>_scale`` / ``<tensor>_zero_point`` (biases: ``<bias>_quantized_scale``),
used by QuantizeLinear/DequantizeLinear (QDQ), QLinear* (QOperator) and ConvInteger/MatMulInteger
(dynamic) nodes alike, so one reader covers all three formats. The record type itself is
:class:`quantkit.artifacts.CalibrationRecord`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..artifacts.record import TensorScale
from ..dtypes import int_type_of_onnx


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

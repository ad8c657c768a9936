"""Find the suite's patterns in a real QDQ model, and the ones a target runtime gets wrong.

:func:`patterns_in` reads only the graph (no runtime): which nodes use a construct of the suite. The quantize
engine can call :func:`failing_patterns` with the targets named in ``params.yaml`` and warn, naming the pattern
and the nodes, when one of them disagrees with the reference on this machine's matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .models import PATTERNS
from .suite import PatternMatrix, PatternResult

_WEIGHT_OPS = {"Conv": "per_channel_conv_axis0", "ConvTranspose": "per_channel_convtranspose_axis1", "MatMul": "per_channel_matmul_axis1"}


def _producers(model: Any) -> dict[str, Any]:
    return {o: n for n in model.graph.node for o in n.output}


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _const(model: Any, name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    return None


def _zp_type(model: Any, node: Any) -> str:
    from onnx import helper

    if len(node.input) < 3 or not node.input[2]:
        return "uint8"
    for t in model.graph.initializer:
        if t.name == node.input[2]:
            return helper.tensor_dtype_to_np_dtype(t.data_type).name if t.data_type not in (21, 22) else ("uint4" if t.data_type == 21 else "int4")
    return ""


def _name(node: Any, i: int) -> str:
    return node.name or f"{node.op_type}_{i}"


def patterns_in(model: Any) -> list[tuple[str, list[str]]]:
    """``[(pattern name, [node names])]`` of the suite's patterns an ``onnx.ModelProto`` (QDQ) uses, in suite order.

    Detected: Concat whose DequantizeLinear inputs have different scales; an int8 Conv reading a Concat of int8 pairs
    (or an int8 pair after a Concat), or of uint8 pairs with different zero points; Resize between DequantizeLinear and
    QuantizeLinear (by mode / coordinate transform / nearest rounding); per-channel DequantizeLinear weights of
    Conv, ConvTranspose, Gemm (transB and axis) and MatMul; the integer type of activation QuantizeLinear nodes
    (uint8, int8, uint16, int16); 4-bit weights; uint8 activations into int8 weights (``saturation_u8s8``). A Resize whose attributes the suite does not model is reported
    as ``resize_<mode>_<coordinates>[_<nearest>]`` with no matrix entry.
    """
    prod = _producers(model)
    inits = {t.name for t in model.graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for n in model.graph.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    found: dict[str, list[str]] = {}
    pos = {n.output[0]: i for i, n in enumerate(model.graph.node) if n.output}

    def add(p: str, node: str) -> None:
        found.setdefault(p, [])
        if node not in found[p]:
            found[p].append(node)

    for i, n in enumerate(model.graph.node):
        if n.op_type == "Concat":
            scales = [_const(model, prod[x].input[1]) for x in n.input if x in prod and prod[x].op_type == "DequantizeLinear"]
            vals = {float(np.max(s)) for s in scales if s is not None}
            if len(vals) > 1:
                add("concat_scales_int8_conv", _name(n, i))
        elif n.op_type == "Resize" and n.input[0] in prod and prod[n.input[0]].op_type == "DequantizeLinear":
            if any(c.op_type == "QuantizeLinear" for c in consumers.get(n.output[0], [])):
                mode, coord = _attr(n, "mode", "nearest"), _attr(n, "coordinate_transformation_mode", "half_pixel")
                add(f"resize_{mode}_{coord}" + (f"_{_attr(n, 'nearest_mode', 'round_prefer_floor')}" if mode == "nearest" else ""), _name(n, i))
        elif n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in prod:
            dq = prod[n.input[1]]
            if dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
                continue
            scale = _const(model, dq.input[1])
            if scale is not None and scale.size > 1:
                axis = _attr(dq, "axis", 1)
                pat = (f"per_channel_gemm_transb_axis{axis}" if _attr(n, "transB", 0) else f"per_channel_gemm_axis{axis}") \
                    if n.op_type == "Gemm" else _WEIGHT_OPS[n.op_type].rsplit("axis", 1)[0] + f"axis{axis}"
                add(pat, _name(n, i))
            if _zp_type(model, dq) in ("int4", "uint4"):
                add(f"weights_{_zp_type(model, dq)}", _name(n, i))
            x = prod.get(n.input[0])
            if _zp_type(model, dq) == "int8" and x is not None and x.op_type == "DequantizeLinear" and _zp_type(model, x) == "uint8":
                add("saturation_u8s8", _name(n, i))
            concat = _concat_into(model, x, prod, pos)
            if concat is not None:
                add(concat[0], concat[1])
        elif n.op_type in ("Sigmoid", "Add", "Mul") and n.input and n.input[0] in prod and prod[n.input[0]].op_type == "DequantizeLinear" \
                and any(c.op_type == "QuantizeLinear" for c in consumers.get(n.output[0], [])):
            if n.op_type == "Sigmoid":
                add("qdq_sigmoid", _name(n, i))
                q_in = prod.get(prod[n.input[0]].input[0])
                src = prod.get(q_in.input[0]) if q_in is not None and q_in.op_type == "QuantizeLinear" else None
                if src is not None and src.op_type == "Conv":
                    add("conv_sigmoid_fine_output", _name(n, i))
            elif len(n.input) > 1 and n.input[1] in prod and prod[n.input[1]].op_type == "DequantizeLinear":
                add(f"qdq_{n.op_type.lower()}_mixed_scales", _name(n, i))
        elif n.op_type == "QuantizeLinear" and n.input[0] not in inits:
            t = _zp_type(model, n)
            if t in ("uint8", "int8", "uint16", "int16"):
                add(f"activations_{t}", _name(n, i))
    order = {p.name: k for k, p in enumerate(PATTERNS)}
    return sorted(found.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))


def _concat_into(model: Any, x: Any, prod: dict[str, Any], pos: dict[str, int]) -> tuple[str, str] | None:
    """``(pattern, Concat name)`` when an int8 Conv's input ``x`` (its producer node) is a Concat whose inputs are all
    DequantizeLinear (``concat_int8_conv`` when one is int8, ``concat_zero_points_conv`` when uint8 zero points differ),
    or an int8 DequantizeLinear of a Concat (``concat_int8_conv``); else None. ``pos``: a node's index by its first output."""
    if x is None:
        return None
    if x.op_type == "DequantizeLinear" and _zp_type(model, x) == "int8":
        q = prod.get(x.input[0])
        c = prod.get(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None
        if c is not None and c.op_type == "Concat":
            return "concat_int8_conv", _name(c, pos[c.output[0]])
        return None
    if x.op_type != "Concat":
        return None
    dqs = [prod.get(i) for i in x.input]
    if len(dqs) < 2 or any(d is None or d.op_type != "DequantizeLinear" for d in dqs):
        return None
    name = _name(x, pos[x.output[0]])
    if any(_zp_type(model, d) == "int8" for d in dqs):
        return "concat_int8_conv", name
    zps = {float(np.max(z)) if (z := _const(model, d.input[2])) is not None else 0.0 for d in dqs if len(d.input) > 2}
    return ("concat_zero_points_conv", name) if len(zps) > 1 else None


def failing_patterns(model: Any, matrix: PatternMatrix, runtimes: Sequence[str]) -> list[tuple[PatternResult, list[str]]]:
    """``[(result, nodes)]`` for each pattern ``model`` uses that a runtime in ``runtimes`` disagrees on or refuses
    in ``matrix`` (its deployment variant). Patterns the matrix has no entry for are not reported."""
    out = []
    for pattern, nodes in patterns_in(model):
        for rt in runtimes:
            r = matrix.verdict(pattern, rt)
            if r is not None and r.verdict != "agree":
                out.append((r, nodes))
    return out

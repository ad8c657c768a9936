"""Float-graph folding before quantization: fewer quantized tensors, fewer element-wise kernels.

Two rewrites, each exact in real arithmetic (the float model's outputs change by float rounding only):

* :func:`fold_conv_affine`: ``Conv -> Mul(c) -> Add(d)`` with constant per-channel or scalar ``c`` / ``d``
  becomes one ``Conv`` with weights ``W c`` and bias ``b c + d``, as batch-norm folding does (Jacob et al.
  2018, "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference",
  sec. 3.2). ONNX Runtime's own ``ConvMulFusion`` / ``ConvAddFusion`` only match a constant in the
  second input; exporters such as Paddle2ONNX write it first (PP-LCNet's learnable affine blocks).
* :func:`fold_affine_into_next_conv`: ``Mul(c) -> Add(d) -> Conv`` with no padding (``pads`` 0): the constants
  move into the convolution's input channels (``W[:, i] c_i``; bias ``+ sum W[:, i] d_i``). With padding the border
  outputs would change (the padded zeros would become ``d``), so those stay.
* :func:`hardswish_as_hardsigmoid`: ``Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(6)`` (hard-swish as
  exporters decompose it; Howard et al. 2019, "Searching for MobileNetV3", eq. 2) becomes
  ``Mul(x, HardSigmoid(x; alpha=1/6, beta=0.5))`` (ONNX ``HardSigmoid`` = ``max(0, min(1, alpha x + beta))``):
  two quantized tensors and one float ``Div`` fewer per activation. Or, from opset 14, as one ``HardSwish(x)``
  (three quantized tensors fewer; ONNX Runtime runs it in float between a DequantizeLinear and a QuantizeLinear).
  Which one suits depends on the runtime: OpenVINO's CPU plugin (2026.x) runs ``HardSigmoid`` with its reference
  kernel in planar layout, with a layout reorder before and after it (12-26 ms each at 640x640 on the PP-OCR
  detector, 1 thread), and ``HardSwish`` as a JIT element-wise kernel.

Tensor names that survive keep their meaning (a folded ``Conv`` writes the name of the last node folded
into it), so calibrated ranges of the unfolded model still apply; :func:`new_ranges` gives the range of
each new ``HardSigmoid`` output from its input's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...modelio import opset_of

#: Suffix of the tensors :func:`hardswish_as_hardsigmoid` creates (``<Add output>_hsig``).
HSIG_SUFFIX = "_hsig"
#: What :func:`hardswish_as_hardsigmoid` can write a hard-swish chain as.
HARDSWISH_OPS = ("HardSigmoid", "HardSwish")


def _consumers(graph: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def _const(inits: Mapping[str, Any], name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    return numpy_helper.to_array(inits[name]) if name in inits else None


def _scalar(inits: Mapping[str, Any], name: str) -> float | None:
    a = _const(inits, name)
    return float(a.reshape(-1)[0]) if a is not None and a.size == 1 else None


def _per_channel(k: np.ndarray, cout: int) -> np.ndarray | None:
    """``k`` as a ``(cout,)`` vector when it broadcasts along the channel axis of an NCHW tensor (or is a scalar)."""
    if k.size == 1:
        return np.full(cout, float(k.reshape(-1)[0]))
    if k.ndim > 4:
        return None
    shape = (1,) * (4 - k.ndim) + tuple(k.shape)
    if shape[0] == 1 and shape[2] == 1 and shape[3] == 1 and shape[1] == cout:
        return k.reshape(-1).astype(np.float64)
    return None


def _fold_one(graph: Any, inits: Mapping[str, Any], conv: Any, op: Any, tag: int) -> bool:
    from onnx import numpy_helper

    other = [i for i in op.input if i != conv.output[0]]
    if len(other) != 1 or len(op.input) != 2:
        return False
    k = _const(inits, other[0])
    w = _const(inits, conv.input[1]) if len(conv.input) > 1 else None
    if k is None or w is None or w.ndim != 4:
        return False
    kv = _per_channel(k.astype(np.float64), w.shape[0])
    if kv is None:
        return False
    b = _const(inits, conv.input[2]) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
    if b is None:
        return False
    w64, b64 = w.astype(np.float64), b.astype(np.float64)
    if op.op_type == "Mul":
        w64, b64 = w64 * kv.reshape(-1, 1, 1, 1), b64 * kv
    else:
        b64 = b64 + kv
    wn, bn = f"{conv.input[1]}_folded{tag}", f"{conv.name or 'conv'}_bias_folded{tag}"
    graph.initializer.extend([numpy_helper.from_array(w64.astype(w.dtype), wn), numpy_helper.from_array(b64.astype(w.dtype), bn)])
    del conv.input[1:]
    conv.input.extend([wn, bn])
    conv.output[0] = op.output[0]
    graph.node.remove(op)
    return True


def fold_conv_affine(model: Any) -> list[str]:
    """Fold constant ``Mul`` / ``Add`` nodes that follow a ``Conv`` (its only consumer) into it, in place.

    Returns:
        the names of the nodes folded away, in the order folded.
    """
    g = model.graph
    outputs = {o.name for o in g.output}
    folded: list[str] = []
    while True:
        inits = {i.name: i for i in g.initializer}
        cons = _consumers(g)
        done = False
        for conv in g.node:
            if conv.op_type != "Conv" or conv.output[0] in outputs:
                continue
            c = cons.get(conv.output[0], [])
            if len(c) == 1 and c[0].op_type in ("Mul", "Add") and _fold_one(g, inits, conv, c[0], len(folded)):
                folded.append(c[0].name)
                done = True
                break
        if not done:
            break
    prune_initializers(model)
    return folded


def _fold_into_next(graph: Any, inits: Mapping[str, Any], op: Any, conv: Any, tag: int) -> bool:
    from onnx import helper, numpy_helper

    if len(op.input) != 2 or conv.input[0] != op.output[0] or len(conv.input) < 2 or conv.input[1] not in inits:
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    if any(attrs.get("pads", [0])) or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
        return False
    x = next((i for i in op.input if i not in inits), None)
    k = next((_const(inits, i) for i in op.input if i in inits), None)
    w = _const(inits, conv.input[1])
    if x is None or k is None or w is None or w.ndim != 4:
        return False
    group = int(attrs.get("group", 1))
    cin = w.shape[1] * group
    kv = _per_channel(k.astype(np.float64), cin)
    if kv is None:
        return False
    w64 = w.astype(np.float64)
    per_in = np.stack([kv[(o // (w.shape[0] // group)) * w.shape[1]:(o // (w.shape[0] // group) + 1) * w.shape[1]] for o in range(w.shape[0])])
    b = _const(inits, conv.input[2]) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
    b64 = b.astype(np.float64)
    if op.op_type == "Mul":
        w64 = w64 * per_in[:, :, None, None]
    else:
        b64 = b64 + np.einsum("oikl,oi->o", w64, per_in)
    wn, bn = f"{conv.input[1]}_infolded{tag}", f"{conv.name or 'conv'}_bias_infolded{tag}"
    graph.initializer.extend([numpy_helper.from_array(w64.astype(w.dtype), wn), numpy_helper.from_array(b64.astype(w.dtype), bn)])
    del conv.input[1:]
    conv.input.extend([wn, bn])
    conv.input[0] = x
    graph.node.remove(op)
    return True


def fold_affine_into_next_conv(model: Any) -> list[str]:
    """Fold constant ``Mul`` / ``Add`` nodes whose only consumer is an unpadded ``Conv`` into it, in place.

    Returns:
        the names of the nodes folded away, in the order folded.
    """
    g = model.graph
    outputs = {o.name for o in g.output}
    folded: list[str] = []
    while True:
        inits = {i.name: i for i in g.initializer}
        cons = _consumers(g)
        done = False
        for op in g.node:
            if op.op_type not in ("Mul", "Add") or op.output[0] in outputs:
                continue
            c = cons.get(op.output[0], [])
            if len(c) == 1 and c[0].op_type == "Conv" and _fold_into_next(g, inits, op, c[0], len(folded)):
                folded.append(op.name)
                done = True
                break
        if not done:
            break
    prune_initializers(model)
    return folded


def _clip_bounds(clip: Any, inits: Mapping[str, Any]) -> tuple[float | None, float | None]:
    attrs = {a.name: a.f for a in clip.attribute}
    lo = _scalar(inits, clip.input[1]) if len(clip.input) > 1 and clip.input[1] else attrs.get("min")
    hi = _scalar(inits, clip.input[2]) if len(clip.input) > 2 and clip.input[2] else attrs.get("max")
    return lo, hi


def _match_hardswish(add: Any, inits: Mapping[str, Any], cons: Mapping[str, list[Any]]) -> tuple[str, list[Any]] | None:
    if add.op_type != "Add" or len(add.input) != 2:
        return None
    vals = [_scalar(inits, i) for i in add.input]
    if 3.0 not in vals or None not in vals:
        return None
    x = add.input[vals.index(None)]
    nxt = cons.get(add.output[0], [])
    if len(nxt) != 1 or nxt[0].op_type != "Clip" or _clip_bounds(nxt[0], inits) != (0.0, 6.0):
        return None
    clip = nxt[0]
    nxt = cons.get(clip.output[0], [])
    if len(nxt) != 1 or nxt[0].op_type != "Mul" or set(nxt[0].input) != {x, clip.output[0]}:
        return None
    mul = nxt[0]
    nxt = cons.get(mul.output[0], [])
    if len(nxt) != 1 or nxt[0].op_type not in ("Div", "Mul"):
        return None
    last = nxt[0]
    k = _scalar(inits, last.input[1]) if len(last.input) == 2 else None
    if k is None or not np.isclose(k, 6.0 if last.op_type == "Div" else 1.0 / 6.0, rtol=1e-6):
        return None
    return x, [add, clip, mul, last]


def _next_hardswish(g: Any) -> tuple[str, list[Any]] | None:
    """The first hard-swish chain of graph ``g`` that can be rewritten (no intermediate tensor is a graph output)."""
    outputs = {o.name for o in g.output}
    inits = {i.name: i for i in g.initializer}
    cons = _consumers(g)
    for n in g.node:
        m = _match_hardswish(n, inits, cons)
        if m is not None and not any(o in outputs for node in m[1][:-1] for o in node.output):
            return m
    return None


def has_hardswish_chain(model: Any) -> bool:
    """Whether :func:`hardswish_as_hardsigmoid` would rewrite anything in ``model`` (``onnx.ModelProto``)."""
    return _next_hardswish(model.graph) is not None


def hardswish_as_hardsigmoid(model: Any, op: str = "HardSigmoid") -> list[str]:
    """Rewrite decomposed hard-swish chains as ``Mul(x, HardSigmoid(x))`` (``op="HardSigmoid"``) or as one
    ``HardSwish(x)`` (``op="HardSwish"``; ONNX opset 14, which the model must import), in place.

    Returns:
        the name of the new ``Mul`` (``<Mul name>_hardswish``) or ``HardSwish`` node (``<Mul name>_HardSwish``)
        of each rewritten chain.

    Raises:
        ValueError: an unknown ``op``, or ``HardSwish`` for a chain in a model importing ONNX opset < 14.
    """
    if op not in HARDSWISH_OPS:
        raise ValueError(f"op must be one of {HARDSWISH_OPS}, not {op!r}")
    from onnx import helper

    g = model.graph
    made: list[str] = []
    while (hit := _next_hardswish(g)) is not None:
        if op == "HardSwish" and opset_of(model) < 14:
            raise ValueError(f"HardSwish needs ONNX opset 14; the model imports {opset_of(model)} (raise it with onnx.version_converter)")
        x, (add, clip, mul, last) = hit
        at = list(g.node).index(add)
        for node in (add, clip, mul, last):
            g.node.remove(node)
        if op == "HardSwish":
            hsw = helper.make_node("HardSwish", [x], [last.output[0]], name=f"{mul.name}_HardSwish")
            g.node.insert(at, hsw)
            made.append(hsw.name)
            continue
        hs_out = add.output[0] + HSIG_SUFFIX
        hs = helper.make_node("HardSigmoid", [x], [hs_out], name=f"{add.name}_hardsigmoid", alpha=1.0 / 6.0, beta=0.5)
        nm = helper.make_node("Mul", [x, hs_out], [last.output[0]], name=f"{mul.name}_hardswish")
        g.node.insert(at, nm)
        g.node.insert(at, hs)
        made.append(nm.name)
    prune_initializers(model)
    return made


def new_ranges(model: Any, ranges: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Calibrated ranges of the ``HardSigmoid`` outputs :func:`hardswish_as_hardsigmoid` created, from
    their inputs' (``[0, 1]`` where the input has none): ``hsig(x) = clip(x / 6 + 0.5, 0, 1)`` is monotonic."""
    out: dict[str, tuple[float, float]] = {}
    for n in model.graph.node:
        if n.op_type == "HardSigmoid" and n.output[0].endswith(HSIG_SUFFIX) and n.output[0] not in ranges:
            lo, hi = ranges.get(n.input[0], (-3.0, 3.0))
            out[n.output[0]] = (float(np.clip(lo / 6 + 0.5, 0, 1)), float(np.clip(hi / 6 + 0.5, 0, 1)))
    return out


def prune_initializers(model: Any) -> None:
    """Drop initializers and value_info entries no node or graph output uses any more, in place."""
    g = model.graph
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    produced = {o for n in g.node for o in n.output}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    vi = [v for v in g.value_info if v.name in produced]
    del g.value_info[:]
    g.value_info.extend(vi)


__all__ = ["HARDSWISH_OPS", "HSIG_SUFFIX", "fold_affine_into_next_conv", "fold_conv_affine", "hardswish_as_hardsigmoid", "has_hardswish_chain", "new_ranges",
           "prune_initializers"]

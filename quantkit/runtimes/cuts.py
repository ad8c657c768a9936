"""The sub-models localisation runs, and the graph questions it asks (:mod:`quantkit.runtimes.localize`).

:func:`cut_model`: everything a tensor depends on, with that tensor the only output (what the runtime compiles for
the full model, up to that tensor). :func:`local_model`: one node on its own, from the QuantizeLinear nodes of its
nearest quantized inputs to its output. :func:`quantized_tensors` / :func:`dq_scales` / :func:`origin` /
:func:`feeding_candidates`: which tensors are candidates, their steps, the node computing one, the candidates feeding it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def quantized_tensors(model: Any) -> list[str]:
    """Outputs of activation DequantizeLinear nodes (input produced by a QuantizeLinear) in topological order,
    then the graph outputs not already listed."""
    prod = {o: n for n in model.graph.node for o in n.output}
    out = [n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in prod
           and prod[n.input[0]].op_type == "QuantizeLinear"]
    seen = set(out)
    return out + [o.name for o in model.graph.output if o.name not in seen]


def dq_scales(model: Any) -> dict[str, float]:
    """``{DequantizeLinear output: largest |scale|}`` for scales stored as initializers."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    return {n.output[0]: float(np.max(np.abs(numpy_helper.to_array(inits[n.input[1]]))))
            for n in model.graph.node if n.op_type == "DequantizeLinear" and len(n.input) > 1 and n.input[1] in inits}


def origin(model: Any, tensor: str) -> tuple[str, str]:
    """``(node name, op type)`` that computes ``tensor``, looking through a QuantizeLinear/DequantizeLinear pair."""
    prod = {o: n for n in model.graph.node for o in n.output}
    node = prod.get(tensor)
    if node is not None and node.op_type == "DequantizeLinear" and node.input[0] in prod and prod[node.input[0]].op_type == "QuantizeLinear":
        q = prod[node.input[0]]
        node = prod.get(q.input[0], q)
    if node is None:
        return tensor, "input"
    return node.name or node.output[0], node.op_type


def cut_model(model: Any, outputs: Sequence[str]) -> Any:
    """The sub-model of ``model`` that computes ``outputs`` from the graph inputs: the nodes they depend on (in
    the original order), the initializers and graph inputs those use; what ``onnx.utils.extract_model`` does,
    without needing shape information for the cut tensors."""
    import onnx

    g = model.graph
    nodes, seen = _upstream(g, outputs, set())
    used = {x for n in nodes for x in list(n.input) + _subgraph_inputs(n)}
    known = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    outs = [known[o] if o in known and known[o].type.tensor_type.elem_type else onnx.ValueInfoProto(name=o) for o in outputs]
    graph = onnx.helper.make_graph(nodes, f"{g.name}_cut", [i for i in g.input if i.name in used or i.name in outputs], outs,
                                   [t for t in g.initializer if t.name in used],
                                   value_info=[v for v in g.value_info if v.name in seen and v.name not in outputs])
    m = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    m.ir_version = model.ir_version
    return m


def _upstream(g: Any, tensors: Sequence[str], stop: set[str]) -> tuple[list[Any], set[str]]:
    """``(nodes in graph order, tensors reached)``: every node that ``tensors`` depend on, not walking past ``stop``."""
    prod = {o: n for n in g.node for o in n.output}
    index = {id(n): i for i, n in enumerate(g.node)}
    keep: set[int] = set()
    stack, seen = list(tensors), set()
    while stack:
        t = stack.pop()
        if t in seen or t in stop or t not in prod:
            continue
        seen.add(t)
        n = prod[t]
        keep.add(index[id(n)])
        stack.extend(x for x in list(n.input) + _subgraph_inputs(n) if x)
    return [n for i, n in enumerate(g.node) if i in keep], seen


def _subgraph_inputs(node: Any) -> list[str]:
    """Names used inside a node's subgraphs (If / Loop / Scan bodies may read outer-scope tensors)."""
    out: list[str] = []
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                out.extend(n.input)
                out.extend(_subgraph_inputs(n))
    return out


def local_model(model: Any, tensor: str, feeding: Sequence[str], values: Mapping[str, np.ndarray]) -> tuple[Any, dict[str, str]]:
    """The sub-model computing ``tensor`` from its ``feeding`` candidate tensors: for each that is ``DQ(Q(u))`` the
    QuantizeLinear's input ``u`` becomes a graph input (fed the simulation's value of the candidate, which lies on the
    step grid, so the target requantizes the simulation's codes exactly); a feeding tensor without a
    QuantizeLinear/DequantizeLinear pair becomes a graph input itself. Paths that reach no feeding tensor keep their
    nodes back to the model's own inputs.

    Args:
        values: the reference's values of the feeding tensors (their shapes and dtypes type the new inputs).

    Returns:
        ``(onnx.ModelProto, {graph input: feeding tensor whose value it takes})``; the model's own inputs it still
        reads are graph inputs too, fed from the bound feed.
    """
    import onnx

    g = model.graph
    prod = {o: n for n in g.node for o in n.output}
    boundary: dict[str, str] = {}
    for c in feeding:
        dq = prod.get(c)
        q = prod.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        boundary[q.input[0] if q is not None and q.op_type == "QuantizeLinear" else c] = c
    nodes, _ = _upstream(g, [tensor], set(boundary))
    used = {x for n in nodes for x in list(n.input) + _subgraph_inputs(n)}
    inputs = {u: c for u, c in boundary.items() if u in used}
    new = [onnx.helper.make_tensor_value_info(u, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(values[c]).dtype), list(np.shape(values[c])))
           for u, c in inputs.items()]
    graph = onnx.helper.make_graph(nodes, f"{g.name}_local", new + [i for i in g.input if i.name in used and i.name not in inputs],
                                   [onnx.ValueInfoProto(name=tensor)], [t for t in g.initializer if t.name in used])
    m = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    m.ir_version = model.ir_version
    return m, inputs


def feeding_candidates(model: Any, tensor: str, cands: set[str]) -> list[str]:
    """The candidate tensors nearest upstream of the node computing ``tensor`` (walking back through
    non-candidate tensors such as QuantizeLinear outputs, Relu, Reshape)."""
    prod = {o: n for n in model.graph.node for o in n.output}
    node, _ = origin(model, tensor)
    start = next((n for n in model.graph.node if (n.name or n.output[0]) == node), None)
    if start is None:
        return []
    out: list[str] = []
    stack, seen = list(start.input), set()
    while stack:
        t = stack.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        if t in cands and t != tensor:
            out.append(t)
        elif t in prod:
            stack.extend(prod[t].input)
    return out

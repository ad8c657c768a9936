"""The graph as the fallback sees it: node names, node order, what a promoted set of nodes costs.

* :func:`named_copy`: ORT's ``nodes_to_exclude`` and the fallback's results name nodes, so every node
  needs a name. Unnamed nodes get ``<op_type>_<index>`` (index in graph order; a suffix ``_2``, ``_3``
  ... where that name is taken), the same on every run for the same graph.
* :func:`transitions`: every edge between a float node and a quantized one costs a Q or DQ conversion at
  run time; the count is what the search weighs against the number of float nodes (contiguous islands
  have fewer edges than scattered nodes).
* :func:`islands`: maximal runs of promoted nodes in graph order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...modelio import fresh_name


def named_copy(model: Any) -> tuple[Any, int]:
    """A copy of ``model`` (``onnx.ModelProto``) in which every node has a unique, deterministic name.

    Returns:
        ``(model, renamed)``: the model itself when every node already has a name (``renamed == 0``),
        else a copy whose unnamed nodes are named ``<op_type>_<index>``.
    """
    missing = [i for i, n in enumerate(model.graph.node) if not n.name]
    if not missing:
        return model, 0
    m = type(model)()
    m.CopyFrom(model)
    taken = {n.name for n in m.graph.node if n.name}
    for i in missing:
        n = m.graph.node[i]
        name = fresh_name(f"{n.op_type}_{i}", taken)
        n.name = name
        taken.add(name)
    return m, len(missing)


def check_names(model: Any) -> list[str]:
    """Node names in graph order.

    Raises:
        ModelError: two nodes share a name (ORT's exclusion by name would hit both); name them apart.
    """
    from ...errors import ModelError

    names = [n.name for n in model.graph.node]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ModelError(f"node name {n!r} is used twice in the graph; fallback excludes nodes by name, so give them unique names")
        seen.add(n)
    return names


def transitions(model: Any, promoted: Iterable[str]) -> int:
    """Edges between a promoted (float or 16-bit) node and a node that stays 8-bit: tensors produced on one
    side and consumed on the other, each counted once per consuming node. Graph inputs and outputs and
    initializers are not edges."""
    kept = set(promoted)
    producer = {o: n.name for n in model.graph.node for o in n.output}
    count = 0
    for n in model.graph.node:
        for t in n.input:
            p = producer.get(t)
            if p is not None and (p in kept) != (n.name in kept):
                count += 1
    return count


def islands(order: Sequence[str], promoted: Iterable[str]) -> list[tuple[int, int]]:
    """Maximal runs ``[start, end)`` of promoted nodes, as indices into ``order`` (graph order)."""
    kept = set(promoted)
    runs: list[tuple[int, int]] = []
    start = None
    for i, name in enumerate(order):
        if name in kept and start is None:
            start = i
        elif name not in kept and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(order)))
    return runs


def promote_tensors(model: Any, nodes: Iterable[str]) -> list[str]:
    """Activation tensors (inputs and outputs, no initializers) of ``nodes``, sorted: what a 16-bit
    promotion widens."""
    inits = {i.name for i in model.graph.initializer}
    want = set(nodes)
    return sorted({t for n in model.graph.node if n.name in want for t in (*n.input, *n.output) if t and t not in inits})


def nodes_of_tensors(model: Any, tensors: Iterable[str]) -> list[str]:
    """Producers and consumers of ``tensors``: the nodes a float promotion of those tensors excludes."""
    want = set(tensors)
    return sorted({n.name for n in model.graph.node if want & {*n.input, *n.output}})


__all__ = ["check_names", "islands", "named_copy", "nodes_of_tensors", "promote_tensors", "transitions"]

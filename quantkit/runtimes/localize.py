"""Name the first tensor where a target runtime diverges, without changing what it compiles for the model.

Marking every intermediate tensor as an output changes what a fusing runtime compiles (OpenVINO's CPU plugin
breaks its fusions; ORT's QDQ fusions stop at an exposed tensor), so the divergence seen that way is not the
unmodified model's. Instead the graph is **cut**: the cut (:func:`cut_model`, as ``onnx.utils.extract_model``) keeps only the nodes a
tensor depends on and makes that tensor the only output, so the runtime compiles the same subgraph as in the full
model, up to that tensor. Candidate tensors are the model's quantized activations (the outputs of
activation DequantizeLinear nodes) in topological order, then the graph outputs.

:func:`localize` bisects over the candidates: a cut diverges when more than ``max_mismatch`` of the
compared elements are more than ``tolerance`` (the tensor's quantization step times ``tolerance_steps``) off
the reference. It assumes that a divergence persists downstream, and then checks it: the candidate tensors
feeding the named node are cut too, and if one of them already diverges the search continues before it.
Finally the unmodified model runs on the target and its outputs are compared with the reference (the
confirmation). Each cut costs one model compilation; about ``log2(candidates) + inputs`` cuts in all.

The reference is either another runtime on the same cuts (:class:`RuntimeReference`, e.g. ORT's QDQ
simulation on the desktop) or stored values (:class:`StoredReference`, a bundle's golden activations sampled
at fixed flat indices).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import ModelError
from . import make_runtime

log = logging.getLogger(__name__)

Target = Callable[[Any, Sequence[str]], dict[str, np.ndarray]]
"""Runs a (cut) ``onnx.ModelProto`` once on the target and returns the named outputs."""


class Reference(Protocol):
    def values(self, tensors: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        """``{tensor: (reference values, flat indices they sit at or None for the whole tensor)}``."""


@dataclasses.dataclass(frozen=True)
class TensorCheck:
    """Target vs reference on one tensor: ``max_steps`` (worst element, in quantization steps of the tensor),
    ``mismatch`` (share of compared elements beyond the tolerance), ``n`` elements compared."""

    tensor: str
    max_steps: float
    mismatch: float
    n: int
    diverged: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first tensor where the target diverges, the node that produces it, and the evidence.

    tensor / node / op_type: the tensor (a DequantizeLinear output or a graph output) and the compute node it comes
    from (looking through its QuantizeLinear/DequantizeLinear pair). at: the cut's :class:`TensorCheck`.
    inputs: the checks of the candidate tensors feeding that node (all agree when the divergence starts there).
    outputs: the unmodified model's graph outputs on the target vs the reference (the confirmation).
    cuts: cut models compiled. unobservable: candidate tensors whose cut the target could not compile (skipped).
    """

    tensor: str
    node: str
    op_type: str
    at: TensorCheck
    inputs: tuple[TensorCheck, ...]
    outputs: tuple[TensorCheck, ...]
    cuts: int
    unobservable: tuple[str, ...] = ()

    @property
    def confirmed(self) -> bool:
        """True when the inputs of the node agree and the unmodified model's outputs diverge too."""
        return not any(i.diverged for i in self.inputs) and any(o.diverged for o in self.outputs)

    def describe(self) -> str:
        ins = f"its inputs agree (worst {max((i.max_steps for i in self.inputs), default=0):.1f} steps)" if not any(i.diverged for i in self.inputs) \
            else "an input diverges too (bisection assumption broken)"
        outs = ", ".join(f"{o.tensor} {100 * o.mismatch:.2f}% off" for o in self.outputs)
        return (f"first diverging tensor {self.tensor!r} from {self.op_type} {self.node!r}: {100 * self.at.mismatch:.1f}% of elements "
                f"more than the tolerance off (worst {self.at.max_steps:.1f} steps); {ins}; unmodified model outputs: {outs} "
                f"({self.cuts} cut models)")

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "node": self.node, "op_type": self.op_type, "at": self.at.to_dict(),
                "inputs": [i.to_dict() for i in self.inputs], "outputs": [o.to_dict() for o in self.outputs],
                "cuts": self.cuts, "unobservable": list(self.unobservable), "confirmed": self.confirmed}


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


def compare_tensor(name: str, got: np.ndarray, ref: np.ndarray, idx: np.ndarray | None, tolerance: float, max_mismatch: float) -> TensorCheck:
    """Target values ``got`` (whole tensor) vs ``ref`` (at flat indices ``idx``, or the whole tensor)."""
    flat = np.asarray(got, np.float64).reshape(-1)
    r = np.asarray(ref, np.float64).reshape(-1)
    if idx is not None:
        if idx.size and int(idx.max()) >= flat.size:
            return TensorCheck(name, float("inf"), 1.0, int(r.size), True)
        flat = flat[idx]
    if flat.shape != r.shape:
        return TensorCheck(name, float("inf"), 1.0, int(r.size), True)
    err = np.abs(flat - r)
    tol = tolerance if tolerance > 0 else 1e-12
    steps = err / tol
    bad = ~np.isfinite(steps) | (steps > 1 + 1e-3)
    mismatch = float(bad.mean()) if bad.size else 0.0
    worst = float(np.nanmax(steps)) if steps.size else 0.0
    return TensorCheck(name, worst, mismatch, int(r.size), mismatch > max_mismatch)


class StoredReference:
    """Reference values stored in advance, e.g. a bundle's golden activations: ``{tensor: (values, indices)}``."""

    def __init__(self, stored: Mapping[str, tuple[np.ndarray, np.ndarray | None]]) -> None:
        self.stored = dict(stored)

    def values(self, tensors: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        return {t: self.stored[t] for t in tensors if t in self.stored}


class RuntimeReference:
    """A reference runtime run on the same cut models (e.g. ``onnxruntime`` at level ``disable``)."""

    def __init__(self, model: Any, feed: Mapping[str, np.ndarray], runtime: str = "onnxruntime", **options: Any) -> None:
        self.model, self.feed, self.runtime, self.options = model, dict(feed), runtime, options
        self.cache: dict[str, np.ndarray] = {}

    def values(self, tensors: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        need = [t for t in tensors if t not in self.cache]
        if need:
            self.cache.update(run_cut(self.model, need, self.feed, self.runtime, **self.options))
        return {t: (self.cache[t], None) for t in tensors if t in self.cache}


def cut_model(model: Any, outputs: Sequence[str]) -> Any:
    """The sub-model of ``model`` that computes ``outputs`` from the graph inputs: the nodes they depend on (in
    the original order), the initializers and graph inputs those use; what ``onnx.utils.extract_model`` does,
    without needing shape information for the cut tensors."""
    import onnx

    g = model.graph
    prod = {o: n for n in g.node for o in n.output}
    keep: set[int] = set()
    index = {id(n): i for i, n in enumerate(g.node)}
    stack, seen = list(outputs), set()
    while stack:
        t = stack.pop()
        if t in seen or t not in prod:
            continue
        seen.add(t)
        n = prod[t]
        keep.add(index[id(n)])
        stack.extend(x for x in list(n.input) + _subgraph_inputs(n) if x)
    nodes = [n for i, n in enumerate(g.node) if i in keep]
    used = {x for n in nodes for x in list(n.input) + _subgraph_inputs(n)}
    known = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    outs = [known[o] if o in known and known[o].type.tensor_type.elem_type else onnx.ValueInfoProto(name=o) for o in outputs]
    graph = onnx.helper.make_graph(nodes, f"{g.name}_cut", [i for i in g.input if i.name in used or i.name in outputs], outs,
                                   [t for t in g.initializer if t.name in used],
                                   value_info=[v for v in g.value_info if v.name in seen and v.name not in outputs])
    m = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    m.ir_version = model.ir_version
    return m


def _subgraph_inputs(node: Any) -> list[str]:
    """Names used inside a node's subgraphs (If / Loop / Scan bodies may read outer-scope tensors)."""
    out: list[str] = []
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                out.extend(n.input)
                out.extend(_subgraph_inputs(n))
    return out


def run_cut(model: Any, outputs: Sequence[str], feed: Mapping[str, np.ndarray], runtime: str, **options: Any) -> dict[str, np.ndarray]:
    """Cut ``model`` at ``outputs`` and run it once on ``runtime``."""
    cut = cut_model(model, outputs)
    names = {i.name for i in cut.graph.input}
    with make_runtime(runtime, cut, name=f"cut at {outputs[0]!r}", **options) as rt:
        return rt.infer({k: v for k, v in feed.items() if k in names}, list(outputs))


def localize(model: Any, feed: Mapping[str, np.ndarray], target: Target, reference: Reference, *, tolerance: Mapping[str, float],
             max_mismatch: float, candidates: Sequence[str] | None = None) -> Divergence | None:
    """Bisect over ``candidates`` (default :func:`quantized_tensors`) for the first tensor where ``target`` diverges
    from ``reference`` (module docstring). Returns None when the last candidate (a graph output) does not diverge.

    Args:
        model: the unmodified ``onnx.ModelProto``.
        feed: one input (the one whose outputs disagreed).
        target: runs a cut model on the target runtime (:func:`bound_target`).
        reference: reference values per tensor.
        tolerance: ``{tensor: allowed absolute difference}`` (missing tensors: exact).
        max_mismatch: share of elements allowed beyond the tolerance.
    """
    cands = [c for c in (candidates or quantized_tensors(model))]
    checks: dict[str, TensorCheck] = {}
    unobservable: set[str] = set()
    cuts = 0

    def check(names: Sequence[str]) -> list[TensorCheck]:
        """Checks of ``names`` (cached); a cut the target cannot compile makes its tensors unobservable."""
        nonlocal cuts
        need = [n for n in names if n not in checks and n not in unobservable]
        refs = reference.values(need)
        need = [n for n in need if n in refs]
        if need:
            try:
                got = target(cut_model(model, need), need)
            except ModelError as e:  # e.g. OpenVINO: "FQ stripping failed" on a cut ending in a bare Q/DQ pair
                log.info("cut at %s cannot be compiled on the target (%s); skipped", need, e)
                if len(need) > 1:
                    for n in need:
                        check([n])
                    return [checks[n] for n in names if n in checks]
                unobservable.add(need[0])
                return []
            cuts += 1
            for n in need:
                ref, idx = refs[n]
                checks[n] = compare_tensor(n, got[n], ref, idx, tolerance.get(n, 0.0), max_mismatch)
        return [checks[n] for n in names if n in checks]

    usable = set(reference.values(cands))
    cands = [c for c in cands if c in usable]
    last = check(cands[-1:]) if cands else []
    if not last or not last[0].diverged:
        return None
    lo, hi = -1, len(cands) - 1
    for _ in range(len(cands)):  # bisection, then back off while an input of the found node already diverges
        while hi - lo > 1:
            mid = (lo + hi) // 2
            got_mid = check([cands[mid]])
            if not got_mid:  # unobservable on the target: drop it and bisect the rest
                cands.pop(mid)
                hi -= 1
                continue
            if got_mid[0].diverged:
                hi = mid
            else:
                lo = mid
        feeding = [c for c in _feeding_candidates(model, cands[hi], set(cands)) if cands.index(c) < hi]
        bad = [c for c in check(feeding) if c.diverged]
        if not bad:
            break
        hi, lo = min(cands.index(c.tensor) for c in bad), -1
    tensor = cands[hi]
    node, op = origin(model, tensor)
    outputs = [o.name for o in model.graph.output]
    full = target(model, outputs)
    refs = reference.values(outputs)
    outs = tuple(compare_tensor(o, full[o], *refs[o], tolerance.get(o, 0.0), max_mismatch) for o in outputs if o in refs)
    inputs = tuple(checks[c] for c in _feeding_candidates(model, tensor, set(cands)) if c in checks)
    return Divergence(tensor, node, op, checks[tensor], inputs, outs, cuts, tuple(sorted(unobservable)))


def _feeding_candidates(model: Any, tensor: str, cands: set[str]) -> list[str]:
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


def bound_target(runtime: str, feed: Mapping[str, np.ndarray], **options: Any) -> Target:
    """A :data:`Target` running each (cut) model once on ``runtime`` with ``options`` and ``feed``."""
    def run(model: Any, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        names = {i.name for i in model.graph.input}
        rt = make_runtime(runtime, model, name=f"{runtime} cut", **options)
        rt.cache_compiled = False  # each cut model runs once
        with rt:
            return rt.infer({k: v for k, v in feed.items() if k in names}, list(outputs))
    return run

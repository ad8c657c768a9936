"""Name the first node where a target runtime diverges from the QDQ simulation, and the tensor it writes.

A node is judged **on its own** first (:func:`local_model`): the sub-model from the QuantizeLinear nodes of its
nearest quantized inputs to its quantized output, fed the simulation's values of those inputs, so the target
requantizes exactly the simulation's input codes and any difference in its output is the node's own. It diverges by
the rule of :mod:`quantkit.runtimes.divergence`: more than ``MAX_CODE_SHARE`` of its output codes differ (even by
one), or more than ``max_mismatch`` of its elements are beyond the tolerance. The first node in topological order
that diverges is named, so a Resize that moves one code on 6% of its elements is named, not the Conv after it that
amplifies them into several steps. Every quantized tensor is checked this way (about 300 small models for the demo
detectors, 5-6 s per runtime on 2 cores), so the other nodes that differ on their own are listed too.

Where no node diverges on its own (the parting grows from one-code differences of many layers, or from fusions across
quantized nodes) the graph is **cut** instead: the cut (:func:`cut_model`, as ``onnx.utils.extract_model``) keeps
only the nodes a tensor depends on and makes that tensor the only output, so the runtime compiles the same subgraph
as in the full model, up to that tensor (marking every tensor as an output would change what a fusing runtime
compiles: OpenVINO's CPU plugin breaks its fusions; ORT's QDQ fusions stop at an exposed tensor). The cuts are
bisected for the first tensor that diverges in context by the same rule, assuming a divergence persists downstream
and checking it: the candidate tensors feeding the named node are cut too, and if one already diverges the search
continues before it. About ``log2(candidates) + inputs`` cuts in all. Localisation starts only when the last
candidate (a graph output) is beyond the tolerance on more than ``max_mismatch`` of its elements: one-code
differences alone do not make outputs part. Candidate tensors are the model's quantized
activations (the outputs of activation DequantizeLinear nodes) in topological order, then the graph outputs.
Either way the unmodified model then runs on the target and its outputs are compared with the reference (the
confirmation).

The reference is either another runtime (:class:`RuntimeReference`, e.g. ORT's QDQ simulation on the desktop,
which also feeds the nodes judged on their own) or stored values (:class:`StoredReference`, a bundle's golden
activations sampled at fixed flat indices). With stored values a ``simulation`` run here feeds the nodes judged on
their own (they need whole tensors); its values are checked against the stored ones first, and nodes are judged on
their own only up to the first tensor where they differ (a changed model file, another runtime version). Without
one, cuts only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import ModelError
from . import make_runtime
from .cuts import cut_model, dq_scales, feeding_candidates, local_model, origin, quantized_tensors
from .divergence import MAX_CODE_SHARE, TensorCheck, compare_tensor

__all__ = ["Divergence", "MAX_CODE_SHARE", "Reference", "RuntimeReference", "StoredReference", "Target", "TensorCheck", "bound_target",
           "compare_tensor", "cut_model", "dq_scales", "feeding_candidates", "local_model", "localize", "origin", "quantized_tensors", "run_cut"]

log = logging.getLogger(__name__)

_CHUNK = 32  # nodes judged on their own per reference run (bounds the simulation's values held at once)


class Target(Protocol):
    def __call__(self, model: Any, outputs: Sequence[str], extra: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run a (cut or local) ``onnx.ModelProto`` once on the target and return the named outputs; ``extra`` adds
        inputs to the bound feed (a local model's inputs)."""


class Reference(Protocol):
    def values(self, tensors: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        """``{tensor: (reference values, flat indices they sit at or None for the whole tensor)}``."""

    def available(self, tensors: Sequence[str]) -> set[str]:
        """The tensors of ``tensors`` it has values for (without computing them)."""


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first node where the target diverges, the tensor it writes, and the evidence.

    tensor / node / op_type: the tensor (a DequantizeLinear output or a graph output) and the compute node it comes
    from (looking through its QuantizeLinear/DequantizeLinear pair). alone: True when the node diverges on its own
    (fed the simulation's inputs; module docstring), False when found on cuts. at: that :class:`TensorCheck` (the
    node on its own, or the cut). context: the other view of the same tensor (the cut when ``alone``, the node on its
    own otherwise; None when not checked).
    inputs: the checks of the candidate tensors feeding that node (all agree when the divergence starts there).
    outputs: the unmodified model's graph outputs on the target vs the reference (the confirmation).
    others: the other nodes' tensors that diverge on their own, in topological order. simulation_differs: the first
    tensor where the simulation feeding the nodes on their own differs from the reference (nodes after it were not
    judged on their own), or None.
    cuts: models compiled (cuts and local models). unobservable: candidates the target could not compile (skipped).
    """

    tensor: str
    node: str
    op_type: str
    at: TensorCheck
    inputs: tuple[TensorCheck, ...]
    outputs: tuple[TensorCheck, ...]
    cuts: int
    unobservable: tuple[str, ...] = ()
    alone: bool = False
    context: TensorCheck | None = None
    others: tuple[TensorCheck, ...] = ()
    simulation_differs: str | None = None

    @property
    def confirmed(self) -> bool:
        """True when the inputs of the node agree and the unmodified model's outputs diverge too."""
        return not any(i.diverged for i in self.inputs) and any(o.diverged for o in self.outputs)

    def describe(self) -> str:
        """One line: the node, how its codes differ, the outputs, the other nodes that differ on their own."""
        outs = ", ".join(f"{o.tensor} {100 * o.mismatch:.2f}% off" for o in self.outputs)
        head = f"first diverging tensor {self.tensor!r} from {self.op_type} {self.node!r}"
        if self.alone:
            c = self.context
            ctx = "" if c is None else f"; in the model up to it {_codes(c)}"
            more = ", ".join(f"{o.tensor} {_codes(o, short=True)}" for o in self.others[:3]) + (f" (+{len(self.others) - 3})" if len(self.others) > 3 else "")
            return (f"{head}, on its own: fed the simulation's inputs, {_codes(self.at)}{ctx}; unmodified model outputs: {outs}"
                    + (f"; also differing on their own: {more}" if more else "") + f" ({self.cuts} models compiled)")
        hidden = f", or at a tensor not compiled alone ({', '.join(self.unobservable[:3])})" if self.unobservable else ""
        ins = "" if not self.inputs else f"; its inputs agree (worst {max(i.max_steps for i in self.inputs):.1f} steps)" \
            if not any(i.diverged for i in self.inputs) else "; an input diverges too (bisection assumption broken)"
        if self.simulation_differs is not None:
            why = (f"; the simulation here differs from the reference at {self.simulation_differs!r} (another model file or runtime "
                   f"version), so nodes from there on were not judged on their own")
        elif self.context is not None:
            why = (f"; no node differs on its own (this one: {_codes(self.context, short=True)} of its codes), so the codes part over "
                   f"several nodes before it{hidden}")
        else:
            why = ""
        return (f"{head}: in the model up to it {_codes(self.at)}, {100 * self.at.mismatch:.1f}% of elements more than the tolerance off"
                f"{ins}{why}; unmodified model outputs: {outs} ({self.cuts} models compiled)")

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "node": self.node, "op_type": self.op_type, "at": self.at.to_dict(),
                "inputs": [i.to_dict() for i in self.inputs], "outputs": [o.to_dict() for o in self.outputs],
                "cuts": self.cuts, "unobservable": list(self.unobservable), "confirmed": self.confirmed, "alone": self.alone,
                "context": self.context.to_dict() if self.context else None, "others": [o.to_dict() for o in self.others],
                "simulation_differs": self.simulation_differs}


def _codes(c: TensorCheck, short: bool = False) -> str:
    """``6.0% of codes differ (worst 1.0 steps)`` for a check with a step, else the share beyond the tolerance."""
    if c.code_share is None:
        return f"{100 * c.mismatch:.1f}% beyond the tolerance"
    if short:
        return f"{100 * c.code_share:.1f}%"
    return f"{100 * c.code_share:.1f}% of its codes differ from the simulation's (worst {c.max_steps:.1f} steps)"


class StoredReference:
    """Reference values stored in advance, e.g. a bundle's golden activations: ``{tensor: (values, indices)}``."""

    def __init__(self, stored: Mapping[str, tuple[np.ndarray, np.ndarray | None]]) -> None:
        self.stored = dict(stored)

    def values(self, tensors: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        return {t: self.stored[t] for t in tensors if t in self.stored}

    def available(self, tensors: Sequence[str]) -> set[str]:
        return {t for t in tensors if t in self.stored}


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

    def available(self, tensors: Sequence[str]) -> set[str]:
        made = {o for n in self.model.graph.node for o in n.output} | {i.name for i in self.model.graph.input}
        return {t for t in tensors if t in made}

    def clear(self) -> None:
        """Forget the values computed so far (they are computed again when asked for)."""
        self.cache.clear()


def run_cut(model: Any, outputs: Sequence[str], feed: Mapping[str, np.ndarray], runtime: str, **options: Any) -> dict[str, np.ndarray]:
    """Cut ``model`` at ``outputs`` and run it once on ``runtime``."""
    cut = cut_model(model, outputs)
    names = {i.name for i in cut.graph.input}
    with make_runtime(runtime, cut, name=f"cut at {outputs[0]!r}", **options) as rt:
        return rt.infer({k: v for k, v in feed.items() if k in names}, list(outputs))


def _alone(model: Any, target: Target, source: "RuntimeReference", reference: Reference, cands: Sequence[str], steps: Mapping[str, float],
           tolerance: Mapping[str, float], max_mismatch: float) -> tuple[dict[str, TensorCheck], list[str], int, str | None]:
    """Each quantized candidate's node on its own (:func:`local_model`), judged by the rule with codes, in topological
    order. Where ``source`` is not ``reference`` its values are first checked against the reference's; the scan stops
    at the first tensor where they differ (the simulation here is not the reference's: another model file or runtime).
    Returns ``(checks, unobservable, models compiled, that tensor or None)``."""
    cset = set(cands)
    order = [c for c in cands if c in steps]
    checks: dict[str, TensorCheck] = {}
    unobservable: list[str] = []
    runs = 0
    for start in range(0, len(order), _CHUNK):
        block = order[start:start + _CHUNK]
        feeding = {t: feeding_candidates(model, t, cset) for t in block}
        vals = {k: v for k, (v, _) in source.values(list(dict.fromkeys(block + [f for fs in feeding.values() for f in fs]))).items()}
        refs = reference.values(block) if reference is not source else {}
        for t in block:
            if t in refs and t in vals and compare_tensor(t, vals[t], *refs[t], tolerance.get(t, 0.0), max_mismatch, step=steps[t],
                                                          max_code_share=MAX_CODE_SHARE).diverged:
                source.clear()
                return checks, unobservable, runs, t
            if t not in vals or any(f not in vals for f in feeding[t]):
                continue
            sub, inputs = local_model(model, t, feeding[t], vals)
            try:
                got = target(sub, [t], {u: vals[c] for u, c in inputs.items()})
            except ModelError as e:  # e.g. a runtime that cannot compile this node alone
                log.info("%s alone cannot be compiled on the target (%s); skipped", t, e)
                unobservable.append(t)
                continue
            runs += 1
            checks[t] = compare_tensor(t, got[t], vals[t], None, tolerance.get(t, 0.0), max_mismatch, step=steps[t], max_code_share=MAX_CODE_SHARE)
        source.clear()
    return checks, unobservable, runs, None


def localize(model: Any, feed: Mapping[str, np.ndarray], target: Target, reference: Reference, *, tolerance: Mapping[str, float],
             max_mismatch: float, candidates: Sequence[str] | None = None, steps: Mapping[str, float] | None = None,
             simulation: "RuntimeReference | None" = None) -> Divergence | None:
    """The first node where ``target`` diverges from ``reference``: judged on its own, else found by bisecting cuts
    over ``candidates`` (default :func:`quantized_tensors`; module docstring). Returns None when the last candidate
    (a graph output) does not diverge in context.

    Args:
        model: the unmodified ``onnx.ModelProto``.
        feed: one input (the one whose outputs disagreed).
        target: runs a cut or local model on the target runtime (:func:`bound_target`).
        reference: reference values per tensor.
        tolerance: ``{tensor: allowed absolute difference}`` (missing tensors: exact).
        max_mismatch: share of elements allowed beyond the tolerance.
        steps: ``{tensor: quantization step}`` (default :func:`dq_scales`): the tensors judged on their own.
        simulation: whole-tensor values for the nodes judged on their own (default ``reference`` when it is a
            :class:`RuntimeReference`; with neither, cuts only).
    """
    cands = [c for c in (candidates or quantized_tensors(model))]
    steps = dq_scales(model) if steps is None else dict(steps)
    checks: dict[str, TensorCheck] = {}
    unobservable: set[str] = set()
    cuts = 0

    def check(names: Sequence[str]) -> list[TensorCheck]:
        """Checks in context of ``names`` (cached); a cut the target cannot compile makes its tensors unobservable."""
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
                checks[n] = compare_tensor(n, got[n], ref, idx, tolerance.get(n, 0.0), max_mismatch, step=steps.get(n),
                                           max_code_share=MAX_CODE_SHARE)
        return [checks[n] for n in names if n in checks]

    usable = reference.available(cands)
    cands = [c for c in cands if c in usable]
    last = check(cands[-1:]) if cands else []
    if not last or last[0].mismatch <= max_mismatch:  # the parting itself is judged by the tolerance (module docstring)
        return None
    source = simulation if simulation is not None else reference if isinstance(reference, RuntimeReference) else None
    alone, skipped, runs, stopped = _alone(model, target, source, reference, cands, steps, tolerance, max_mismatch) \
        if source is not None else ({}, [], 0, None)
    unobservable.update(skipped)
    first = next((c for c in cands if c in alone and alone[c].diverged), None)
    if first is not None:
        tensor, at = first, alone[first]
        context = (check([first]) or [None])[0]
        inputs = tuple(alone[c] for c in feeding_candidates(model, first, set(cands)) if c in alone)
        others = tuple(alone[c] for c in cands if c in alone and alone[c].diverged and c != first)
    else:
        tensor = _bisect(model, cands, check)
        at, context, others = checks[tensor], alone.get(tensor), ()  # context: here the node on its own
        inputs = tuple(checks[c] for c in feeding_candidates(model, tensor, set(cands)) if c in checks)
    node, op = origin(model, tensor)
    outputs = [o.name for o in model.graph.output]
    full = target(model, outputs)
    refs = reference.values(outputs)
    outs = tuple(compare_tensor(o, full[o], *refs[o], tolerance.get(o, 0.0), max_mismatch, step=steps.get(o)) for o in outputs if o in refs)
    return Divergence(tensor, node, op, at, inputs, outs, cuts + runs, tuple(sorted(unobservable)), first is not None, context, others, stopped)


def _bisect(model: Any, cands: list[str], check: Callable[[Sequence[str]], list[TensorCheck]]) -> str:
    """The first candidate that diverges in context, by bisection over cuts (the last one diverges); then backs off
    while a candidate feeding the found node already diverges. Drops unobservable candidates from ``cands``."""
    lo, hi = -1, len(cands) - 1
    for _ in range(len(cands)):
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
        feeding = [c for c in feeding_candidates(model, cands[hi], set(cands)) if cands.index(c) < hi]
        bad = [c for c in check(feeding) if c.diverged]
        if not bad:
            break
        hi, lo = min(cands.index(c.tensor) for c in bad), -1
    return cands[hi]


def bound_target(runtime: str, feed: Mapping[str, np.ndarray], **options: Any) -> Target:
    """A :class:`Target` running each (cut or local) model once on ``runtime`` with ``options`` and ``feed``."""
    def run(model: Any, outputs: Sequence[str], extra: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        names = {i.name for i in model.graph.input}
        rt = make_runtime(runtime, model, name=f"{runtime} cut", **options)
        rt.cache_compiled = False  # each cut model runs once
        with rt:
            return rt.infer({k: v for k, v in {**feed, **(extra or {})}.items() if k in names}, list(outputs))
    return run

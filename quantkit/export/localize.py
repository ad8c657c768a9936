"""Where an exported graph starts to compute differently from PyTorch, submodule by submodule.

:func:`localize` runs the module once with forward hooks on every submodule (each output copied as it is
produced, in the order the submodules finish), maps each submodule to the ONNX tensors that leave its scope,
runs ONNX Runtime with those tensors exposed as graph outputs (:func:`quantkit.runner.with_outputs`:
Polygraphy's "mark tensors as outputs"), and compares them in execution order. The first submodule whose
output differs is to blame unless its input already differs (captured with forward pre-hooks and compared
with the tensors entering its scope): then the code of its parent's forward that ran between is
(:class:`Divergence`).

Mapping: the TorchScript exporter keeps each module's scope in node names (``/backbone/features.3/se/Mul``,
one path component per called module, named relative to the nearest enclosing module that is not a
container). :func:`node_scopes` resolves each component against ``named_modules()`` instead of assuming the
rule. A submodule's candidate tensors are those produced inside its scope and consumed outside it (or graph
outputs); each of its output tensors is compared with the candidates of the same element count and the
closest one is kept, so a submodule is only called divergent when no tensor leaving its scope matches.

The graph compared is exported again with ``training=TrainingMode.PRESERVE`` (the module stays in eval
mode): the eval-mode export folds BatchNormalization into the preceding Conv, which would make the Conv's
ONNX output differ from its PyTorch output for no fault of the exporter. :attr:`Localization.reproduced`
says whether that graph still differs at the outputs.

Submodules with no tensor of their own in the graph (fused, constant-folded, ``Identity``/``Dropout``, or
called more than once) are listed in :attr:`Localization.unmapped` and skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np


def array_diff(onnx_value: Any, torch_value: Any, atol: float, rtol: float) -> tuple[float, float, bool]:
    """``(max |a-b|, max |a-b| / max(|b|, 1e-6), all close)`` with ``b`` the PyTorch value, in float64.

    "Close" is ``numpy.isclose(a, b, rtol, atol, equal_nan=True)``: ``|a-b| <= atol + rtol*|b|``. An element
    where only one side is NaN counts as an infinite difference. Arrays of different shapes but the same
    size are compared in ``b``'s shape; arrays of different sizes are not close (difference ``inf``).
    """
    a, b = np.asarray(onnx_value, np.float64), np.asarray(torch_value, np.float64)
    if a.size != b.size:
        return float("inf"), float("inf"), False
    a = a.reshape(b.shape)
    if not a.size:
        return 0.0, 0.0, True
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    d = np.where(same, 0.0, np.where(np.isnan(d), np.inf, d))
    ok = bool(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())
    return float(d.max()), float((d / np.maximum(np.abs(np.nan_to_num(b)), 1e-6)).max()), ok


@dataclasses.dataclass(frozen=True)
class LayerDiff:
    """One submodule's output against the closest ONNX tensor leaving its scope. ``module`` is the qualified
    name (``''`` is the whole model), ``kind`` its class name, ``tensor`` the ONNX tensor(s) compared."""

    module: str
    kind: str
    tensor: str
    max_abs_diff: float
    max_rel_diff: float
    within_tolerance: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where the difference starts. ``module`` (qualified name, ``''`` = the whole model) is to blame:

    * ``where == "output"``: a module without mapped submodules whose inputs agree and whose output does not
      (the operator itself);
    * ``where == "own"``: the same for a module whose submodules all agree: its own forward code is to blame;
    * ``where == "before"``: its submodule ``before`` is the first whose output differs but that submodule's
      *input* already differs, so the code of ``module``'s own forward between them is to blame (e.g. an
      ``F.interpolate`` call); ``diff`` is then the difference of that input.
    """

    module: str
    kind: str
    where: Literal["output", "own", "before"]
    before: str
    diff: LayerDiff

    def describe(self) -> str:
        d = self.diff
        who = f"submodule {self.module} ({self.kind})" if self.module else f"the model's own forward ({self.kind})"
        if self.where == "own" and self.module:
            who += " in its own forward code (its submodules agree)"
        elif self.where == "before":
            who += ("" if not self.module else " in its own forward") + f", before it calls {self.before}"
        return f"first diverging {who}: max |diff| {d.max_abs_diff:.3g} on ONNX tensor {d.tensor!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "kind": self.kind, "where": self.where, "before": self.before, "diff": self.diff.to_dict()}


@dataclasses.dataclass(frozen=True)
class Localization:
    """Every mapped submodule in the order its forward finished (children before their parent), and the
    :class:`Divergence` (``None`` when no submodule output could be matched).

    ``reproduced`` is False when the graph exported for localisation (no BatchNorm folding) agrees with
    PyTorch at the outputs although the exported model did not: the difference then comes from the folding.
    """

    layers: tuple[LayerDiff, ...]
    unmapped: tuple[str, ...]
    reproduced: bool
    divergence: Divergence | None

    def describe(self) -> str:
        """One clause naming where the difference starts and its error (for one-line messages)."""
        if not self.reproduced:
            return ("the graph exported without folding BatchNormalization into Conv agrees with PyTorch, so the folding causes it; "
                    "raise export.atol/rtol or keep the BatchNorm apart in the model")
        if self.divergence is None:
            return "no submodule output could be matched to an ONNX tensor"
        return self.divergence.describe()

    def to_dict(self) -> dict[str, Any]:
        return {"reproduced": self.reproduced, "divergence": None if self.divergence is None else self.divergence.to_dict(),
                "layers": [layer.to_dict() for layer in self.layers], "unmapped": list(self.unmapped)}


def _resolve(components: Sequence[str], names: set[str]) -> str:
    """Qualified module name for a node's scope components (deepest one that resolves)."""
    cur = ""
    for comp in components:
        anc, found = cur, None
        while True:
            cand = f"{anc}.{comp}" if anc else comp
            if cand in names and (not cur or cand.startswith(cur + ".")):
                found = cand
                break
            if not anc:
                break
            anc = anc.rpartition(".")[0]
        if found is None:
            return cur
        cur = found
    return cur


def node_scopes(model: Any, module_names: set[str]) -> list[str]:
    """For each node of ``model.graph`` (in order), the qualified name of the module whose scope it is in
    (``''``: the root). Node names look like ``/scope/scope/OpType[_N]``."""
    out = []
    for node in model.graph.node:
        parts = node.name.split("/")
        out.append(_resolve([p for p in parts[1:-1] if p], module_names) if node.name.startswith("/") else "")
    return out


def scope_boundaries(model: Any, scopes: Sequence[str], module: str) -> list[str]:
    """Tensors produced by nodes inside ``module``'s scope and consumed outside it or output by the graph."""
    inside = [s == module or s.startswith(module + ".") for s in scopes]
    graph_out = {o.name for o in model.graph.output}
    outside_inputs: set[str] = set()
    for node, ins in zip(model.graph.node, inside):
        if not ins:
            outside_inputs.update(node.input)
    out: list[str] = []
    for node, ins in zip(model.graph.node, inside):
        if ins:
            out.extend(t for t in node.output if t and (t in outside_inputs or t in graph_out) and t not in out)
    return out


def scope_inputs(model: Any, scopes: Sequence[str], module: str) -> list[str]:
    """Tensors consumed inside ``module``'s scope that a node outside it produces, or graph inputs
    (initializers and constants excluded)."""
    inside = [s == module or s.startswith(module + ".") for s in scopes]
    produced_outside = {t for node, ins in zip(model.graph.node, inside) if not ins and node.op_type != "Constant" for t in node.output}
    produced_outside |= {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    out: list[str] = []
    for node, ins in zip(model.graph.node, inside):
        if ins:
            out.extend(t for t in node.input if t in produced_outside and t not in out)
    return out


Captured = tuple[str, str, list[np.ndarray], list[np.ndarray]]


def capture(module: Any, x: Any, flatten: Callable[[Any], list[Any]]) -> tuple[list[Captured], set[str]]:
    """Run ``module(x)`` with forward pre-hooks and hooks on every submodule.

    Returns:
        ``[(qualified name, class name, [input arrays], [output arrays])]`` in the order the submodules
        finished (first call only; arrays copied when seen, so later in-place ops do not change them), and
        the names of submodules called more than once.
    """
    import torch

    inputs: dict[str, list[np.ndarray]] = {}
    seen: dict[str, Captured] = {}
    repeated: set[str] = set()

    def arrays(value: Any) -> list[np.ndarray]:
        return [t.detach().cpu().numpy().copy() for t in flatten(value)]

    def pre(name: str) -> Callable[..., None]:
        def _h(mod: Any, args: Any) -> None:
            if name not in inputs:
                inputs[name] = arrays(list(args))
        return _h

    def post(name: str) -> Callable[..., None]:
        def _h(mod: Any, args: Any, output: Any) -> None:
            if name in seen:
                repeated.add(name)
            else:
                seen[name] = (name, type(mod).__name__, inputs[name], arrays(output))
        return _h

    handles = []
    for name, sub in module.named_modules():
        if name:
            handles += [sub.register_forward_pre_hook(pre(name)), sub.register_forward_hook(post(name))]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for h in handles:
            h.remove()
    return list(seen.values()), repeated


def _match(values: list[np.ndarray], cands: list[str], got: dict[str, np.ndarray], atol: float, rtol: float) -> list[tuple[tuple[float, float, bool], str]] | None:
    """For each value, the candidate tensor of the same size closest to it; ``None`` when one has no candidate."""
    out = []
    for value in values:
        best = min(((array_diff(got[t], value, atol, rtol), t) for t in cands if got[t].size == value.size), default=None, key=lambda p: p[0][0])
        if best is None:
            return None
        out.append(best)
    return out


def _layer(name: str, kind: str, matched: list[tuple[tuple[float, float, bool], str]]) -> LayerDiff:
    return LayerDiff(name, kind, ", ".join(t for _, t in matched), max(d[0] for d, _ in matched), max(d[1] for d, _ in matched), all(d[2] for d, _ in matched))


def _parent(name: str, hooked: set[str]) -> str:
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in hooked), "")


def localize(module: Any, x: np.ndarray, onnx_model: Any, reference: Sequence[np.ndarray], *, input_name: str,
             flatten: Callable[[Any], list[Any]], atol: float, rtol: float) -> Localization:
    """Compare every submodule of ``module`` with its tensors in ``onnx_model`` on input ``x``.

    Args:
        module: the ``torch.nn.Module`` (eval mode; not a TorchScript module: those run no hooks).
        x: the input array (``float32``, the model's fixed input shape).
        onnx_model: ``onnx.ModelProto`` exported with ``training=TrainingMode.PRESERVE`` (see module docstring).
        reference: PyTorch's outputs on ``x``, in graph output order.
        flatten: turns a module output (tensor, tuple, list, dict) into its list of tensors.
        atol, rtol: the rule of :func:`array_diff`.

    Raises:
        ModelError: ONNX Runtime cannot load the model with the tensors exposed.
    """
    import torch

    from ..runner import OrtRunner, with_outputs

    captured, repeated = capture(module, torch.from_numpy(x), flatten)
    names = {n for n, _ in module.named_modules() if n}
    scopes = node_scopes(onnx_model, names)
    outs = {c[0]: scope_boundaries(onnx_model, scopes, c[0]) for c in captured if c[0] not in repeated}
    ins = {c[0]: scope_inputs(onnx_model, scopes, c[0]) for c in captured if c[0] not in repeated}
    graph_outputs = [o.name for o in onnx_model.graph.output]
    exposed = sorted({t for ts in (*outs.values(), *ins.values()) for t in ts} - set(graph_outputs) - {input_name})
    with OrtRunner(with_outputs(onnx_model, exposed).SerializeToString(), name="localisation graph") as runner:
        got = runner.infer({input_name: x}, graph_outputs + exposed)
    got[input_name] = x
    finals = [array_diff(got[n], r, atol, rtol) + (n,) for n, r in zip(graph_outputs, reference)]
    layers, unmapped, first = [], sorted(repeated), None
    for name, kind, _, values in captured:
        matched = _match(values, outs.get(name, []), got, atol, rtol) if values and name not in repeated else None
        if matched is None:
            unmapped += [] if name in repeated else [name]
            continue
        layers.append(_layer(name, kind, matched))
        if first is None and not layers[-1].within_tolerance:
            first = (name, kind, layers[-1])
    reproduced = not all(d[2] for d in finals)
    kinds = {n: type(m).__name__ for n, m in module.named_modules()}
    divergence = None
    if first is not None:
        name, kind, diff = first
        inputs = next(c[2] for c in captured if c[0] == name)
        matched_in = _match(inputs, ins.get(name, []), got, atol, rtol) if inputs else None
        if matched_in is not None and not all(d[2] for d, _ in matched_in):
            parent = _parent(name, {c[0] for c in captured})
            divergence = Divergence(parent, kinds[parent], "before", name, _layer(parent, kinds[parent], matched_in))
        else:
            prefix = name + "."
            own = any(layer.module.startswith(prefix) for layer in layers)
            divergence = Divergence(name, kind, "own" if own else "output", "", diff)
    elif reproduced:
        worst = max(finals, key=lambda d: d[0])
        divergence = Divergence("", kinds[""], "own", "", LayerDiff("", kinds[""], worst[3], worst[0], worst[1], False))
    return Localization(tuple(layers), tuple(unmapped), reproduced, divergence)

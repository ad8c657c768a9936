"""Opset conversion that records, per node, where meaning can change, and verifies numerically.

Conversion itself is :func:`onnx.version_converter.convert_version` (ONNX's own adapters). Around it:

* :func:`semantics_notes` lists every node whose operator changed meaning or signature between the
  source and target opsets, from the table :data:`SEMANTIC_CHANGES` (taken from the ONNX operator
  changelog, ``docs/Changelog.md`` of onnx/onnx, entries for the named versions);
* :func:`verify_conversion` runs the original and converted models with ONNX Runtime on the same
  inputs and reports the largest absolute difference per output. Adapters can be wrong and hand
  edits ("just bump the opset import") usually are: e.g. Softmax over a 3-D input with ``axis=1``
  normalises over dims 1..2 jointly before opset 13 and over dim 1 alone from opset 13.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..modelio import opset_of

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SemanticChange:
    """An operator whose meaning or signature changed at opset ``version`` (crossing v-1 → v)."""

    op_type: str
    version: int
    what: str
    risk: str  # "meaning" (numbers can change) or "signature" (attributes become inputs etc.)
    applies: Callable[[Any, dict[str, Any]], str | None] | None = None  # node, ctx -> detail or None


def _attr(node: Any, name: str, default: Any = None) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            v = onnx.helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _softmax_axis(node: Any, ctx: dict[str, Any]) -> str | None:
    rank = ctx["ranks"].get(node.input[0])
    axis = _attr(node, "axis", 1)
    if rank is None:
        return f"axis={axis}, input rank unknown: meaning changes unless the input is 2-D or axis is the last axis"
    a = axis + rank if axis < 0 else axis
    if rank <= 2 or a == rank - 1:
        return None  # same meaning: normalising over the last axis equals the 2-D coercion
    return f"axis={axis} on a rank-{rank} input: before 13 normalises over dims {a}..{rank - 1} jointly (2-D coercion), from 13 over dim {a} only"


def _resize_mode(node: Any, ctx: dict[str, Any]) -> str | None:
    written = ctx.get("written", {}).get(node.output[0] if node.output else "")
    if written:
        return written
    if node.op_type == "Upsample" or ctx.get("opset_before", 11) < 11:  # Upsample and Resize-10: asymmetric, nearest = floor
        return f"mode={_attr(node, 'mode', 'nearest')}, asymmetric coordinates (x_in = x_out / scale)" + (", nearest = floor" if _attr(node, "mode", "nearest") == "nearest" else "")
    return (f"mode={_attr(node, 'mode', 'nearest')}, coordinate_transformation_mode={_attr(node, 'coordinate_transformation_mode', 'half_pixel')}, "
            f"nearest_mode={_attr(node, 'nearest_mode', 'round_prefer_floor')}")


def keep_resize_semantics(source: Any, converted: Any, opset_before: int, opset_after: int) -> dict[str, str]:
    """Make Resize nodes converted from opset < 11 ``Upsample`` / ``Resize`` compute what they computed.

    Before opset 11, Upsample and Resize map output pixel ``x`` to input ``x / scale`` (asymmetric) and
    nearest takes the floor (ONNX ``docs/Changelog.md``: Upsample-9, Resize-10; ONNX Runtime's
    ``UpsampleBase`` for opset < 11). From opset 11 a Resize without ``coordinate_transformation_mode``
    is ``half_pixel``, and ``onnx.version_converter`` writes none, so a converted bilinear Upsample shifts
    by half a pixel. This sets ``coordinate_transformation_mode=asymmetric`` (and ``nearest_mode=floor``
    for nearest) on each such node of ``converted`` (in place), matching nodes by their first output.

    Returns:
        ``{output name: what was written}`` for every node set, for the conversion notes.
    """
    import onnx

    if opset_before >= 11 or opset_after < 11:
        return {}
    old = {n.output[0]: n for n in source.graph.node if n.op_type in ("Upsample", "Resize") and n.domain in ("", "ai.onnx") and n.output}
    written: dict[str, str] = {}
    for node in converted.graph.node:
        if node.op_type != "Resize" or not node.output or node.output[0] not in old:
            continue
        attrs = {a.name for a in node.attribute}
        mode = _attr(node, "mode", "nearest")
        if "coordinate_transformation_mode" not in attrs:
            node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        if mode == "nearest" and "nearest_mode" not in attrs:
            node.attribute.append(onnx.helper.make_attribute("nearest_mode", "floor"))
        written[node.output[0]] = (f"written as Resize(mode={mode}, coordinate_transformation_mode={_attr(node, 'coordinate_transformation_mode')}"
                                   + (f", nearest_mode={_attr(node, 'nearest_mode')}" if mode == "nearest" else "")
                                   + f"): keeps opset-{opset_before} {old[node.output[0]].op_type} semantics (asymmetric coordinates)")
    return written


def _resize_tf_half_pixel(node: Any, ctx: dict[str, Any]) -> str | None:
    mode = _attr(node, "coordinate_transformation_mode", "half_pixel")
    return f"coordinate_transformation_mode={mode} was removed at 13" if mode == "tf_half_pixel_for_nn" else None


SEMANTIC_CHANGES: tuple[SemanticChange, ...] = (
    SemanticChange("Softmax", 13, "axis semantics: 2-D coercion before 13, single axis from 13", "meaning", _softmax_axis),
    SemanticChange("LogSoftmax", 13, "axis semantics: 2-D coercion before 13, single axis from 13", "meaning", _softmax_axis),
    SemanticChange("Hardmax", 13, "axis semantics: 2-D coercion before 13, single axis from 13", "meaning", _softmax_axis),
    SemanticChange("Upsample", 10, "Upsample is deprecated; converted to Resize", "meaning", _resize_mode),
    SemanticChange("Resize", 11, "coordinate_transformation_mode, nearest_mode and cubic_coeff_a introduced (opset 10 behaves as asymmetric/floor); roi input added", "meaning", _resize_mode),
    SemanticChange("Resize", 13, "roi/scales may be empty; tf_half_pixel_for_nn removed", "signature", _resize_tf_half_pixel),
    SemanticChange("Resize", 18, "antialias, axes, keep_aspect_ratio_policy added", "signature", None),
    SemanticChange("Resize", 19, "half_pixel_symmetric coordinate mode added", "signature", None),
    SemanticChange("Clip", 11, "min/max move from attributes to optional inputs", "signature", None),
    SemanticChange("Pad", 11, "pads/value move from attributes to inputs", "signature", None),
    SemanticChange("Pad", 18, "axes input added", "signature", None),
    SemanticChange("Split", 13, "split moves from attribute to input", "signature", None),
    SemanticChange("Split", 18, "num_outputs attribute added; uneven last chunk allowed", "signature", None),
    SemanticChange("Squeeze", 13, "axes moves from attribute to input", "signature", None),
    SemanticChange("Unsqueeze", 13, "axes moves from attribute to input", "signature", None),
    SemanticChange("ReduceSum", 13, "axes moves from attribute to input", "signature", None),
    *(SemanticChange(op, 18, "axes moves from attribute to input", "signature", None)
      for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")),
    SemanticChange("Slice", 10, "starts/ends/axes move from attributes to inputs; steps added", "signature", None),
    SemanticChange("TopK", 10, "k moves from attribute to input", "signature", None),
    SemanticChange("Dropout", 12, "ratio moves to an input; training_mode input added", "signature", None),
    SemanticChange("BatchNormalization", 9, "spatial attribute removed (per-channel statistics always)", "meaning", None),
    SemanticChange("BatchNormalization", 14, "training_mode attribute; running-stat outputs only in training mode", "signature", None),
    SemanticChange("Gemm", 11, "C becomes optional", "signature", None),
    SemanticChange("Flatten", 11, "negative axis allowed", "signature", None),
    SemanticChange("DequantizeLinear", 13, "per-axis (axis attribute) allowed: needed for per-channel QDQ", "signature", None),
    SemanticChange("QuantizeLinear", 13, "per-axis (axis attribute) allowed", "signature", None),
    SemanticChange("ScatterElements", 16, "reduction attribute added", "signature", None),
    SemanticChange("GridSample", 20, "moved into the default domain; mode names changed (bilinear -> linear)", "meaning", None),
)


@dataclasses.dataclass(frozen=True)
class NodeNote:
    """A node whose operator crosses a :class:`SemanticChange` boundary in a conversion."""

    node: str
    op_type: str
    version: int
    risk: str
    what: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ConversionLog:
    """What an opset conversion did. ``method`` is ``"none"`` (already at target), ``"onnx"``
    (``onnx.version_converter``) or ``"relabel"`` (opset import bumped, graph untouched)."""

    opset_before: int
    opset_after: int
    method: str
    notes: tuple[NodeNote, ...]
    nodes_before: int
    nodes_after: int
    op_types_added: tuple[str, ...]
    op_types_removed: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["notes"] = [n.to_dict() for n in self.notes]
        d["op_types_added"] = list(self.op_types_added)
        d["op_types_removed"] = list(self.op_types_removed)
        return d

    def __repr__(self) -> str:
        return f"ConversionLog({self.opset_before}->{self.opset_after}, method={self.method}, notes={len(self.notes)})"


def _ranks(model: Any) -> dict[str, int]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - ranks are a best-effort aid to the notes
        inferred = model
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = len(tt.shape.dim)
    for t in g.initializer:
        out[t.name] = len(t.dims)
    return out


def semantics_notes(model: Any, opset_before: int, opset_after: int, written: dict[str, str] | None = None) -> tuple[NodeNote, ...]:
    """Notes for each ai.onnx node whose operator changes between the two opsets (either direction).

    A boundary ``v`` is crossed when ``min(before, after) < v <= max(before, after)``. ``written`` maps a
    node's first output to what the conversion wrote for it (:func:`keep_resize_semantics`); such notes
    say what was written.
    """
    lo, hi = sorted((opset_before, opset_after))
    ctx = {"ranks": _ranks(model), "written": written or {}, "opset_before": opset_before}
    notes = []
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        for ch in SEMANTIC_CHANGES:
            if ch.op_type == node.op_type and lo < ch.version <= hi:
                detail = ch.applies(node, ctx) if ch.applies else ""
                if ch.applies is not None and detail is None:
                    continue  # the change does not affect this node (e.g. Softmax over the last axis)
                notes.append(NodeNote(node.name or f"{node.op_type}_{i}", node.op_type, ch.version, ch.risk, ch.what, detail or ""))
    return tuple(notes)


def convert_opset(model: Any, target: int, *, method: str = "onnx", name: str = "model") -> tuple[Any, ConversionLog]:
    """Convert ``model`` to ai.onnx opset ``target`` and log the per-node semantic notes.

    Args:
        model: ``onnx.ModelProto`` (not modified).
        target: the ai.onnx opset wanted.
        method: ``"onnx"`` uses ``onnx.version_converter.convert_version`` and then
            :func:`keep_resize_semantics` (the converter leaves converted Upsample/Resize-10 nodes at the
            opset-11 default ``half_pixel``); ``"relabel"`` only rewrites the opset import (what a hand
            edit does; use only with :func:`verify_conversion`).

    Raises:
        ModelError: the converter has no adapter for an operator at these versions.
    """
    import onnx

    before = opset_of(model)
    written: dict[str, str] = {}
    if before == target:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        method = "none"
    elif method == "onnx":
        try:
            out = onnx.version_converter.convert_version(model, target)
        except Exception as e:  # noqa: BLE001 - the C++ converter raises RuntimeError/ConvertError
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"{name}: onnx.version_converter cannot convert opset {before} -> {target} ({first}); re-export at opset {target} from the framework") from None
        written = keep_resize_semantics(model, out, before, target)
    elif method == "relabel":
        out = onnx.ModelProto()
        out.CopyFrom(model)
        for o in out.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = target
    else:
        raise ValueError(f"method must be 'onnx' or 'relabel', got {method!r}")
    notes = semantics_notes(model, before, target, written)
    ops_b = {n.op_type for n in model.graph.node}
    ops_a = {n.op_type for n in out.graph.node}
    logged = ConversionLog(before, target, method, notes, len(model.graph.node), len(out.graph.node), tuple(sorted(ops_a - ops_b)), tuple(sorted(ops_b - ops_a)))
    log.info("opset %d -> %d (%s): %d semantic notes", before, target, method, len(notes))
    return out, logged


@dataclasses.dataclass(frozen=True)
class OutputDiff:
    """Largest absolute difference of one output over all samples (float64 arithmetic), and the output's shape as
    the converted model produced it (``shape``)."""

    name: str
    max_abs_diff: float
    max_rel_diff: float
    within_tolerance: bool
    shape: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class NumericCheck:
    """Original vs converted outputs on ``samples`` inputs. ``passed`` is True when every output is
    within ``atol`` (absolute). ``rel`` diff is ``|a-b| / max(|a|, 1e-6)``, reported, not gated."""

    atol: float
    samples: int
    outputs: tuple[OutputDiff, ...]

    @property
    def passed(self) -> bool:
        return all(o.within_tolerance for o in self.outputs)

    @property
    def max_abs_diff(self) -> float:
        return max((o.max_abs_diff for o in self.outputs), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"atol": self.atol, "samples": self.samples, "passed": self.passed, "max_abs_diff": self.max_abs_diff, "outputs": [o.to_dict() for o in self.outputs]}

    def __repr__(self) -> str:
        return f"NumericCheck(passed={self.passed}, max_abs_diff={self.max_abs_diff:.3g}, atol={self.atol:g}, samples={self.samples})"


def verify_conversion(original: Any, converted: Any, feeds: Sequence[dict[str, np.ndarray]], *, atol: float = 1e-4) -> NumericCheck:
    """Run both models with ONNX Runtime (CPU, graph optimizations on) on every feed and compare.

    Args:
        original, converted: ``onnx.ModelProto`` with the same input and output names.
        feeds: one ``{input name: array}`` per sample.
        atol: absolute tolerance per output element (same units as the output).

    Raises:
        ModelError: either model fails to load in ONNX Runtime or outputs differ in name or shape.
    """
    from ..runner import OrtRunner

    diffs: dict[str, list[float]] = {}
    rel: dict[str, list[float]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    with OrtRunner(original.SerializeToString(), name="original model") as ra, OrtRunner(converted.SerializeToString(), name="converted model") as rb:
        for feed in feeds:
            a, b = ra.infer(feed), rb.infer(feed)
            if set(a) != set(b):
                raise ModelError(f"converted model: outputs {sorted(b)} differ from the original's {sorted(a)}; the conversion renamed outputs")
            for k in a:
                x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
                if x.shape != y.shape:
                    raise ModelError(f"converted model: output {k!r} has shape {y.shape}, the original {x.shape}; the conversion changed its meaning")
                d = np.abs(x - y)
                shapes[k] = tuple(int(v) for v in y.shape)
                diffs.setdefault(k, []).append(float(d.max()) if d.size else 0.0)
                rel.setdefault(k, []).append(float((d / np.maximum(np.abs(x), 1e-6)).max()) if d.size else 0.0)
    outs = tuple(OutputDiff(k, max(v), max(rel[k]), max(v) <= atol, shapes[k]) for k, v in diffs.items())
    return NumericCheck(atol, len(feeds), outs)

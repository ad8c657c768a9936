"""Loading ONNX files with one-line errors (``OnnxFromPath`` in Polygraphy's naming).

Every way a file can fail to be a usable ONNX model (missing, empty, not a protobuf, a truncated
protobuf, a protobuf with no graph, external data that is not next to it) becomes one
:class:`~quantkit.errors.ModelError` naming the file and the fix.

A damaged file often still *parses*: protobuf reads a truncated file that ends on a field boundary,
and a flipped byte inside a string leaves an invalid UTF-8 ``op_type`` that protobuf (upb) hands back
as ``bytes``. :func:`check_model_sanity` therefore checks what parsed before any command uses it:
every string field decodes, every dtype and attribute type is one ONNX defines, every tensor's data
matches its dims, the graph has outputs and every tensor a node reads is defined somewhere. It
never runs the model and costs one pass over the protobuf (no weight is copied).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Union

from .errors import ModelError

log = logging.getLogger(__name__)

ModelSource = Union[str, "os.PathLike[str]", Any]  # a path or an onnx.ModelProto


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def load_model(path: str | os.PathLike[str], *, load_external_data: bool = True, strict_shapes: bool = False) -> Any:
    """Read ``path`` into an ``onnx.ModelProto``.

    Args:
        path: an ``.onnx`` file; external data files are looked up relative to its folder.
        load_external_data: read tensors stored in external files into the proto (default); when
            False only the graph is read (cheap inspection of huge models).
        strict_shapes: also run ONNX's strict shape inference and refuse the file when the shapes it
            declares disagree with what its nodes compute. For files quantkit wrote itself (intake and
            quantize outputs, whose shapes were inferred strictly): a disagreement there means damage. Not
            for source models, whose exporters often leave stale shapes (intake drops and re-infers them).

    Raises:
        ModelError: missing file, a folder, an empty file, not an ONNX protobuf (e.g. an image or
            a text file), a truncated protobuf, no graph, a damaged graph (see
            :func:`check_model_sanity`), or missing external data.
    """
    import google.protobuf.message
    import onnx

    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: model file not found; check the path (the demo's models: 'quantkit demo model')")
    if p.is_dir():
        raise ModelError(f"{p}: is a folder, not an .onnx file; pass the model file inside it")
    if p.stat().st_size == 0:
        raise ModelError(f"{p}: file is empty; re-export or re-download the model")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except (google.protobuf.message.DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as e:
        raise ModelError(f"{p}: not a readable ONNX protobuf ({_first_line(e)}); the file is corrupt, truncated or not ONNX, re-export it") from None
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.output) == 0):
        raise ModelError(f"{p}: parses but holds no ONNX graph (not an ONNX model, or truncated); re-export it")
    if len(model.opset_import) == 0:
        raise ModelError(f"{p}: declares no opset_import (not an ONNX model, or truncated); re-export it")
    check_model_sanity(model, str(p))
    if strict_shapes:
        try:
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        except Exception as e:  # noqa: BLE001 - onnx raises InferenceError / ValidationError / RuntimeError
            raise ModelError(f"{p}: the shapes or types it declares disagree with what its nodes compute ({_first_line(e)}); {_DAMAGED}") from None
    missing = sorted({loc for loc in external_data_locations(model) if not (p.parent / loc).is_file()})
    if missing:
        raise ModelError(f"{p}: external data file {missing[0]!r} not found next to the model; copy it into {p.parent} or re-export with the weights inside")
    if load_external_data and external_data_locations(model):
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(p.parent))
        except (OSError, ValueError) as e:
            raise ModelError(f"{p}: cannot read external data ({_first_line(e)}); re-export the model") from None
    return model


def external_data_locations(model: Any) -> list[str]:
    """Relative paths of external data files referenced by the model's initializers (with repeats removed)."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    locs: dict[str, None] = {}
    for t in _all_initializers(model):
        if uses_external_data(t):
            locs[ExternalDataInfo(t).location] = None
    return list(locs)


def _all_initializers(model: Any) -> list[Any]:
    out = list(model.graph.initializer)
    for node in model.graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                out.append(a.t)
    return out


def as_model(source: ModelSource, *, load_external_data: bool = True) -> tuple[Any, str]:
    """Return ``(ModelProto, display name)`` for a path or an already-loaded proto."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "model"
    return load_model(source, load_external_data=load_external_data), str(source)


def fresh_name(base: str, taken: Any) -> str:
    """``base``, or ``base_2``, ``base_3``... the first not in ``taken`` (a set or mapping of names): the one rule for
    naming what quantkit adds to a graph (unnamed nodes, rewritten initializers)."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def opset_of(model: Any, domain: str = "") -> int:
    """The opset version the model imports for ``domain`` ('' = ai.onnx); 0 when not imported."""
    for o in model.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return int(o.version)
    return 0


def fixed_batch(model: Any, input_name: str) -> int | None:
    """The fixed size of the first dimension of graph input ``input_name`` (the batch axis), or None when that
    dimension is dynamic (symbolic, unset, or -1 as some exporters write it), or the input is absent or has no shape."""
    for i in model.graph.input:
        if i.name == input_name and i.type.HasField("tensor_type") and i.type.tensor_type.HasField("shape"):
            dims = i.type.tensor_type.shape.dim
            size = int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") else 0
            return size if size > 0 else None
    return None


def check_one_image_batch(model: Any, input_name: str, path: str | os.PathLike[str], *, batch_axis: bool = True) -> None:
    """Refuse a model whose input is fixed to a batch of more than one image before a stage feeds it images.

    Calibration, evaluation, binding, comparison, fallback and the drift clipping check run the model on one
    preprocessed image at a time (``(1, C, H, W)``); a model whose batch dimension ``intake.batch_size`` fixed
    to ``B > 1`` refuses that input (ONNX Runtime: "Got invalid dimensions"). ``batch_axis=False``
    (``preprocessing.batch_axis``: a rank-3 input) has no batch dimension: nothing to check.

    Raises:
        ModelError: one line naming the model, the input, its fixed batch and the fix.
    """
    b = fixed_batch(model, input_name) if batch_axis else None
    if b is not None and b > 1:
        raise ModelError(f"{path}: input {input_name!r} is fixed to a batch of {b} (intake.batch_size: {b}), but quantkit runs models on one "
                         "image at a time (quantize, bind, evaluate, compare, fallback, drift clipping); re-run 'quantkit intake' with "
                         f"intake.batch_size: 1 (a model exported with a fixed batch of {b} needs a re-export with a dynamic batch first)")


_DAMAGED = "the file is damaged (truncated, or bytes changed on disk or in transfer); re-export or re-download it"

# Element counts of a typed-field tensor per ONNX data type (TensorProto in onnx/onnx.proto3):
# complex types store (real, imaginary) pairs; sub-byte types (int4, float4, int2, float6) are packed and skipped.
_SUB_BYTE = frozenset({21, 22, 23, 25, 26, 27, 28})
_TYPED_FIELD_FACTOR = {14: 2, 15: 2}


def _undecodable_string(msg: Any, where: str) -> str | None:
    """The field path of the first string field holding bytes that are not UTF-8, or None."""
    from google.protobuf.descriptor import FieldDescriptor

    for fd, value in msg.ListFields():
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == FieldDescriptor.LABEL_REPEATED  # protobuf >= 5.28 / older
        if fd.type == FieldDescriptor.TYPE_STRING:
            for i, v in enumerate(value if repeated else (value,)):
                if not isinstance(v, str):
                    return f"{where}.{fd.name}" + (f"[{i}]" if repeated else "")
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            for i, v in enumerate(value if repeated else (value,)):
                found = _undecodable_string(v, f"{where}.{fd.name}" + (f"[{i}]" if repeated else ""))
                if found:
                    return found
    return None


def _tensor_problem(t: Any) -> str | None:
    """Why a TensorProto's data cannot be what its dims and data_type say, or None."""
    import onnx

    if t.data_type not in onnx.TensorProto.DataType.values() or t.data_type == 0:
        return f"has data type {t.data_type}, which ONNX does not define"
    if any(d < 0 for d in t.dims):
        return f"has a negative dim {list(t.dims)}"
    if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type in _SUB_BYTE or t.data_type == onnx.TensorProto.STRING:
        return None
    n = 1
    for d in t.dims:
        n *= int(d)
    if t.HasField("raw_data"):
        want = n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        got = len(t.raw_data)
    else:
        want = n * _TYPED_FIELD_FACTOR.get(t.data_type, 1)
        got = len(getattr(t, onnx.helper.tensor_dtype_to_field(t.data_type)))
    return None if got == want else f"holds {got} values/bytes where dims {list(t.dims)} need {want}"


def _graph_problem(graph: Any, outer: frozenset[str], where: str) -> str | None:
    """The first dangling reference, bad dtype or bad attribute in ``graph`` (recursing into subgraphs)."""
    import onnx

    valid_types = set(onnx.TensorProto.DataType.values())
    valid_attrs = set(onnx.AttributeProto.AttributeType.values()) - {0}
    known = set(outer) | {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    known |= {t.values.name for t in graph.sparse_initializer} | {o for n in graph.node for o in n.output if o}
    for t in graph.initializer:
        bad = _tensor_problem(t)
        if bad:
            return f"{where} initializer {t.name!r} {bad}"
    for kind, vis in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for vi in vis:
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.elem_type not in valid_types:
                return f"{where} {kind} {vi.name!r} has element type {tt.elem_type}, which ONNX does not define"
    for i, node in enumerate(graph.node):
        label = f"{where} node {i} ({node.op_type}{' ' + repr(node.name) if node.name else ''})"
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, ""):
            return (f"{label} is not an operator onnx {onnx.__version__} knows (ai.onnx up to opset {onnx.defs.onnx_opset_version()}): "
                    "the file is damaged or needs a newer onnx; re-export or re-download it, or upgrade onnx")
        missing = next((x for x in node.input if x and x not in known), None)
        if missing is not None:
            return f"{label} reads tensor {missing!r}, which no node, input or initializer defines"
        for a in node.attribute:
            if a.type not in valid_attrs:
                return f"{label} attribute {a.name!r} has type {a.type}, which ONNX does not define"
            tensors = ([a.t] if a.HasField("t") else []) + list(a.tensors)
            for t in tensors:
                bad = _tensor_problem(t)
                if bad:
                    return f"{label} attribute {a.name!r} tensor {bad}"
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                bad = _graph_problem(g, frozenset(known), f"{label} subgraph {g.name!r}:")
                if bad:
                    return bad
    return None


def _all_nodes(graph: Any) -> list[Any]:
    out = []
    for n in graph.node:
        out.append(n)
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out.extend(_all_nodes(g))
    return out


def check_model_sanity(model: Any, path: str = "model") -> None:
    """Refuse a parsed model whose content cannot be what an exporter wrote.

    Checks (one pass, no weights copied): every protobuf string field is valid UTF-8; every initializer
    and Constant tensor has an ONNX data type, non-negative dims and as many values (or raw bytes) as its
    dims need; graph inputs/outputs/value_info have ONNX element types; every attribute has an ONNX
    attribute type; every node's domain is imported, and a default-domain op type is one onnx knows; the
    graph has at least one output; and every tensor a node (or subgraph node) reads and every graph output
    is defined by a graph input, an initializer or a node output.

    Raises:
        ModelError: naming the file, the node or tensor at fault and the fix (re-export / re-download).
    """
    bad_string = _undecodable_string(model, "model")
    if bad_string:
        raise ModelError(f"{path}: {bad_string} is not valid UTF-8 text; {_DAMAGED}")
    g = model.graph
    if len(g.output) == 0:
        raise ModelError(f"{path}: the graph has no outputs (truncated, or not a complete ONNX model); {_DAMAGED}")
    def norm(domain: str) -> str:
        return "" if domain in ("", "ai.onnx") else domain

    imported = {norm(o.domain) for o in model.opset_import}
    stray = next((n for n in _all_nodes(g) if norm(n.domain) not in imported), None)
    if stray is not None:
        raise ModelError(f"{path}: node {stray.name or stray.op_type!r} uses domain {stray.domain!r}, which the model does not import "
                         f"(opset_import: {sorted(o.domain or 'ai.onnx' for o in model.opset_import)}); {_DAMAGED}")
    bad = _graph_problem(g, frozenset(), "graph")
    if bad:
        raise ModelError(f"{path}: {bad}" if "re-export" in bad else f"{path}: {bad}; {_DAMAGED}")
    known = {vi.name for vi in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    missing = next((o.name for o in g.output if o.name not in known), None)
    if missing is not None:
        raise ModelError(f"{path}: graph output {missing!r} is not produced by any node, input or initializer; {_DAMAGED}")

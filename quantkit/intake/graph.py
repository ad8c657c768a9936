"""Graph edits intake makes: fix the input shape, infer shapes, ORT pre-processing, name unnamed nodes.

Each takes an ``onnx.ModelProto`` and returns a new one (or edits a copy intake owns); every failure is a
one-line :class:`~quantkit.errors.ModelError` naming the input, dim or field and the params key that fixes it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .._io import atomic_write_bytes
from ..errors import ModelError
from ..modelio import fresh_name
from ..note import Preprocessing
from ..runtimes.quiet import quiet_onnxruntime

log = logging.getLogger(__name__)

_PRODUCERS = {"pytorch": "PyTorch", "paddle2onnx": "PaddlePaddle (paddle2onnx)", "tf2onnx": "TensorFlow (tf2onnx)",
              "keras2onnx": "Keras (keras2onnx)", "skl2onnx": "scikit-learn (skl2onnx)", "onnx.helper": "onnx.helper (hand-built)"}

NODE_NAME_RULE = "{op_type}_{index}"
"""Name given to a node without one: its op type and its position in its graph (subgraph nodes are
prefixed with their parent node's name and ``/``); ``_2``, ``_3`` ... is appended if the name is taken."""


def detect_framework(model: Any) -> tuple[str, str, str]:
    """``(framework, version, evidence)`` from ``producer_name``/``producer_version``; when those are
    empty, from exporter naming conventions (paddle2onnx names tensors and dims ``p2o.*``)."""
    name, version = model.producer_name, model.producer_version
    if name:
        return _PRODUCERS.get(name.lower(), name), version, f"producer_name={name!r}, producer_version={version!r}"
    dims = [d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param]
    names = [t for n in model.graph.node[:50] for t in n.output]
    if any(s.startswith("p2o.") for s in dims + names):
        return _PRODUCERS["paddle2onnx"], "", "producer fields empty; inferred from paddle2onnx's 'p2o.' tensor and dim names"
    return "unknown", "", "producer fields empty and no exporter naming convention recognised; set intake.framework"


def _dims_text(dims: Any) -> str:
    return "[" + ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"


def _static(d: Any) -> int | None:
    """A dim's fixed size; None for symbolic, unknown, 0 or negative (``-1`` exported for "dynamic")."""
    return int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None


def _mismatch_fix(i: int, have: int, dims: list[int | None], pre: Preprocessing | None) -> str:
    """What to set when static dim ``i`` of the input (``have``) differs from what the note asks."""
    if pre is None:
        return "set intake.input_size/batch_size/preprocessing to match, or re-export with dynamic dims"
    rank = len(dims)
    c_pos = (rank - 3 if pre.layout == "NCHW" else rank - 1)
    other = (rank - 1 if pre.layout == "NCHW" else rank - 3)
    if pre.batch_axis and i == 0:
        return f"set intake.batch_size: {have}"
    if i == c_pos:
        if dims[other] in (1, 3, 4) and have not in (1, 3, 4):
            return f"the channels are last/first: set intake.preprocessing.layout: {'NHWC' if pre.layout == 'NCHW' else 'NCHW'}"
        if have in (1, 3, 4):
            return f"set intake.preprocessing.channels: {have}" + (" (grayscale)" if have == 1 else "")
        return f"the input has {have} channels; quantkit feeds images with 1, 3 or 4 channels"
    h_pos = c_pos + 1 if pre.layout == "NCHW" else c_pos - 2
    hw = [dims[h_pos], dims[h_pos + 1]]
    if dims[other] in (1, 3, 4) and dims[c_pos] not in (1, 3, 4):
        return f"the channels are last/first: set intake.preprocessing.layout: {'NHWC' if pre.layout == 'NCHW' else 'NCHW'}"
    return f"set intake.input_size: [{hw[0] if hw[0] else 'H'}, {hw[1] if hw[1] else 'W'}] (height, width)"


def fix_input_shape(model: Any, name: str, shape: tuple[int, ...], *, path: str = "model", pre: Preprocessing | None = None) -> Any:
    """Copy of ``model`` with input ``name`` fixed to ``shape``; stale ``value_info`` and output shapes
    are dropped so shape inference recomputes them. Symbolic, unknown, 0 and negative dims (``-1`` as some
    exporters write "dynamic") are dynamic and take the asked size.

    Args:
        pre: the preprocessing the shape comes from; used only to say which params key fixes a mismatch.

    Raises:
        ModelError: no such input, more than one input, rank differs, or a fixed dim conflicts with ``shape``
            (naming the params key to set: batch_size, input_size, preprocessing.channels/layout/batch_axis).
    """
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    init = {t.name for t in m.graph.initializer}
    inputs = [vi for vi in m.graph.input if vi.name not in init]
    vi = next((v for v in inputs if v.name == name), None)
    if vi is None:
        raise ModelError(f"{path}: no input named {name!r} (inputs: {[v.name for v in inputs]}); set intake.preprocessing.input_name")
    if len(inputs) != 1:
        raise ModelError(f"{path}: has {len(inputs)} inputs {[v.name for v in inputs]}; intake handles single-image-input models only")
    dims = vi.type.tensor_type.shape.dim
    if len(dims) != len(shape):
        hint = "check intake.preprocessing.layout"
        if len(dims) == 3 and len(shape) == 4:
            hint = "a rank-3 input has no batch axis: set intake.preprocessing.batch_axis: false (and intake.batch_size: 1)"
        elif len(dims) == 4 and len(shape) == 3:
            hint = "set intake.preprocessing.batch_axis: true"
        elif len(dims) not in (3, 4):
            hint = "intake takes image inputs of rank 4 (N,C,H,W / N,H,W,C) or 3 (C,H,W / H,W,C)"
        raise ModelError(f"{path}: input {name!r} has rank {len(dims)} {_dims_text(dims)}, the note asks for {list(shape)}; {hint}")
    static = [_static(d) for d in dims]
    for i, (d, v) in enumerate(zip(dims, shape)):
        if static[i] is not None and static[i] != v:
            raise ModelError(f"{path}: input {name!r} {_dims_text(dims)} dim {i} is fixed at {static[i]}, the note asks for {list(shape)}; "
                             + _mismatch_fix(i, static[i], static, pre))
        d.Clear()
        d.dim_value = v
    del m.graph.value_info[:]
    for o in m.graph.output:
        o.type.tensor_type.ClearField("shape")
    return m


def infer_shapes(model: Any, path: str) -> Any:
    """ONNX's strict shape inference with data propagation.

    Raises:
        ModelError: inference fails at the fixed input shape (first line of ONNX's message).
    """
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{path}: shape inference fails at the fixed input shape ({first}); check intake.input_size or re-export") from None


#: Share of the machine's memory one inference's two largest tensors may take before intake refuses the input size.
MEMORY_SHARE = 0.8
_BYTES = {1: 4, 10: 2, 11: 8, 16: 2}  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or the cgroup v2 limit (``memory.max``) when lower."""
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def check_memory(model: Any, path: str, where: str, memory: int | None = None) -> None:
    """Refuse an input size at which one inference cannot fit in memory, before anything runs at it (the OOM
    killer would end the process without a word). Estimate: the two largest float tensors of the shape-inferred
    ``model`` (an operator's input and output are alive together); refused above :data:`MEMORY_SHARE` of
    ``memory`` (default :func:`machine_memory`). Tensors with a dimension still unknown are not counted.

    Raises:
        ModelError: the estimate exceeds the share; names ``where`` (the setting to lower) and both sizes in GB.
    """
    sizes = []
    for v in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim] if t.HasField("shape") else [0]
        if t.elem_type in _BYTES and all(d > 0 for d in dims):
            n = _BYTES[t.elem_type]
            for d in dims:
                n *= d
            sizes.append((n, v.name))
    sizes.sort(reverse=True)
    need = sum(n for n, _ in sizes[:2])
    memory = machine_memory() if memory is None else memory
    if need > MEMORY_SHARE * memory:
        raise ModelError(f"{path}: at {where} one inference needs at least {need / 1e9:.1f} GB (its two largest tensors, "
                         f"{sizes[0][1]!r} {sizes[0][0] / 1e9:.1f} GB), more than {MEMORY_SHARE:.0%} of this machine's {memory / 1e9:.1f} GB; "
                         f"lower {where}")


def check_runtime_loads(model: Any, path: str, custom_domains: tuple[str, ...] = ()) -> None:
    """Load ``model`` in ONNX Runtime (CPU) without ORT printing anything.

    Raises:
        ModelError: ORT refuses it; names the custom domains when the model uses any (the usual cause).
    """
    from ..runner import OrtRunner

    try:
        with quiet_onnxruntime(), OrtRunner(model.SerializeToString(), name=path):
            pass
    except ModelError:
        if not custom_domains:
            raise
        ops = sorted({f"{n.domain}::{n.op_type}" for n in model.graph.node if n.domain in custom_domains})
        raise ModelError(f"{path}: ONNX Runtime cannot load custom-domain operator(s) {', '.join(ops[:5])} (no kernel registered); intake runs "
                         "the model to verify it: re-export with standard ONNX operators") from None


def ort_pre_process(model: Any, tmp: Path) -> Any:
    """ORT's ``quant_pre_process`` (graph optimizations + ONNX shape inference, symbolic inference skipped),
    quietly; opset imports of domains no node uses are dropped."""
    import onnx

    from ..quantize.ort_bridge import pre_process

    src, dst = tmp / "pre_in.onnx", tmp / "pre_out.onnx"
    atomic_write_bytes(src, model.SerializeToString())
    with quiet_onnxruntime():
        pre_process(src, dst)
    out = onnx.load(str(dst))
    src.unlink()
    dst.unlink()
    # ORT's optimizer adds opset imports for every domain it knows (ai.onnx.preview, com.microsoft, ...);
    # keep only the ones a node uses, so a target runtime is not asked for domains the model never needs.
    used = {n.domain or "" for n in out.graph.node} | {""}
    keep = [o for o in out.opset_import if (o.domain or "") in used]
    del out.opset_import[:]
    out.opset_import.extend(keep)
    return out


def name_unnamed_nodes(model: Any) -> tuple[str, ...]:
    """Give every node without a name one by :data:`NODE_NAME_RULE`, in place; returns the names given,
    in graph order. Deterministic: the same graph always gets the same names (fallback and
    ``nodes_to_exclude`` refer to nodes by name)."""
    taken: set[str] = set()

    def collect(graph: Any) -> None:
        for n in graph.node:
            if n.name:
                taken.add(n.name)
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    collect(g)

    given: list[str] = []

    def assign(graph: Any, prefix: str) -> None:
        for i, n in enumerate(graph.node):
            if not n.name:
                name = fresh_name(prefix + NODE_NAME_RULE.format(op_type=n.op_type, index=i), taken)
                n.name = name
                taken.add(name)
                given.append(name)
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    assign(g, f"{n.name}/")

    collect(model.graph)
    assign(model.graph, "")
    if given:
        log.info("named %d unnamed nodes (%s)", len(given), NODE_NAME_RULE)
    return tuple(given)

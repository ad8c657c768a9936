"""Inspection of an ONNX model: IO, opsets, producer, operator inventory, weights, metadata.

:func:`inspect_model` returns an :class:`InspectReport`, a typed record with ``to_dict``; the CLI
(`quantkit inspect`) renders it as a table or JSON. Nothing here runs the model.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np

from ..modelio import ModelSource, _all_initializers, as_model, external_data_locations

STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training", "com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc"})
"""Domains ONNX or ONNX Runtime define themselves; anything else is a custom domain."""


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One graph input or output. ``shape`` holds ints for fixed dims, names for symbolic dims and
    ``None`` for unnamed unknown dims; ``shape`` is ``None`` when the rank is unknown."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...] | None

    @property
    def symbolic_dims(self) -> tuple[str, ...]:
        return tuple(d for d in (self.shape or ()) if isinstance(d, str))

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape), "symbolic_dims": list(self.symbolic_dims)}

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}, {self.shape_str()})"

    def shape_str(self) -> str:
        if self.shape is None:
            return "?"
        return "[" + ",".join("?" if d is None else str(d) for d in self.shape) + "]"


@dataclasses.dataclass(frozen=True)
class OpCount:
    """How many nodes use ``domain::op_type`` (domain '' is ai.onnx)."""

    domain: str
    op_type: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class InspectReport:
    """What a model is, without running it.

    ``initializer_bytes`` counts raw tensor bytes (``numpy`` itemsize × element count) of graph
    initializers and ``Constant`` node tensors; ``external_data`` lists referenced external files.
    """

    path: str
    ir_version: int
    opsets: dict[str, int]
    producer_name: str
    producer_version: str
    domain: str
    model_version: int
    graph_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    ops: tuple[OpCount, ...]
    node_count: int
    initializer_count: int
    initializer_bytes: int
    external_data: tuple[str, ...]
    custom_domains: tuple[str, ...]
    metadata: dict[str, str]

    @property
    def opset(self) -> int:
        """The ai.onnx opset version (0 when not imported)."""
        return self.opsets.get("", self.opsets.get("ai.onnx", 0))

    def op_types(self) -> set[str]:
        return {o.op_type for o in self.ops}

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["inputs"] = [t.to_dict() for t in self.inputs]
        d["outputs"] = [t.to_dict() for t in self.outputs]
        d["ops"] = [o.to_dict() for o in self.ops]
        d["external_data"] = list(self.external_data)
        d["custom_domains"] = list(self.custom_domains)
        return d

    def __repr__(self) -> str:
        io = ", ".join(f"{t.name}{t.shape_str()}" for t in self.inputs)
        return f"InspectReport({self.path!r}, opset={self.opset}, inputs=[{io}], nodes={self.node_count}, op_types={len(self.ops)})"


def _tensor_info(vi: Any) -> TensorInfo:
    import onnx

    tt = vi.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "undefined"
    shape: tuple[int | str | None, ...] | None = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None) for d in tt.shape.dim)
    return TensorInfo(vi.name, dtype, shape)


def _tensor_bytes(t: Any) -> int:
    import onnx

    n = int(np.prod(t.dims)) if len(t.dims) else 1
    try:
        item = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, ValueError):
        item = 0
    return n * item


def _walk_nodes(graph: Any) -> list[Any]:
    """All nodes, including those in subgraphs (If/Loop/Scan bodies)."""
    out = []
    for node in graph.node:
        out.append(node)
        for a in node.attribute:
            if a.HasField("g"):
                out.extend(_walk_nodes(a.g))
            for g in a.graphs:
                out.extend(_walk_nodes(g))
    return out


def inspect_model(source: ModelSource) -> InspectReport:
    """Inspect a model file or ``onnx.ModelProto``.

    Raises:
        ModelError: the file is missing, corrupt, truncated, not ONNX or lacks external data.
    """
    model, name = as_model(source, load_external_data=False)  # keep external references; sizes come from dims
    g = model.graph
    init_names = {t.name for t in g.initializer}
    nodes = _walk_nodes(g)
    counts = collections.Counter((n.domain if n.domain != "ai.onnx" else "", n.op_type) for n in nodes)
    inits = _all_initializers(model)
    domains = {n.domain for n in nodes} | {o.domain for o in model.opset_import}
    return InspectReport(
        path=name,
        ir_version=int(model.ir_version),
        opsets={o.domain if o.domain != "ai.onnx" else "": int(o.version) for o in model.opset_import},
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=int(model.model_version),
        graph_name=g.name,
        inputs=tuple(_tensor_info(vi) for vi in g.input if vi.name not in init_names),
        outputs=tuple(_tensor_info(vi) for vi in g.output),
        ops=tuple(OpCount(d, t, c) for (d, t), c in sorted(counts.items())),
        node_count=len(nodes),
        initializer_count=len(inits),
        initializer_bytes=sum(_tensor_bytes(t) for t in inits),
        external_data=tuple(external_data_locations(model)),
        custom_domains=tuple(sorted(d for d in domains if d not in STANDARD_DOMAINS)),
        metadata={p.key: p.value for p in model.metadata_props},
    )

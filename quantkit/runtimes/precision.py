"""How much of a model's Conv/MatMul work a runtime really executed in integer precision, and the machine.

Work is counted in multiply-accumulates (MACs) of the ONNX model's compute nodes, from ONNX shape
inference:

* ``Conv``: ``prod(Y.shape) * prod(W.shape[1:])`` (``W`` is ``[C_out, C_in/group, k...]``);
* ``ConvTranspose``: ``prod(X.shape) * prod(W.shape[1:])`` (``W`` is ``[C_in, C_out/group, k...]``);
* ``MatMul`` / ``Gemm``: ``prod(Y.shape) * K`` with ``K`` the reduced dimension of ``A``.

A compute node counts as integer when a runtime node that covers it is an integer kernel
(:func:`is_integer_kernel`: a convolution/matmul kernel whose precision is one of :data:`INTEGER_PRECISIONS`; the
same test :func:`time_profile` uses for the time share, so ``quantkit verify`` and ``quantkit measure`` classify
kernels alike). The runtime says which nodes it fused and in which precision it ran them (ORT's profiler,
OpenVINO's runtime model), so the share is the runtime's account, not a reading of the QDQ graph.

Which ONNX compute node a kernel covers (:func:`kernel_coverage`): first the names it reports
(:attr:`NodePrecision.original`: node names, output tensor names, OpenVINO's ``<node>/WithoutBiases``); a kernel that
names no compute node is a Conv/MatMul fused with the float operations after it, renamed by the runtime (OpenVINO folds
``Conv -> Mul(scale) -> Add`` into one ``Convolution`` called ``Multiply_<n>`` whose original names are only ``add``
and what follows; issue 39: 28 of PP-OCR's 64 Convs), and covers the nearest compute node upstream of the nodes it
names, through non-compute operations, that no other kernel names.
"""

from __future__ import annotations

import dataclasses
import platform
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import INTEGER_PRECISIONS, NodePrecision, onnx_node_names

COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"})
_KERNEL = re.compile(r"conv|matmul|gemm|fullyconnected|deconvolution|innerproduct", re.IGNORECASE)
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_int8", "amx_bf16", "amx_tile", "neon", "asimd")
"""CPU features that decide which kernels a runtime picks (int8 dot products, bf16, AMX tiles)."""


@dataclasses.dataclass(frozen=True)
class PrecisionSummary:
    """Share of Conv/MatMul work (MACs) a runtime executed in integer precision.

    integer_share: integer MACs / all compute MACs (0..1; NaN when the model has none). nodes_integer /
    nodes_float / nodes_unknown: compute nodes by what the runtime reported (unknown = no runtime node
    names it). precisions: ``{precision: compute MACs}``.
    """

    integer_share: float
    nodes_integer: int
    nodes_float: int
    nodes_unknown: int
    total_macs: int
    precisions: tuple[tuple[str, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["precisions"] = dict(self.precisions)
        d["integer_share"] = None if np.isnan(self.integer_share) else self.integer_share
        return d

    def __str__(self) -> str:
        if np.isnan(self.integer_share):
            return "no Conv/MatMul nodes"
        return (f"{100 * self.integer_share:.1f}% of Conv/MatMul MACs in int8/uint8 ({self.nodes_integer} integer, "
                f"{self.nodes_float} float, {self.nodes_unknown} not reported)")


def compute_macs(model: Any) -> dict[str, int]:
    """``{ONNX node name: MACs}`` of every Conv/ConvTranspose/MatMul/Gemm (formulas in the module docstring).

    Nodes whose shapes shape inference cannot give are left out. Unnamed nodes are ``<op_type>_<index>``.
    """
    import onnx

    try:
        m = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - best effort: keep declared shapes
        m = model
    shapes: dict[str, list[int]] = {}
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    dq = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "DequantizeLinear"}
    out: dict[str, int] = {}
    for i, n in enumerate(m.graph.node):
        if n.op_type not in COMPUTE_OPS:
            continue
        name = n.name or f"{n.op_type}_{i}"
        x, w = (n.input[0], n.input[3]) if n.op_type.startswith("QLinear") else (n.input[0], n.input[1] if len(n.input) > 1 else "")
        w_shape = shapes.get(w) or shapes.get(dq.get(w, ""))
        y = shapes.get(n.output[0])
        macs = _macs(n, shapes.get(x), w_shape, y)
        if macs:
            out[name] = macs
    return out


def _macs(node: Any, x: list[int] | None, w: list[int] | None, y: list[int] | None) -> int:
    if node.op_type in ("Conv", "QLinearConv", "ConvInteger") and y and w:
        return int(np.prod(y, dtype=np.int64) * np.prod(w[1:], dtype=np.int64))
    if node.op_type == "ConvTranspose" and x and w:
        return int(np.prod(x, dtype=np.int64) * np.prod(w[1:], dtype=np.int64))
    if node.op_type == "Gemm" and x and y:
        trans = any(a.name == "transA" and a.i for a in node.attribute)
        return int(np.prod(y, dtype=np.int64) * (x[0] if trans else x[-1]))
    if node.op_type in ("MatMul", "QLinearMatMul", "MatMulInteger") and x and y:
        return int(np.prod(y, dtype=np.int64) * x[-1])
    return 0


def is_integer_kernel(node: NodePrecision) -> bool:
    """Whether a runtime node is a convolution/matmul kernel (by its runtime type: ``QLinearConv``, ``Convolution``,
    ``FullyConnected``, ...) that computed in an integer precision (:data:`INTEGER_PRECISIONS`, case-insensitive)."""
    return bool(_KERNEL.search(node.op_type)) and node.precision.lower() in INTEGER_PRECISIONS


UPSTREAM_STEPS = 8
"""How many operations back from the nodes a fused kernel names :func:`kernel_coverage` looks for its compute node."""


def kernel_coverage(model: Any, nodes: Sequence[NodePrecision]) -> dict[str, NodePrecision]:
    """``{ONNX compute node name: the runtime kernel that ran it}`` for the Conv/ConvTranspose/MatMul/Gemm nodes of
    ``model`` (names as :func:`compute_macs`) that a convolution/matmul kernel of ``nodes`` covers (module docstring).

    A node covered by several kernels keeps the first integer one (else the first). Kernels that name no compute node
    are resolved after every named one, each to the nearest unclaimed compute node at most :data:`UPSTREAM_STEPS`
    operations upstream (ties: every one at that distance)."""
    names = onnx_node_names(model)
    compute = {(n.name or f"{n.op_type}_{i}") for i, n in enumerate(model.graph.node) if n.op_type in COMPUTE_OPS}
    covered: dict[str, NodePrecision] = {}

    def claim(onnx_name: str, rn: NodePrecision) -> None:
        if onnx_name not in covered or (not is_integer_kernel(covered[onnx_name]) and is_integer_kernel(rn)):
            covered[onnx_name] = rn

    fused: list[tuple[NodePrecision, list[str]]] = []
    for rn in nodes:
        if not _KERNEL.search(rn.op_type):
            continue
        named = [names.get(o) or names.get(o.rsplit("/", 1)[0]) or names.get(o.split("/", 1)[0]) for o in rn.original]
        direct = [n for n in named if n in compute]
        for n in direct:
            claim(n, rn)
        if not direct:
            fused.append((rn, [n for n in named if n]))
    if fused:
        producer = _producers(model)
        for rn, named in fused:
            for n in _nearest_compute(named, producer, compute, set(covered)):
                claim(n, rn)
    return covered


def _producers(model: Any) -> dict[str, tuple[str, list[str]]]:
    """``{ONNX node name: (op_type, names of the nodes producing its inputs)}`` (initializers and graph inputs left out)."""
    out_of = {}
    for i, n in enumerate(model.graph.node):
        for o in n.output:
            out_of[o] = n.name or f"{n.op_type}_{i}"
    return {(n.name or f"{n.op_type}_{i}"): (n.op_type, [out_of[t] for t in n.input if t in out_of]) for i, n in enumerate(model.graph.node)}


def _nearest_compute(start: Sequence[str], producer: dict[str, tuple[str, list[str]]], compute: set[str], taken: set[str]) -> list[str]:
    """The unclaimed compute nodes nearest upstream of ``start`` (breadth first, not through another compute node)."""
    frontier, seen = list(dict.fromkeys(start)), set(start)
    for _ in range(UPSTREAM_STEPS):
        found = [n for n in frontier if n in compute and n not in taken]
        if found:
            return found
        nxt = []
        for n in frontier:
            if n in compute:
                continue  # a compute node another kernel ran: what lies above it is not this kernel's
            for p in producer.get(n, ("", []))[1]:
                if p not in seen:
                    seen.add(p)
                    nxt.append(p)
        frontier = nxt
    return []


def integer_share(model: Any, nodes: Sequence[NodePrecision]) -> PrecisionSummary:
    """MAC-weighted share of ``model``'s compute nodes that ``nodes`` (a runtime's account) ran in integers, each compute
    node mapped to its kernel by :func:`kernel_coverage`."""
    macs = compute_macs(model)
    covered = kernel_coverage(model, nodes)
    seen = {name: rn.precision for name, rn in covered.items() if name in macs}
    total = sum(macs.values())
    by_prec: dict[str, int] = {}
    for name, m in macs.items():
        p = seen.get(name, "unknown")
        by_prec[p] = by_prec.get(p, 0) + m
    integer = sum(m for p, m in by_prec.items() if p.lower() in INTEGER_PRECISIONS)
    n_int = sum(name in covered and is_integer_kernel(covered[name]) for name in macs)
    n_unknown = sum(n not in seen for n in macs)
    return PrecisionSummary(integer / total if total else float("nan"), n_int, len(macs) - n_int - n_unknown, n_unknown, total,
                            tuple(sorted(by_prec.items())))


#: Runtime node types that only convert between integer and float: a standalone one is a Q/DQ the runtime did not fuse.
CONVERSION_TYPES = frozenset({"QuantizeLinear", "DequantizeLinear", "FakeQuantize", "DynamicQuantizeLinear"})


@dataclasses.dataclass(frozen=True)
class TimeProfile:
    """Where one inference's time went, by the runtime's own per-node profile (ORT's profiler, OpenVINO's ``PERF_COUNT``).

    total_ms: sum of node times. integer_kernel_share: share of that time in Conv/MatMul kernels that ran in an integer
    precision (:data:`INTEGER_PRECISIONS`). conversion_ms / conversions: time in, and names of, standalone
    quantize/dequantize nodes (:data:`CONVERSION_TYPES`), slowest first. by_kind: ``((layer type, precision), ms)``,
    slowest first.
    """

    total_ms: float
    integer_kernel_share: float
    conversion_ms: float
    conversions: tuple[str, ...]
    by_kind: tuple[tuple[tuple[str, str], float], ...]

    def to_dict(self, top: int = 8) -> dict[str, Any]:
        return {"total_ms": round(self.total_ms, 3), "integer_kernel_share": round(self.integer_kernel_share, 4),
                "conversion_ms": round(self.conversion_ms, 3), "conversions": len(self.conversions),
                "slowest_conversions": list(self.conversions[:top]),
                "by_kind": [{"type": k, "precision": p, "ms": round(ms, 3)} for (k, p), ms in self.by_kind[:top]]}


def time_profile(nodes: Sequence[NodePrecision]) -> TimeProfile:
    """Summarize a runtime's per-node account (nodes without a time are skipped).

    A node counts as an integer kernel when its type names a convolution/matmul kernel and its precision is integer;
    OpenVINO's fused element-wise ``Subgraph`` nodes report the precision of their input, so they are not counted."""
    timed = [n for n in nodes if n.time_ms is not None and n.time_ms >= 0]
    total = sum(n.time_ms or 0.0 for n in timed)
    kinds: dict[tuple[str, str], float] = {}
    for n in timed:
        kinds[(n.op_type, n.precision)] = kinds.get((n.op_type, n.precision), 0.0) + (n.time_ms or 0.0)
    integer = sum(n.time_ms or 0.0 for n in timed if is_integer_kernel(n))
    conv = sorted((n for n in timed if n.op_type in CONVERSION_TYPES), key=lambda n: -(n.time_ms or 0.0))
    return TimeProfile(total, integer / total if total else 0.0, sum(n.time_ms or 0.0 for n in conv), tuple(n.node for n in conv),
                       tuple(sorted(kinds.items(), key=lambda kv: -kv[1])))


def cpu_isa() -> dict[str, Any]:
    """The CPU: ``{"model": name, "machine": arch, "flags": [the ISA_FLAGS it has]}`` (from /proc/cpuinfo on Linux)."""
    name, flags = "", set()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not name:
                name = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    return {"model": name or platform.processor() or platform.machine(), "machine": platform.machine(),
            "flags": [f for f in ISA_FLAGS if f in flags]}


def cpu_label(isa: dict[str, Any] | None = None) -> str:
    """One line naming the CPU for reports and messages: ``"AMD EPYC (x86_64; avx2, fma)"``, from :func:`cpu_isa`
    (or the ``isa`` given, e.g. one recorded on another machine)."""
    isa = cpu_isa() if isa is None else isa
    flags = ", ".join(isa.get("flags") or []) or "no listed ISA extensions"
    return f"{isa.get('model') or 'unknown CPU'} ({isa.get('machine') or '?'}; {flags})"

"""Target-runtime operator support: which nodes a target can run, at which opsets and dtypes.

Two sources of truth:

* **ONNX Runtime execution providers**: the installed ORT's own kernel registry,
  ``onnxruntime.capi._pybind_state.get_all_opkernel_def()`` (each ``KernelDef`` has ``op_name``,
  ``domain``, ``provider``, ``version_range`` and ``type_constraints``). A node is supported when a
  kernel of the provider covers the ``since_version`` of the operator's schema at the model's opset
  (schemas from ``get_all_operator_schema()``, which include ORT's contrib domains) and accepts the
  node's dtypes for every type constraint the kernel names. Only EPs compiled into the installed
  wheel are listed (the CPU wheel lists ``CPUExecutionProvider`` only); a plugin EP loaded with
  ``register_execution_provider_library`` is read via ``get_registered_ep_kernel_defs``.
* **Capability profiles** for other runtimes (TensorRT, OpenVINO, a generic NPU): editable JSON
  files in ``quantkit/profiles/`` (copy one and edit it for a board's SDK). Format::

      {"schema_version": 1, "name": "...", "description": "...", "source": "...",
       "opsets": [min, max],                       # ai.onnx opsets the runtime parses
       "ops": {"Conv": {"opsets": [1, null], "dtypes": ["float32", "int8"]},
               "com.microsoft::QLinearConv": {}},  # domain::op for non-default domains
       "quantization": {"formats": ["qdq"], "per_channel": true,
                        "activation_dtypes": ["uint8", "int8"], "weight_dtypes": ["int8"]}}

  ``opsets`` of an op bound the *model's* opset for that domain (null = open); ``dtypes`` are numpy
  names of the node's first input; a missing key means "no constraint".
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Any

from .._io import read_json
from ..errors import ConfigError
from ..modelio import ModelSource, as_model
from .inspect import STANDARD_DOMAINS

log = logging.getLogger(__name__)

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
ORT_ALIASES = {"cpu": "CPUExecutionProvider", "ort-cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
               "dml": "DmlExecutionProvider", "coreml": "CoreMLExecutionProvider"}
QOPERATOR_PREFIX = ("QLinear", "ConvInteger", "MatMulInteger", "DynamicQuantize")


@dataclasses.dataclass(frozen=True)
class SupportIssue:
    """One node the target cannot run. ``kind`` ∈ {unsupported_op, opset, dtype, custom_domain,
    quantized_pattern}; ``supported_opsets`` lists ``[lo, hi]`` ranges where the op *is* supported."""

    node: str
    domain: str
    op_type: str
    opset: int
    kind: str
    detail: str
    supported_opsets: tuple[tuple[int, int | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["supported_opsets"] = [list(r) for r in self.supported_opsets]
        return d


@dataclasses.dataclass(frozen=True)
class SupportReport:
    """Result of :func:`check_support`. ``source`` says where the capabilities came from."""

    model: str
    target: str
    source: str
    nodes_checked: int
    issues: tuple[SupportIssue, ...]

    @property
    def supported(self) -> bool:
        return not self.issues

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "source": self.source, "nodes_checked": self.nodes_checked,
                "supported": self.supported, "issues": [i.to_dict() for i in self.issues]}

    def __repr__(self) -> str:
        return f"SupportReport({self.target!r}, supported={self.supported}, issues={len(self.issues)}/{self.nodes_checked} nodes)"


def _dtypes(model: Any) -> dict[str, str]:
    """Tensor name -> numpy dtype name, after ONNX shape inference (best effort)."""
    import onnx

    try:
        m = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - dtypes fall back to declared ones
        m = model
    out: dict[str, str] = {}
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        et = vi.type.tensor_type.elem_type
        if et:
            out[vi.name] = onnx.helper.tensor_dtype_to_np_dtype(et).name
    for t in m.graph.initializer:
        out[t.name] = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = onnx.helper.tensor_dtype_to_np_dtype(a.t.data_type).name
    return out


def _onnx_type(np_name: str) -> str:
    return {"float32": "tensor(float)", "float64": "tensor(double)", "bool": "tensor(bool)", "str": "tensor(string)", "object": "tensor(string)"}.get(np_name, f"tensor({np_name})")


@functools.lru_cache(maxsize=1)
def _ort_schemas() -> dict[tuple[str, str], list[Any]]:
    from onnxruntime.capi import _pybind_state as C

    out: dict[tuple[str, str], list[Any]] = {}
    for s in C.get_all_operator_schema():
        out.setdefault((s.domain, s.name), []).append(s)
    for v in out.values():
        v.sort(key=lambda s: s.since_version)
    return out


def _ort_kernels(provider: str) -> dict[tuple[str, str], list[Any]]:
    from onnxruntime.capi import _pybind_state as C

    kernels = [k for k in C.get_all_opkernel_def() if k.provider == provider]
    if not kernels:
        try:
            kernels = list(C.get_registered_ep_kernel_defs(provider))
        except Exception:  # noqa: BLE001 - not a registered plugin EP
            kernels = []
    if not kernels:
        have = sorted({k.provider for k in C.get_all_opkernel_def()})
        raise ConfigError(f"--target {provider}: the installed onnxruntime has no kernels for it (has {', '.join(have)}); install the matching onnxruntime build or use a profile (tensorrt, openvino, npu-generic)")
    out: dict[tuple[str, str], list[Any]] = {}
    for k in kernels:
        out.setdefault((k.domain, k.op_name), []).append(k)
    return out


def _binding(schema: Any, node: Any, dtypes: dict[str, str]) -> dict[str, str]:
    bind: dict[str, str] = {}
    for params, names in ((schema.inputs, node.input), (schema.outputs, node.output)):
        for i, p in enumerate(params):
            if i < len(names) and names[i] and names[i] in dtypes and p.typeStr not in bind:
                bind[p.typeStr] = _onnx_type(dtypes[names[i]])
    return bind


def _check_ort(model: Any, provider: str) -> tuple[list[SupportIssue], int]:
    kernels = _ort_kernels(provider)
    schemas = _ort_schemas()
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
    dtypes = _dtypes(model)
    issues: list[SupportIssue] = []
    for i, node in enumerate(model.graph.node):
        dom = "" if node.domain == "ai.onnx" else node.domain
        name = node.name or f"{node.op_type}_{i}"
        v = opsets.get(dom, 0)
        ks = kernels.get((dom, node.op_type), [])
        if node.op_type == "Constant" and dom == "":
            continue  # constants are folded into initializers at session creation, no kernel runs
        ranges = tuple(sorted({(k.version_range[0], None if k.version_range[1] >= 2**31 - 1 else k.version_range[1]) for k in ks}))
        if not ks:
            kind = "custom_domain" if dom not in STANDARD_DOMAINS else "unsupported_op"
            issues.append(SupportIssue(name, dom, node.op_type, v, kind, f"no {provider} kernel for {dom or 'ai.onnx'}::{node.op_type} in onnxruntime's registry"))
            continue
        cands = [s for s in schemas.get((dom, node.op_type), []) if s.since_version <= v]
        if not cands:
            issues.append(SupportIssue(name, dom, node.op_type, v, "opset", f"{node.op_type} is not defined at opset {v} of {dom or 'ai.onnx'}", ranges))
            continue
        schema = cands[-1]
        in_range = [k for k in ks if k.version_range[0] <= schema.since_version <= k.version_range[1]]
        if not in_range:
            issues.append(SupportIssue(name, dom, node.op_type, v, "opset", f"{provider} has {node.op_type} kernels only for other opset versions (schema since {schema.since_version})", ranges))
            continue
        bind = _binding(schema, node, dtypes)
        if not any(all(bind.get(c) in allowed for c, allowed in k.type_constraints.items() if c in bind) for k in in_range):
            seen = sorted({t for k in in_range for c, ts in k.type_constraints.items() if c in bind for t in ts})
            issues.append(SupportIssue(name, dom, node.op_type, v, "dtype", f"no {provider} kernel for types {bind} (kernels take {', '.join(seen)})", ranges))
    return issues, len(model.graph.node)


def load_profile(target: str) -> tuple[dict[str, Any], str]:
    """Read a capability profile: a packaged name (``tensorrt``) or a path to a JSON file.

    Raises:
        ConfigError: unknown name or a profile with missing/mistyped fields.
        InputFileError: the file is missing or not JSON.
    """
    p = Path(target)
    if not (target.endswith(".json") or p.is_file()):
        p = PROFILES_DIR / f"{target}.json"
        if not p.is_file():
            names = sorted(q.stem for q in PROFILES_DIR.glob("*.json"))
            raise ConfigError(f"--target {target}: unknown target; use cpu, an ORT execution provider name, one of {', '.join(names)}, or a profile .json path")
    data = read_json(p, "capability profile")
    if not isinstance(data, dict) or not isinstance(data.get("ops"), dict) or data.get("schema_version") != 1:
        raise ConfigError(f"{p}: a capability profile needs schema_version: 1 and an 'ops' mapping; copy one from {PROFILES_DIR}")
    for key, spec in data["ops"].items():
        if not isinstance(spec, dict) or set(spec) - {"opsets", "dtypes", "note"}:
            raise ConfigError(f"{p}: ops.{key} must be a mapping with only 'opsets', 'dtypes', 'note'")
    return data, str(p)


def _in(v: int, rng: Any) -> bool:
    lo, hi = (list(rng or []) + [None, None])[:2]
    return (lo is None or v >= lo) and (hi is None or v <= hi)


def _check_profile(model: Any, profile: dict[str, Any]) -> tuple[list[SupportIssue], int]:
    ops: dict[str, dict[str, Any]] = profile["ops"]
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
    dtypes = _dtypes(model)
    issues: list[SupportIssue] = []
    if not _in(opsets.get("", 0), profile.get("opsets")):
        issues.append(SupportIssue("<model>", "", "<opset>", opsets.get("", 0), "opset", f"the model's ai.onnx opset {opsets.get('', 0)} is outside the profile's {profile.get('opsets')}"))
    init = {t.name for t in model.graph.initializer}
    quant = profile.get("quantization", {})
    for i, node in enumerate(model.graph.node):
        dom = "" if node.domain == "ai.onnx" else node.domain
        name = node.name or f"{node.op_type}_{i}"
        key = node.op_type if dom == "" else f"{dom}::{node.op_type}"
        v = opsets.get(dom, 0)
        spec = ops.get(key)
        if spec is None:
            kind = "custom_domain" if dom not in STANDARD_DOMAINS else "unsupported_op"
            issues.append(SupportIssue(name, dom, node.op_type, v, kind, f"{key} is not in the profile"))
            continue
        if not _in(v, spec.get("opsets")):
            rng = spec["opsets"]
            issues.append(SupportIssue(name, dom, node.op_type, v, "opset", f"{key} supported only at opsets {rng}", ((rng[0], rng[1]),)))
            continue
        dt = dtypes.get(node.input[0]) if node.input else None
        if "dtypes" in spec and dt is not None and dt not in spec["dtypes"]:
            issues.append(SupportIssue(name, dom, node.op_type, v, "dtype", f"{key} input dtype {dt} not in {spec['dtypes']}"))
        issues.extend(_check_quant(node, name, v, dtypes, init, quant, model))
    return issues, len(model.graph.node)


def _check_quant(node: Any, name: str, v: int, dtypes: dict[str, str], init: set[str], quant: dict[str, Any], model: Any) -> list[SupportIssue]:
    """Quantized patterns: QOperator vs QDQ format, per-channel weights, activation/weight dtypes."""
    import onnx

    out: list[SupportIssue] = []
    if not quant:
        return out
    fmts = quant.get("formats", ["qdq", "qoperator"])
    if node.op_type.startswith(QOPERATOR_PREFIX) and "qoperator" not in fmts:
        out.append(SupportIssue(name, node.domain, node.op_type, v, "quantized_pattern", f"QOperator format ({node.op_type}) not supported; quantize with format qdq"))
    if node.op_type == "DequantizeLinear":
        q = node.input[0]
        producer = next((n for n in model.graph.node if q in n.output), None)
        is_weight = q in init or (producer is not None and producer.op_type == "QuantizeLinear" and producer.input[0] in init)
        dt = dtypes.get(q)
        allowed = quant.get("weight_dtypes" if is_weight else "activation_dtypes")
        if allowed is not None and dt is not None and dt not in allowed:
            out.append(SupportIssue(name, node.domain, node.op_type, v, "quantized_pattern", f"{'weight' if is_weight else 'activation'} dtype {dt} not in {allowed}"))
        scale = next((t for t in model.graph.initializer if t.name == node.input[1]), None) if len(node.input) > 1 else None
        if scale is not None and int(onnx.numpy_helper.to_array(scale).size) > 1 and not quant.get("per_channel", True):
            out.append(SupportIssue(name, node.domain, node.op_type, v, "quantized_pattern", "per-channel (per-axis) quantization not supported; quantize with per_channel: false"))
    return out


def check_support(source: ModelSource, target: str) -> SupportReport:
    """Check every node of a model against ``target``.

    Args:
        target: ``cpu`` (or any ``*ExecutionProvider`` name) for ORT's kernel registry; a packaged
            profile name (``tensorrt``, ``openvino``, ``npu-generic``); or a path to a profile JSON.

    Raises:
        ModelError: the model cannot be read. ConfigError: unknown target or malformed profile.
    """
    import onnxruntime

    model, name = as_model(source)
    provider = ORT_ALIASES.get(target.lower(), target if target.endswith("ExecutionProvider") else None)
    if provider is not None:
        issues, n = _check_ort(model, provider)
        src = f"onnxruntime {onnxruntime.__version__} kernel registry ({provider})"
    else:
        profile, path = load_profile(target)
        issues, n = _check_profile(model, profile)
        src = f"profile {path}" + (f" ({profile['source']})" if profile.get("source") else "")
    return SupportReport(name, target, src, n, tuple(issues))


def list_profiles() -> list[str]:
    """Names of the packaged capability profiles."""
    return sorted(q.stem for q in PROFILES_DIR.glob("*.json"))


__all__ = ["SupportIssue", "SupportReport", "check_support", "list_profiles", "load_profile"]

"""Capability profiles: what a runtime that cannot be installed here is documented to run.

Where the runtime is installed, quantkit asks the runtime itself (:mod:`quantkit.intake.support`); a profile
is for the rest (TensorRT, a vendor NPU SDK), and every result from one is labelled documentation-derived.
ONE format and ONE loader (:func:`load_profile`), used by ``quantkit support`` and ``quantkit verify``.

Format (``schema_version: 1``; the packaged ones are the ``*.json`` files next to this module)::

    {"schema_version": 1, "name": "board-x", "description": "...", "source": "where it was transcribed from",
     "provenance": "documentation",             # documentation | hand-written | measured
     "opsets": [min, max],                      # ai.onnx opsets the runtime parses (null = open)
     "domain_opsets": {"ai.onnx": 17},          # optional caps per domain
     "ops": {"Conv": {"opsets": [1, null], "dtypes": ["float32", "int8"], "note": "..."},
             "com.microsoft::QLinearConv": {}},  # domain::op for non-default domains; {} = no constraint
     "quantization": {"formats": ["qdq"], "per_channel": true,
                      "activation_dtypes": ["uint8", "int8"], "weight_dtypes": ["int8"]}}

An op's ``opsets`` bound the *model's* opset for that op's domain; ``dtypes`` are numpy names of the node's
first input. The older short form ``{"name": ..., "opset": {"ai.onnx": 17}, "ops": {"Conv": [1, 21],
"com.microsoft:QLinearConv": [1, 1]}}`` (no ``schema_version``) is read and migrated to this one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .._io import read_json
from ..errors import ConfigError

PROFILES_DIR = Path(__file__).resolve().parent
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training", "com.microsoft",
                              "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc"})
"""Domains ONNX or ONNX Runtime define themselves; anything else is a custom domain."""
PROVENANCES = ("documentation", "hand-written", "measured")
QOPERATOR_PREFIX = ("QLinear", "ConvInteger", "MatMulInteger", "DynamicQuantize")


@dataclasses.dataclass(frozen=True)
class SupportIssue:
    """One node a target cannot run. ``kind`` ∈ {unsupported_op, opset, dtype, custom_domain, quantized_pattern,
    load, run}; ``supported_opsets`` lists ``[lo, hi]`` ranges where the op *is* supported."""

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
class OpSpec:
    """One operator's constraints: model opsets ``(lo, hi)`` (None = open), first-input dtypes (None = any)."""

    opsets: tuple[int | None, int | None] = (None, None)
    dtypes: tuple[str, ...] | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class QuantizationSpec:
    """Quantized patterns: formats (``qdq``, ``qoperator``), per-channel weights, allowed integer dtypes."""

    formats: tuple[str, ...] = ("qdq", "qoperator")
    per_channel: bool = True
    activation_dtypes: tuple[str, ...] | None = None
    weight_dtypes: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class CapabilityProfile:
    """A runtime's documented capabilities (format in the module docstring). ``path`` is where it was read."""

    name: str
    ops: dict[str, OpSpec]
    opsets: tuple[int | None, int | None] = (None, None)
    domain_opsets: dict[str, int] = dataclasses.field(default_factory=dict)
    quantization: QuantizationSpec | None = None
    description: str = ""
    source: str = ""
    provenance: str = "documentation"
    path: str = ""

    @property
    def label(self) -> str:
        """How results from this profile are labelled: ``profile NAME (documentation-derived: SOURCE)``."""
        what = {"documentation": "documentation-derived"}.get(self.provenance, self.provenance)
        return f"profile {self.name} ({what}" + (f": {self.source})" if self.source else ")")

    def check(self, model: Any) -> list[SupportIssue]:
        """Every node of an ``onnx.ModelProto`` the profile says the target cannot run (see :func:`check_profile`)."""
        return check_profile(model, self)

    def __repr__(self) -> str:
        return f"CapabilityProfile({self.name!r}, {len(self.ops)} ops, {self.provenance})"


def list_profiles() -> list[str]:
    """Names of the packaged capability profiles."""
    return sorted(q.stem for q in PROFILES_DIR.glob("*.json"))


def load_profile(target: str | Path) -> CapabilityProfile:
    """Read a capability profile: a packaged name (``tensorrt``) or a path to a JSON file.

    Raises:
        ConfigError: unknown name, or a field with the wrong shape (the message names the file and field).
        InputFileError: the file is missing or not JSON.
    """
    p = Path(target)
    if not (str(target).endswith(".json") or p.is_file()):
        p = PROFILES_DIR / f"{target}.json"
        if not p.is_file():
            raise ConfigError(f"--target {target}: unknown target; use cpu, openvino, an ORT execution provider name, "
                              f"one of the profiles {', '.join(list_profiles())}, or a profile .json path")
    data = read_json(p, "capability profile")
    if not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
        raise ConfigError(f"{p}: a capability profile needs an 'ops' mapping; copy one from {PROFILES_DIR}")
    if "schema_version" not in data:
        data = _migrate_short_form(data, p)
    if data.get("schema_version") != 1:
        raise ConfigError(f"{p}: schema_version {data.get('schema_version')!r} is not supported (this quantkit reads 1)")
    return _parse(data, p)


def _migrate_short_form(data: dict[str, Any], p: Path) -> dict[str, Any]:
    ops = {}
    for k, v in data["ops"].items():
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(i, int) and not isinstance(i, bool) for i in v) and v[0] <= v[1]):
            raise ConfigError(f"{p}: ops.{k} must be [min_opset, max_opset] integers, got {v!r}")
        domain, _, op = str(k).rpartition(":")
        ops[f"{domain.rstrip(':')}::{op}" if domain and domain.rstrip(":") not in ("ai.onnx", "") else op] = {"opsets": list(v)}
    caps = data.get("opset", {})
    if not isinstance(caps, dict) or not all(isinstance(v, int) for v in caps.values()):
        raise ConfigError(f"{p}: 'opset' must map domain to an integer opset, e.g. {{\"ai.onnx\": 17}}")
    return {"schema_version": 1, "name": data.get("name") or p.stem, "ops": ops, "domain_opsets": caps,
            "provenance": data.get("provenance", "hand-written"), "source": data.get("source", "")}


def _pair(v: Any, where: str) -> tuple[int | None, int | None]:
    if v is None:
        return (None, None)
    if not (isinstance(v, list) and len(v) == 2 and all(i is None or (isinstance(i, int) and not isinstance(i, bool)) for i in v)):
        raise ConfigError(f"{where} must be [min, max] (integers or null), got {v!r}")
    return (v[0], v[1])


def _names(v: Any, where: str) -> tuple[str, ...] | None:
    if v is None:
        return None
    if not (isinstance(v, list) and all(isinstance(s, str) for s in v)):
        raise ConfigError(f"{where} must be a list of names, got {v!r}")
    return tuple(v)


def _parse(data: dict[str, Any], p: Path) -> CapabilityProfile:
    known = {"schema_version", "name", "description", "source", "provenance", "opsets", "domain_opsets", "ops", "quantization"}
    extra = sorted(set(data) - known)
    if extra:
        raise ConfigError(f"{p}: unknown field {extra[0]!r}; a profile has {', '.join(sorted(known))}")
    ops = {}
    for key, spec in data["ops"].items():
        if not isinstance(spec, dict) or set(spec) - {"opsets", "dtypes", "note"}:
            raise ConfigError(f"{p}: ops.{key} must be a mapping with only 'opsets', 'dtypes', 'note'")
        ops[str(key)] = OpSpec(_pair(spec.get("opsets"), f"{p}: ops.{key}.opsets"), _names(spec.get("dtypes"), f"{p}: ops.{key}.dtypes"),
                               str(spec.get("note", "")))
    q = data.get("quantization")
    quant = None
    if q is not None:
        if not isinstance(q, dict) or set(q) - {"formats", "per_channel", "activation_dtypes", "weight_dtypes"}:
            raise ConfigError(f"{p}: quantization must be a mapping with formats, per_channel, activation_dtypes, weight_dtypes")
        quant = QuantizationSpec(_names(q.get("formats"), f"{p}: quantization.formats") or ("qdq", "qoperator"), bool(q.get("per_channel", True)),
                                 _names(q.get("activation_dtypes"), f"{p}: quantization.activation_dtypes"),
                                 _names(q.get("weight_dtypes"), f"{p}: quantization.weight_dtypes"))
    caps = data.get("domain_opsets") or {}
    if not isinstance(caps, dict) or not all(isinstance(v, int) for v in caps.values()):
        raise ConfigError(f"{p}: domain_opsets must map a domain to an integer opset")
    prov = data.get("provenance", "documentation")
    if prov not in PROVENANCES:
        raise ConfigError(f"{p}: provenance {prov!r} is not one of {', '.join(PROVENANCES)}")
    return CapabilityProfile(str(data.get("name") or p.stem), ops, _pair(data.get("opsets"), f"{p}: opsets"),
                             {("ai.onnx" if k in ("", "ai.onnx") else k): int(v) for k, v in caps.items()}, quant,
                             str(data.get("description", "")), str(data.get("source", "")), prov, str(p))


def tensor_dtypes(model: Any) -> dict[str, str]:
    """Tensor name -> numpy dtype name, after ONNX shape inference (best effort: declared types otherwise)."""
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


def _in(v: int, rng: tuple[int | None, int | None]) -> bool:
    lo, hi = rng
    return (lo is None or v >= lo) and (hi is None or v <= hi)


def check_profile(model: Any, profile: CapabilityProfile) -> list[SupportIssue]:
    """Every node of ``model`` that ``profile`` says its target cannot run: unknown ops, ops at other opsets or
    dtypes, custom domains, domains above their cap, and quantized patterns (format, per-channel, dtypes)."""
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
    dtypes = tensor_dtypes(model)
    issues: list[SupportIssue] = []
    if not _in(opsets.get("", 0), profile.opsets):
        issues.append(SupportIssue("<model>", "", "<opset>", opsets.get("", 0), "opset", f"the model's ai.onnx opset {opsets.get('', 0)} is outside the profile's {list(profile.opsets)}"))
    used = {n.domain or "" for n in model.graph.node} | {""}
    for dom, cap in sorted(profile.domain_opsets.items()):
        v = opsets.get("" if dom == "ai.onnx" else dom)
        if v is not None and ("" if dom == "ai.onnx" else dom) in used and v > cap:
            issues.append(SupportIssue("<model>", dom, "<opset>", v, "opset", f"opset {dom} {v} > {cap}"))
    init = {t.name for t in model.graph.initializer}
    for i, node in enumerate(model.graph.node):
        dom = "" if node.domain == "ai.onnx" else node.domain
        name = node.name or f"{node.op_type}_{i}"
        key = node.op_type if dom == "" else f"{dom}::{node.op_type}"
        v = opsets.get(dom, 0)
        spec = profile.ops.get(key)
        if spec is None:
            kind = "custom_domain" if dom not in STANDARD_DOMAINS else "unsupported_op"
            issues.append(SupportIssue(name, dom, node.op_type, v, kind, f"{key} is not in the profile"))
            continue
        if not _in(v, spec.opsets):
            issues.append(SupportIssue(name, dom, node.op_type, v, "opset", f"{key} supported only at opsets {list(spec.opsets)}", (spec.opsets,)))  # type: ignore[arg-type]
            continue
        dt = dtypes.get(node.input[0]) if node.input else None
        if spec.dtypes is not None and dt is not None and dt not in spec.dtypes:
            issues.append(SupportIssue(name, dom, node.op_type, v, "dtype", f"{key} input dtype {dt} not in {list(spec.dtypes)}"))
        if profile.quantization is not None:
            issues.extend(_check_quant(node, name, v, dtypes, init, profile.quantization, model))
    return issues


def _check_quant(node: Any, name: str, v: int, dtypes: dict[str, str], init: set[str], quant: QuantizationSpec, model: Any) -> list[SupportIssue]:
    """Quantized patterns: QOperator vs QDQ format, per-channel weights, activation/weight dtypes."""
    import onnx

    out: list[SupportIssue] = []
    if node.op_type.startswith(QOPERATOR_PREFIX) and "qoperator" not in quant.formats:
        out.append(SupportIssue(name, node.domain, node.op_type, v, "quantized_pattern", f"QOperator format ({node.op_type}) not supported; quantize with format qdq"))
    if node.op_type == "DequantizeLinear":
        q = node.input[0]
        producer = next((n for n in model.graph.node if q in n.output), None)
        is_weight = q in init or (producer is not None and producer.op_type == "QuantizeLinear" and producer.input[0] in init)
        dt = dtypes.get(q)
        allowed = quant.weight_dtypes if is_weight else quant.activation_dtypes
        if allowed is not None and dt is not None and dt not in allowed:
            out.append(SupportIssue(name, node.domain, node.op_type, v, "quantized_pattern", f"{'weight' if is_weight else 'activation'} dtype {dt} not in {list(allowed)}"))
        scale = next((t for t in model.graph.initializer if t.name == node.input[1]), None) if len(node.input) > 1 else None
        if scale is not None and int(onnx.numpy_helper.to_array(scale).size) > 1 and not quant.per_channel:
            out.append(SupportIssue(name, node.domain, node.op_type, v, "quantized_pattern", "per-channel (per-axis) quantization not supported; quantize with per_channel: false"))
    return out


__all__ = ["CapabilityProfile", "OpSpec", "PROFILES_DIR", "QuantizationSpec", "STANDARD_DOMAINS", "SupportIssue", "check_profile",
           "list_profiles", "load_profile", "tensor_dtypes"]

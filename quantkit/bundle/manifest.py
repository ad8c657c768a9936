"""The bundle format: ``manifest.json`` as one typed value, shared by :mod:`.build` (writes) and :mod:`.verify` (reads).

Schema 2 (``schema_version: 2``)::

    {"format": "quantkit-bundle", "schema_version": 2,
     "members": {"<name>": {"sha256", "size"}},                     # every other member (manifest excluded)
     "model": {"file", "sha256", "opset": {domain: v}, "ops": ["domain:Op"],
               "input": {"name", "shape", "dtype"},
               "outputs": [{"name", "index", "scale", "atol", "tolerance_source"}]},
     "fp32_model_sha256", "export_note": "export_note.json",
     "record": {"file", "fingerprint", "calibration_set"}, "thresholds": {"file", "fingerprint", "values"},
     "adapter": {"name", "used"},
     "runtime": {tool: version},                                    # the build machine's packages
     "golden_runtime": RuntimeInfo,                                 # who computed the golden INT8 values
     "tolerance": {"steps", "max_mismatch", "fallback_atol", "activation_max_elements"},
     "activations": [{"name", "source", "topo_index", "scale", "atol", "shape"}],
     "golden": {"set": {"set_id", "name"},
                "samples": [{"id", "source", "source_sha256", "raw", "input", "fp32": [...], "int8": [...],
                             "activations": [...], "decision_int8", "decision_fp32"}]},
     "patterns": {"matrix": PatternMatrix, "used": [[pattern, [nodes]]]}}

Golden INT8 values are the **QDQ simulation** (ONNX Runtime with optimizations disabled: ONNX's operator
semantics), so every runtime, ONNX Runtime's own fused kernels included, is verified against the same thing.
``activations`` are the quantized activations of ``model_int8.onnx`` (outputs of its activation
DequantizeLinear nodes) in topological order; each sample stores them flattened and sampled at
``activation_max_elements`` evenly spaced indices (:func:`subsample_indices`). Schema 1 bundles (golden INT8 from
ORT at level ``all``, FP32 activations) are read with no activations (no localisation) and ``max_mismatch`` 0.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from ..errors import VerificationError
from .archive import BUNDLE_FORMAT

SCHEMA_VERSION = 2
BUNDLE_NAME = re.compile(r"^quantkit-bundle-([0-9a-f]{16})\.tar(\.gz)?$")
POINTER_NAME = "bundle.json"


def subsample_indices(n: int, m: int) -> np.ndarray:
    """``min(n, m)`` evenly spaced flat indices into ``n`` elements, ``int64``, sorted, unique."""
    if n <= 0 or m <= 0:
        return np.zeros(0, np.int64)
    return np.unique(np.linspace(0, n - 1, num=min(n, m)).round().astype(np.int64))


def _bad(field: str, why: str) -> VerificationError:
    return VerificationError(f"manifest.json: {field}: {why}; rebuild the bundle with 'quantkit bundle'")


def _get(d: Any, key: str, kind: type | tuple[type, ...], field: str, default: Any = ...) -> Any:
    if not isinstance(d, dict):
        raise _bad(field, "expected a mapping")
    if key not in d:
        if default is ...:
            raise _bad(f"{field}.{key}", "missing")
        return default
    v = d[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind in (int, float, (int, float)):
        raise _bad(f"{field}.{key}", f"expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
    return v


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """A graph output: its name and order, the quantization step it is compared in (``scale``, or None for a float
    output) and the absolute tolerance ``atol`` (``steps * scale``, or ``fallback_atol``)."""

    name: str
    index: int
    scale: float | None
    atol: float
    tolerance_source: str


@dataclasses.dataclass(frozen=True)
class ActivationSpec:
    """A quantized activation of ``model_int8.onnx``: ``name`` (DequantizeLinear output), ``source`` (the float tensor
    it quantizes, named in record.json), its node index, step ``scale``, tolerance ``atol`` and shape."""

    name: str
    source: str
    topo_index: int
    scale: float | None
    atol: float
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class GoldenSample:
    """One golden image: member names of its raw file, input, FP32 and INT8 outputs, sampled activations; decisions."""

    id: str
    source: str
    source_sha256: str
    raw: str
    input: str
    fp32: tuple[str, ...]
    int8: tuple[str, ...]
    activations: tuple[str, ...] = ()
    decision_int8: Any = None
    decision_fp32: Any = None


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """``steps`` quantization steps per element; an output or activation passes when at most ``max_mismatch`` of its
    elements are further off; ``fallback_atol`` for outputs without a step; ``activation_max_elements`` sampled."""

    steps: float = 1.0
    max_mismatch: float = 0.01
    fallback_atol: float = 1e-4
    activation_max_elements: int = 2048


@dataclasses.dataclass(frozen=True)
class BundleManifest:
    """``manifest.json`` (format in the module docstring). ``from_dict`` validates a manifest read from an untrusted
    archive and names the field it refuses (:class:`VerificationError`)."""

    members: dict[str, dict[str, Any]]
    model_sha256: str
    opset: dict[str, int]
    ops: tuple[str, ...]
    input_name: str
    input_shape: tuple[int, ...]
    outputs: tuple[OutputSpec, ...]
    fp32_model_sha256: str
    record_fingerprint: str
    calibration_set: dict[str, Any]
    threshold_fingerprint: str
    threshold_values: dict[str, Any]
    adapter: str | None
    versions: dict[str, Any]
    golden_runtime: dict[str, Any]
    tolerance: Tolerance
    activations: tuple[ActivationSpec, ...]
    golden_set: dict[str, Any]
    samples: tuple[GoldenSample, ...]
    patterns: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": BUNDLE_FORMAT, "schema_version": SCHEMA_VERSION, "members": self.members,
            "model": {"file": "model_int8.onnx", "sha256": self.model_sha256, "opset": self.opset, "ops": list(self.ops),
                      "input": {"name": self.input_name, "shape": list(self.input_shape), "dtype": "float32"},
                      "outputs": [dataclasses.asdict(o) for o in self.outputs]},
            "fp32_model_sha256": self.fp32_model_sha256, "export_note": "export_note.json",
            "record": {"file": "record.json", "fingerprint": self.record_fingerprint, "calibration_set": self.calibration_set},
            "thresholds": {"file": "thresholds.json", "fingerprint": self.threshold_fingerprint, "values": self.threshold_values},
            "adapter": {"name": self.adapter, "used": self.adapter is not None},
            "runtime": self.versions, "golden_runtime": self.golden_runtime, "tolerance": dataclasses.asdict(self.tolerance),
            "activations": [{**dataclasses.asdict(a), "shape": list(a.shape)} for a in self.activations],
            "golden": {"set": self.golden_set, "samples": [{**dataclasses.asdict(s), "fp32": list(s.fp32), "int8": list(s.int8),
                                                            "activations": list(s.activations)} for s in self.samples]},
            "patterns": self.patterns,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BundleManifest":
        """Validate and read a manifest (schema 1 migrated, see the module docstring).

        Raises:
            VerificationError: a field is missing or of the wrong type, or the schema is unknown.
        """
        version = _get(d, "schema_version", int, "manifest")
        if version not in (1, SCHEMA_VERSION):
            raise _bad("schema_version", f"{version} is not supported (this quantkit reads 1 and {SCHEMA_VERSION})")
        model = _get(d, "model", dict, "manifest")
        inp = _get(model, "input", dict, "model")
        outs = tuple(OutputSpec(str(_get(o, "name", str, f"model.outputs[{i}]")), int(_get(o, "index", int, f"model.outputs[{i}]", i)),
                                _num_or_none(o.get("scale"), f"model.outputs[{i}].scale"),
                                float(_get(o, "atol", (int, float), f"model.outputs[{i}]")), str(o.get("tolerance_source", "")))
                     for i, o in enumerate(_get(model, "outputs", list, "model")))
        tol = _get(d, "tolerance", dict, "manifest", {})
        tolerance = Tolerance(float(_get(tol, "steps", (int, float), "tolerance", 1.0)),
                              float(_get(tol, "max_mismatch", (int, float), "tolerance", 0.0 if version == 1 else 0.01)),
                              float(_get(tol, "fallback_atol", (int, float), "tolerance", 1e-4)),
                              int(_get(tol, "activation_max_elements", int, "tolerance", 0)))
        acts = () if version == 1 else tuple(
            ActivationSpec(str(_get(a, "name", str, f"activations[{j}]")), str(a.get("source", "")), int(_get(a, "topo_index", int, f"activations[{j}]")),
                           _num_or_none(a.get("scale"), f"activations[{j}].scale"), float(_get(a, "atol", (int, float), f"activations[{j}]")),
                           tuple(int(v) for v in _get(a, "shape", list, f"activations[{j}]")))
            for j, a in enumerate(_get(d, "activations", list, "manifest", [])))
        golden = _get(d, "golden", dict, "manifest")
        samples = tuple(_sample(s, i, version) for i, s in enumerate(_get(golden, "samples", list, "golden")))
        runtime = _get(d, "runtime", dict, "manifest", {})
        golden_rt = _get(d, "golden_runtime", dict, "manifest", None) if version > 1 else {
            "name": "onnxruntime", "version": str(runtime.get("onnxruntime", "")), "device": ",".join(runtime.get("providers") or []),
            "inference_precision": "f32", "options": {"graph_optimization_level": str(runtime.get("graph_optimization_level", "all"))}}
        rec, ths = _get(d, "record", dict, "manifest"), _get(d, "thresholds", dict, "manifest")
        adapter = _get(d, "adapter", dict, "manifest", {}).get("name")
        return cls(_get(d, "members", dict, "manifest"), str(_get(model, "sha256", str, "model")),
                   {str(k): int(v) for k, v in _get(model, "opset", dict, "model").items()}, tuple(str(o) for o in _get(model, "ops", list, "model")),
                   str(_get(inp, "name", str, "model.input")), tuple(int(v) for v in _get(inp, "shape", list, "model.input")), outs,
                   str(_get(d, "fp32_model_sha256", str, "manifest", "")), str(_get(rec, "fingerprint", str, "record")),
                   dict(rec.get("calibration_set") or {}), str(_get(ths, "fingerprint", str, "thresholds")), dict(ths.get("values") or {}),
                   adapter if isinstance(adapter, str) else None, dict(runtime), dict(golden_rt or {}), tolerance, acts,
                   dict(golden.get("set") or {}), samples, dict(_get(d, "patterns", dict, "manifest", {})), version)


def _num_or_none(v: Any, field: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(field, f"expected a number or null, got {type(v).__name__}")
    return float(v)


def _names(v: Any, field: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _bad(field, "expected a list of member names")
    return tuple(v)


def _sample(s: Any, i: int, version: int) -> GoldenSample:
    f = f"golden.samples[{i}]"
    acts = () if version == 1 else _names(s.get("activations", []), f"{f}.activations")
    return GoldenSample(str(_get(s, "id", str, f)), str(s.get("source", "")), str(s.get("source_sha256", "")), str(s.get("raw", "")),
                        str(_get(s, "input", str, f)), _names(_get(s, "fp32", list, f, []), f"{f}.fp32"), _names(_get(s, "int8", list, f), f"{f}.int8"),
                        acts, s.get("decision_int8"), s.get("decision_fp32"))

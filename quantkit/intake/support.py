"""Target-runtime support: which nodes a target can run, asked of the runtime itself wherever it is installed.

Sources, best first (the report's ``source`` and ``provenance`` say which one answered):

* **The runtime** (``provenance="runtime"``): ``cpu`` (or ``CPUExecutionProvider``, or any execution
  provider this onnxruntime build has) loads the model in ONNX Runtime at the deployment optimization level
  (``all``, ORT's default) and runs it once on probe inputs; ``openvino`` reads it with OpenVINO
  (``read_model`` names operators its ONNX frontend cannot convert), places it with ``query_model`` (per
  operation), compiles it at f32 and runs it once. What the runtime refuses is what is reported, so operators
  ONNX defines as functions (HardSwish, Mish, ...), which ONNX Runtime runs by expanding the function body,
  are not reported. When ORT refuses to load, the node its message names is reported first, followed by what
  its kernel registry predicts for the other nodes.
* **The kernel registry** (``provenance="registry"``) of an execution provider not compiled into the
  installed onnxruntime build (e.g. ``CUDAExecutionProvider`` on a CPU wheel): kernels per op, opset range
  and type constraints (``get_all_opkernel_def``); function-defined operators are not reported.
* **A capability profile** (``provenance="documentation"`` or as the profile says) for runtimes that cannot be
  installed here (``tensorrt``, ``npu-generic``, a board's JSON; :mod:`quantkit.profiles`), and for
  ``openvino`` when the ``openvino`` package is absent.

Probe inputs: random normal for float inputs, zeros for integer inputs (seed 0); a symbolic dimension is 1 for
the first axis and :data:`PROBE_DIM` for the others.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from ..profiles import STANDARD_DOMAINS, CapabilityProfile, SupportIssue, list_profiles, load_profile, tensor_dtypes
from ..runtimes import RuntimeInfo, SupportProbe, available_runtimes, runtime_class
from ..modelio import ModelSource, as_model

log = logging.getLogger(__name__)

ORT_ALIASES = {"cpu": "CPUExecutionProvider", "ort-cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
               "dml": "DmlExecutionProvider", "coreml": "CoreMLExecutionProvider"}
RUNTIME_TARGETS = {"openvino": "openvino"}
PROBE_DIM = 64


@dataclasses.dataclass(frozen=True)
class SupportReport:
    """Result of :func:`check_support`. ``source`` says who answered; ``provenance`` is ``runtime``,
    ``registry`` or the profile's (``documentation``, ``hand-written``); ``runtime`` is set when a runtime loaded the
    model; ``run_error`` is the runtime's message when one inference on probe inputs failed after loading (not an
    unsupported node: data-dependent inputs may be invalid when random; check with real inputs)."""

    model: str
    target: str
    source: str
    nodes_checked: int
    issues: tuple[SupportIssue, ...]
    provenance: str = "runtime"
    runtime: RuntimeInfo | None = None
    run_error: str = ""

    @property
    def supported(self) -> bool:
        return not self.issues

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "source": self.source, "provenance": self.provenance,
                "nodes_checked": self.nodes_checked, "supported": self.supported, "issues": [i.to_dict() for i in self.issues],
                "runtime": self.runtime.to_dict() if self.runtime else None, "run_error": self.run_error}

    def __repr__(self) -> str:
        return f"SupportReport({self.target!r}, supported={self.supported}, issues={len(self.issues)}/{self.nodes_checked} nodes, {self.provenance})"


def probe_feed(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """One input per graph input (initializers excluded): float -> N(0, 1), other types -> zeros; symbolic
    dimensions 1 (first axis) or :data:`PROBE_DIM`."""
    import onnx

    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else np.dtype(np.float32)
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (1 if i == 0 else PROBE_DIM) for i, d in enumerate(tt.shape.dim)]
        feed[vi.name] = rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype)
    return feed


def is_function_op(domain: str, op_type: str, opset: int) -> bool:
    """True when ONNX defines ``op_type`` at ``opset`` as a function (a body of other ops), which runtimes may
    run by expanding it instead of by a kernel of that name (ORT does)."""
    import onnx

    try:
        s = onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain=domain)
    except Exception:  # noqa: BLE001 - SchemaError: not an ONNX-defined op
        return False
    return bool(s.has_function or s.has_context_dependent_function)


def _opsets(model: Any) -> dict[str, int]:
    return {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}


def _issues_from_probe(model: Any, probe: SupportProbe) -> list[SupportIssue]:
    opsets = _opsets(model)
    by_name = {(n.name or f"{n.op_type}_{i}"): n for i, n in enumerate(model.graph.node)}
    out = []
    for i in probe.issues:
        node = by_name.get(i.node)
        dom = (node.domain if node is not None else "") or ""
        kind = "custom_domain" if i.kind == "unsupported_op" and dom not in STANDARD_DOMAINS else i.kind
        out.append(SupportIssue(i.node, dom, i.op_type or (node.op_type if node is not None else ""), opsets.get(dom, 0), kind, i.detail))
    return out


def _check_ort_registry(model: Any, provider: str) -> list[SupportIssue]:
    """Nodes with no kernel of ``provider`` at the model's opset and dtypes (function-defined ops excepted)."""
    from ..runtimes.ort import kernel_defs, operator_schemas

    kernels = kernel_defs(provider)
    schemas = operator_schemas()
    opsets = _opsets(model)
    dtypes = tensor_dtypes(model)
    issues: list[SupportIssue] = []
    for i, node in enumerate(model.graph.node):
        dom = "" if node.domain == "ai.onnx" else node.domain
        name = node.name or f"{node.op_type}_{i}"
        v = opsets.get(dom, 0)
        ks = kernels.get((dom, node.op_type), [])
        if node.op_type == "Constant" and dom == "":
            continue  # constants are folded into initializers at session creation, no kernel runs
        if not ks and is_function_op(dom, node.op_type, v):
            continue  # ORT inlines the function body
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
            if is_function_op(dom, node.op_type, v):
                continue
            issues.append(SupportIssue(name, dom, node.op_type, v, "opset", f"{provider} has {node.op_type} kernels only for other opset versions (schema since {schema.since_version})", ranges))
            continue
        bind = _binding(schema, node, dtypes)
        if not any(all(bind.get(c) in allowed for c, allowed in k.type_constraints.items() if c in bind) for k in in_range):
            seen = sorted({t for k in in_range for c, ts in k.type_constraints.items() if c in bind for t in ts})
            issues.append(SupportIssue(name, dom, node.op_type, v, "dtype", f"no {provider} kernel for types {bind} (kernels take {', '.join(seen)})", ranges))
    return issues


def _onnx_type(np_name: str) -> str:
    return {"float32": "tensor(float)", "float64": "tensor(double)", "bool": "tensor(bool)", "str": "tensor(string)", "object": "tensor(string)"}.get(np_name, f"tensor({np_name})")


def _binding(schema: Any, node: Any, dtypes: dict[str, str]) -> dict[str, str]:
    bind: dict[str, str] = {}
    for params, names in ((schema.inputs, node.input), (schema.outputs, node.output)):
        for i, p in enumerate(params):
            if i < len(names) and names[i] and names[i] in dtypes and p.typeStr not in bind:
                bind[p.typeStr] = _onnx_type(dtypes[names[i]])
    return bind


def _check_ort(model: Any, provider: str, level: str) -> SupportReport:
    from ..runtimes.ort import OrtRuntime, available_providers

    n = len(model.graph.node)
    if provider not in available_providers():
        issues = _check_ort_registry(model, provider)
        src = f"onnxruntime {OrtRuntime.version()} kernel registry ({provider}; not installed in this build, not run)"
        return SupportReport(model.graph.name, provider, src, n, tuple(issues), "registry")
    probe = OrtRuntime.probe_support(model, probe_feed(model), graph_optimization_level=level, providers=(provider,))
    issues = _issues_from_probe(model, probe)
    if not probe.loaded:
        named = {i.node for i in issues}
        issues += [dataclasses.replace(i, detail=f"predicted by the kernel registry: {i.detail}")
                   for i in _check_ort_registry(model, provider) if i.node not in named]
    return SupportReport(model.graph.name, provider, probe.how, n, tuple(issues), "runtime", probe.runtime, probe.run_error)


def _check_runtime(model: Any, runtime: str) -> SupportReport:
    cls = runtime_class(runtime)
    probe = cls.probe_support(model, probe_feed(model))
    return SupportReport(model.graph.name, runtime, probe.how, len(model.graph.node), tuple(_issues_from_probe(model, probe)), "runtime",
                         probe.runtime, probe.run_error)


def _check_profile(model: Any, profile: CapabilityProfile, target: str, why: str = "") -> SupportReport:
    return SupportReport(model.graph.name, target, profile.label + why, len(model.graph.node), tuple(profile.check(model)), profile.provenance)


def check_support(source: ModelSource, target: str, *, level: str = "all") -> SupportReport:
    """Check every node of a model against ``target``.

    Args:
        source: model path or ``onnx.ModelProto``.
        target: ``cpu`` / an ``*ExecutionProvider`` name (ONNX Runtime: run when the build has it, else its
            kernel registry); ``openvino`` (the installed OpenVINO, else its documentation-derived profile);
            a packaged profile name (``tensorrt``, ``npu-generic``); or a path to a profile JSON.
        level: ORT graph optimization level the model will be deployed with (``all`` = ORT's default).

    Raises:
        ModelError: the model cannot be read. ConfigError: unknown target or malformed profile.
    """
    model, name = as_model(source)
    provider = ORT_ALIASES.get(target.lower(), target if target.endswith("ExecutionProvider") else None)
    if provider is not None:
        rep = _check_ort(model, provider, level)
    elif target.lower() in RUNTIME_TARGETS:
        runtime = RUNTIME_TARGETS[target.lower()]
        if runtime in available_runtimes():
            rep = _check_runtime(model, runtime)
        else:
            log.warning("%s is not installed: checking against its documentation-derived profile", runtime)
            rep = _check_profile(model, load_profile(target.lower()), target, f"; {runtime} not installed here, pip install \"quantkit[{runtime}]\" to ask it")
    else:
        rep = _check_profile(model, load_profile(target), target)
    return dataclasses.replace(rep, model=name)


def resolve_target(target: str) -> str:
    """Validate a ``--target`` before anything runs (loads a profile to check it); returns it unchanged.

    Raises:
        ConfigError / InputFileError: an unknown target name or a malformed / missing profile.
    """
    if target.lower() in ORT_ALIASES or target.endswith("ExecutionProvider") or target.lower() in RUNTIME_TARGETS:
        return target
    load_profile(target)
    return target


__all__ = ["ORT_ALIASES", "PROBE_DIM", "SupportIssue", "SupportReport", "check_support", "is_function_op", "list_profiles",
           "load_profile", "probe_feed", "resolve_target"]

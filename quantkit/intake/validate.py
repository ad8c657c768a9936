"""Validation: ONNX's full checker and strict shape inference, each failure explained with a fix.

:func:`validate_model` never raises for an invalid model; it returns a :class:`ValidationReport`
listing :class:`ValidationIssue` records (``severity`` ``error`` or ``warning``). The explanations
map the checker's and shape inference's messages to what a user does next.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..modelio import ModelSource, as_model
from .inspect import STANDARD_DOMAINS

_FIXES: tuple[tuple[str, str], ...] = (
    (r"No opset import for domain|Cannot infer type and shape for node|not a registered|[Uu]nrecognized (domain|op)", "a node uses an operator ONNX does not define (custom domain): add its domain to opset_import, register the custom op's schema/kernels (onnxruntime custom-op library), or re-export without it"),
    (r"No (Op|opset) registered for|No schema registered|is not a registered function/op", "the operator is unknown at this opset or domain: register the custom op's domain (ORT custom-op library) or re-export without it, or upgrade the opset"),
    (r"opset_import|Opset .* is (not|under) (supported|development)|opset version", "upgrade or downgrade the opset with 'quantkit intake' (params intake.min_opset) or re-export at a supported opset"),
    (r"ir_version|IR version", "re-save the model with a current onnx (onnx.save) or re-export it"),
    (r"[Ss]hape|[Dd]imension|[Rr]ank|Inferred", "shapes disagree: re-export with a fixed input shape (quantkit intake fixes it from params intake.input_size) and check reshapes in the exporting code"),
    (r"[Tt]ype|elem_type|data_type", "a tensor has an unexpected dtype: cast in the framework before export, or fix the declared graph input/output types"),
    (r"topologically sorted|not output of any previous nodes|is not a graph input", "the graph references a tensor no node produces: re-export, or run onnx.utils.extract_model to repair"),
    (r"[Ee]xternal|location", "external data is missing or misplaced: keep the data file next to the .onnx file"),
)


def explain(message: str) -> str:
    """What to do about a checker or shape-inference message (best match of :data:`_FIXES`)."""
    for pattern, fix in _FIXES:
        if re.search(pattern, message):
            return fix
    return "re-export the model from the framework; if it persists, report the message upstream"


@dataclasses.dataclass(frozen=True)
class ValidationIssue:
    """``stage`` ∈ {checker, shape_inference, inputs, domains}; ``message`` is the first line of the tool's text."""

    stage: str
    severity: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ValidationReport:
    """Issues found; ``ok`` is True when none is an error (warnings such as dynamic dims allowed)."""

    path: str
    issues: tuple[ValidationIssue, ...]

    @property
    def ok(self) -> bool:
        return not any(i.severity == "error" for i in self.issues)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "issues": [i.to_dict() for i in self.issues]}

    def __repr__(self) -> str:
        return f"ValidationReport(ok={self.ok}, issues={len(self.issues)})"


def _first(e: BaseException) -> str:
    t = str(e).strip()
    lines = [ln for ln in t.splitlines() if ln.strip()]
    return (lines[-1] if lines and lines[0].startswith("[ONNXRuntimeError]") else lines[0]) if lines else type(e).__name__


def validate_model(source: ModelSource) -> ValidationReport:
    """Run ``onnx.checker.check_model(full_check=True)`` (which includes shape inference) and ``onnx.shape_inference.infer_shapes
    (strict_mode=True, data_prop=True)``; flag symbolic input dims and custom domains as warnings.

    Raises:
        ModelError: only when the file cannot be read at all (see :func:`quantkit.modelio.load_model`).
    """
    import onnx

    model, name = as_model(source)
    issues: list[ValidationIssue] = []
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001 - onnx raises ValidationError / InferenceError
        msg = _first(e)
        issues.append(ValidationIssue("checker", "error", msg, explain(msg)))
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001
        msg = _first(e)
        if not any(i.message == msg for i in issues):  # full_check already ran shape inference
            issues.append(ValidationIssue("shape_inference", "error", msg, explain(msg)))
    init = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = [d.dim_param or "?" for d in vi.type.tensor_type.shape.dim if not d.HasField("dim_value")]
        if dims:
            issues.append(ValidationIssue("inputs", "warning", f"input {vi.name!r} has dynamic dims {dims}",
                                          "fix the input shape before quantization (quantkit intake does, from params intake.input_size); ORT's quantization pre-processing fails on dynamic H/W"))
    custom = sorted({n.domain for n in model.graph.node} - STANDARD_DOMAINS)
    for d in custom:
        nodes = [n.name or n.op_type for n in model.graph.node if n.domain == d][:5]
        issues.append(ValidationIssue("domains", "warning", f"custom domain {d!r} used by nodes {nodes}",
                                      "a runtime needs this domain's kernels: register the custom op library (onnxruntime SessionOptions.register_custom_ops_library) or re-export with standard ops"))
    return ValidationReport(name, tuple(issues))

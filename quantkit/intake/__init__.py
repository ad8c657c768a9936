"""Model intake: inspect, validate, target support, opset conversion with semantics, the export note.

See ``docs/ARCHITECTURE.md`` (``quantkit.intake``) for the artifact contract of :func:`intake`.
"""

from ..modelio import load_model
from .inspect import InspectReport, OpCount, TensorInfo, inspect_model
from .notecheck import NoteCheckReport, Probe, check_note, text_probe
from .opset import (
    ConversionLog,
    NumericCheck,
    convert_opset,
    semantics_notes,
    verify_conversion,
)
from .prepare import IntakeConfig, IntakeResult, intake
from .validate import ValidationReport, validate_model

__all__ = [
    "ConversionLog", "InspectReport", "IntakeConfig", "IntakeResult", "NoteCheckReport", "NumericCheck", "OpCount", "Probe",
    "TensorInfo", "ValidationReport", "check_note", "convert_opset", "inspect_model", "intake", "load_model",
    "semantics_notes", "text_probe", "validate_model", "verify_conversion",
]

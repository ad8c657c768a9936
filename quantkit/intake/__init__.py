"""Model intake: inspect, validate, target support, opset conversion with semantics, the export note.

See ``docs/ARCHITECTURE.md`` (``quantkit.intake``) for the artifact contract of :func:`intake`.
"""

from ..modelio import load_model
from .inspect import InspectReport, OpCount, TensorInfo, inspect_model
from .graph import NODE_NAME_RULE, fix_input_shape, name_unnamed_nodes
from .notecheck import NoteCheckReport, check_note
from .probes import PROBES, Probe, ProbeContext, ProbeFactory, register_probe, select_probe, text_map_probe, text_probe
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
    "NODE_NAME_RULE", "PROBES", "ConversionLog", "InspectReport", "IntakeConfig", "IntakeResult", "NoteCheckReport", "NumericCheck",
    "OpCount", "Probe", "ProbeContext", "ProbeFactory", "TensorInfo", "ValidationReport", "check_note", "convert_opset",
    "fix_input_shape", "inspect_model", "intake", "load_model", "name_unnamed_nodes", "register_probe", "select_probe",
    "semantics_notes", "text_map_probe", "text_probe", "validate_model", "verify_conversion",
]

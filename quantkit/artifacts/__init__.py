"""On-disk contracts: every artifact a stage writes or reads is one frozen, typed, schema-versioned value.

Each class has ``load`` (validate, migrate, check; errors name the file and field) and ``save``
(canonical JSON, atomic). Importing this package loads no runtime and no quantization engine.
``docs/ARCHITECTURE.md`` lists which stage writes and which reads each artifact.
"""

from __future__ import annotations

from .base import Artifact
from .drift import DriftResult
from .evaluation import EvalSummary
from .fallback import FallbackResult, KeptNode, LatencyRow
from .record import CalibrationRecord, SetRef, TensorScale, scale_diff
from .thresholds import Binding, Estimate, IntegerThreshold, OperatingPoint, ThresholdSet

__all__ = ["Artifact", "Binding", "CalibrationRecord", "DriftResult", "Estimate", "EvalSummary", "FallbackResult", "IntegerThreshold",
           "KeptNode", "LatencyRow",
           "OperatingPoint", "SetRef", "TensorScale", "ThresholdSet", "scale_diff"]

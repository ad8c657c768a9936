"""On-disk contracts: every artifact a stage writes or reads is one frozen, typed, schema-versioned value.

Each class has ``load`` (validate, migrate, check; errors name the file and field) and ``save``
(canonical JSON, atomic). Importing this package defines every artifact class (each registers its kind with
:mod:`quantkit.kinds`, as the export note does) and loads no runtime and no quantization engine.
``docs/ARCHITECTURE.md`` lists which stage writes and which reads each artifact.
"""

from __future__ import annotations

from .. import note  # noqa: F401 - registers the export note's kind, named when one is passed to a loader here
from .base import Artifact
from .drift import DriftResult
from .evaluation import EvalSummary
from .fallback import FallbackResult, KeptNode, LatencyRow
from .record import CalibrationRecord, SetRef, TensorScale, scale_diff
from .thresholds import Binding, Estimate, IntegerThreshold, OperatingPoint, ThresholdSet
from .verification import DeploymentVerification, Verdict

__all__ = ["Artifact", "Binding", "CalibrationRecord", "DeploymentVerification", "DriftResult", "Estimate", "EvalSummary", "FallbackResult", "IntegerThreshold",
           "KeptNode", "LatencyRow",
           "OperatingPoint", "SetRef", "TensorScale", "ThresholdSet", "Verdict", "scale_diff"]

"""The typed artifacts the bundle reads (one import site)."""

from ..artifacts.record import CalibrationRecord
from ..artifacts.thresholds import ThresholdSet

__all__ = ["CalibrationRecord", "ThresholdSet"]

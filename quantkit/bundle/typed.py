"""The typed artifacts the bundle reads (one import site, so a move of these classes touches one line each)."""

from ..quantize.record import CalibrationRecord
from ..thresholds.binding import ThresholdSet

__all__ = ["CalibrationRecord", "ThresholdSet"]

"""Camera and lighting change detection (see :mod:`quantkit.drift.check`); the result is
:class:`quantkit.artifacts.DriftResult`."""

from ..artifacts.drift import PLAIN_NAMES, Clipping, DriftResult, StatisticChange, StatisticEffect
from .check import check_drift
from .config import DriftConfig
from .statistics import compare_statistics, describe_changes, null_effects

__all__ = ["PLAIN_NAMES", "Clipping", "DriftConfig", "DriftResult", "StatisticChange", "StatisticEffect", "check_drift",
           "compare_statistics", "describe_changes", "null_effects"]

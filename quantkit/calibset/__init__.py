"""Sets of images (calibration, reference, site) as versioned artifacts: manifest, statistics, readers.

See ``docs/ARCHITECTURE.md`` for the folder layout and the manifest schema.
"""

from .catalog import SetDiff, SetListing, diff_sets, list_sets, scan_sets
from .manifest import CalibrationSet, ImageEntry, RegisterResult, compute_set_id, register_set
from .compose import compose_set
from .stats import (
    STAT_COLUMNS,
    compute_stats,
    image_statistics,
    plot_stats,
    read_stats_csv,
    summarize,
)

__all__ = [
    "STAT_COLUMNS",
    "CalibrationSet",
    "CalibrationSetReader",
    "ImageEntry",
    "RegisterResult",
    "SetDiff",
    "SetListing",
    "compose_set",
    "compute_set_id",
    "compute_stats",
    "diff_sets",
    "image_statistics",
    "list_sets",
    "plot_stats",
    "read_stats_csv",
    "register_set",
    "scan_sets",
    "summarize",
]


def __getattr__(name: str):  # lazy: the reader imports onnxruntime
    if name == "CalibrationSetReader":
        from .reader import CalibrationSetReader

        return CalibrationSetReader
    raise AttributeError(name)

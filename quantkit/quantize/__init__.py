"""Quantization engine: typed configs, bounded-memory calibration, the scales record, comparisons.

One verb, :func:`quantize` (the config's type picks static or dynamic). See ``docs/ARCHITECTURE.md``.
"""

from .config import DynamicQuantConfig, StaticQuantConfig, TensorOverride
from .engine import MODEL_FILE, RECORD_FILE, quantize, replay
from .record import CalibrationRecord, TensorScale, scale_diff

__all__ = [
    "MODEL_FILE",
    "RECORD_FILE",
    "CalibrationRecord",
    "DynamicQuantConfig",
    "StaticQuantConfig",
    "TensorComparison",
    "TensorOverride",
    "TensorScale",
    "clipping_rates",
    "compare_layers",
    "export_aimet",
    "import_aimet",
    "plot_layer_errors",
    "precision_fallback",
    "quantize",
    "replay",
    "scale_diff",
]


def __getattr__(name: str):  # lazy: comparison and AIMET pull in onnxruntime sessions / pandas
    if name in ("clipping_rates", "compare_layers", "TensorComparison", "plot_layer_errors"):
        from . import compare

        return getattr(compare, name)
    if name in ("precision_fallback", "FallbackResult"):
        from . import fallback

        return getattr(fallback, name)
    if name in ("export_aimet", "import_aimet"):
        from . import aimet

        return getattr(aimet, name)
    raise AttributeError(name)

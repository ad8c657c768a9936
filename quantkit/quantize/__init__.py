"""Quantization engine: typed configs, bounded-memory calibration, the scales record, comparisons.

One verb, :func:`quantize` (the config's type picks static or dynamic). See ``docs/ARCHITECTURE.md``.
Everything is imported lazily: reading a record (:mod:`quantkit.artifacts`) never loads ONNX Runtime's
quantization tools.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DynamicQuantConfig": "config", "StaticQuantConfig": "config", "TensorOverride": "config",
    "MODEL_FILE": "engine", "RECORD_FILE": "engine", "quantize": "engine", "replay": "engine",
    "quantize_with_ranges": "reuse",
    "clipping_rates": "compare", "compare_layers": "compare", "plot_layer_errors": "compare", "TensorComparison": "compare",
    "precision_fallback": "fallback", "FallbackResult": "fallback", "FallbackConfig": "fallback",
    "export_aimet": "aimet", "import_aimet": "aimet",
    "effective_levels": "outputs", "ChannelRange": "outputs", "OutputLevels": "outputs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(name)

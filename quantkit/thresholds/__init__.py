"""Task adapters and threshold sets bound to a calibration record's scales (docs/ARCHITECTURE.md).

* :mod:`.adapters`: raw outputs -> :class:`Decision` (``db_text``, ``classifier``, ``box_detector``; pluggable).
* :mod:`.integer_domain`: float thresholds -> integer codes of a quantized tensor (ONNX QuantizeLinear).
* :mod:`.binding`: integer-domain values from the quantized graph, append-only history (the set itself is
  :class:`quantkit.artifacts.ThresholdSet`).
* :mod:`.operating_point`: re-derivation on a reference set and the ``bind`` stage.
"""

from ..artifacts.thresholds import Binding, IntegerThreshold, ThresholdSet
from .adapters import (
                       ADAPTERS,
                       Adapter,
                       BoxDetectorAdapter,
                       ClassifierAdapter,
                       DBTextAdapter,
                       Decision,
                       ThresholdSpec,
                       make_adapter,
                       match_count,
                       polygon_iou,
                       register_adapter,
)
from .binding import append_history, integer_domain_for, output_qdq, read_history
from .integer_domain import (
                       decision_code,
                       dequantize_linear,
                       integer_threshold,
                       quantize_linear,
)
from .operating_point import (
                       BindResult,
                       Derivation,
                       ModelPass,
                       OperatingPointConfig,
                       ThresholdsConfig,
                       bind,
                       bootstrap_ratio,
                       derive_operating_point,
                       run_pass,
)

__all__ = [
    "ADAPTERS", "Adapter", "BindResult", "Binding", "BoxDetectorAdapter", "ClassifierAdapter", "DBTextAdapter", "Decision",
    "Derivation", "IntegerThreshold", "ModelPass", "OperatingPointConfig", "ThresholdSet", "ThresholdSpec",
    "ThresholdsConfig", "append_history", "bind", "bootstrap_ratio", "decision_code", "dequantize_linear",
    "derive_operating_point", "integer_domain_for", "integer_threshold", "make_adapter",
    "match_count", "output_qdq", "polygon_iou", "quantize_linear", "read_history", "register_adapter", "run_pass",
]

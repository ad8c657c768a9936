"""Threshold sets bound to a calibration record's scales (docs/ARCHITECTURE.md).

* :mod:`.config`: ``params.yaml: thresholds`` (operating point, bind's agreement floor).
* :mod:`.passes`: one model's outputs over a set, run once and kept.
* :mod:`.search`: re-derivation of the thresholds by mode, with bootstrap estimates (:mod:`.stats`).
* :mod:`.integer_domain`: float thresholds -> integer codes of a quantized tensor (ONNX QuantizeLinear).
* :mod:`.binding`: integer-domain values from the quantized graph, the append-only history.
* :mod:`.bind`: the ``bind`` stage. The threshold set itself is :class:`quantkit.artifacts.ThresholdSet`;
  what the outputs mean is the task adapter's (:mod:`quantkit.tasks`).
"""

from ..artifacts.thresholds import Binding, Estimate, IntegerThreshold, OperatingPoint, ThresholdSet
from .bind import BindResult, bind
from .binding import append_history, integer_domain_for, output_qdq, read_history
from .config import OperatingPointConfig, ThresholdsConfig
from .integer_domain import decision_code, dequantize_linear, integer_threshold, quantize_linear
from .passes import ModelPass, run_pass
from .search import Derivation, derive_operating_point
from .stats import bootstrap_ratio

__all__ = [
    "BindResult", "Binding", "Derivation", "Estimate", "IntegerThreshold", "ModelPass", "OperatingPoint", "OperatingPointConfig",
    "ThresholdSet", "ThresholdsConfig", "append_history", "bind", "bootstrap_ratio", "decision_code", "dequantize_linear",
    "derive_operating_point", "integer_domain_for", "integer_threshold", "output_qdq", "quantize_linear", "read_history", "run_pass",
]

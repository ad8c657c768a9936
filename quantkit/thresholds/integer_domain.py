"""Float thresholds mapped into the integer domain of a quantized output tensor.

An NPU that keeps a QDQ model's output in integers compares integer codes, not floats. For a
threshold ``t`` applied to a tensor quantized with ``scale`` and ``zero_point`` this module gives:

* ``value``: ``QuantizeLinear(t)``, i.e. ``clamp(round_half_to_even(t / scale) + zero_point, qmin, qmax)``
  (ONNX operator spec, ``QuantizeLinear``: "y = saturate((x / y_scale) + y_zero_point) ... rounding to
  nearest ties to even"; https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html). This is the code
  the threshold itself would get; it is NOT in general the right number to compare against.
* ``decision_value``: the integer ``q*`` such that, for every code ``q`` of the tensor,
  ``q >= q*``  <=>  ``dequantize(q) <comparison> t``, where ``dequantize(q) = (q - zero_point) * scale``
  is computed in float32 exactly as ONNX ``DequantizeLinear`` does and ``<comparison>`` is ``>`` or ``>=``.
  ``q*`` is the smallest code whose dequantized value passes; ``q* = qmax + 1`` when no code passes
  (the decision never fires) and ``q* = qmin`` when every code passes.

For decisions made on the *mean* of a region (DB's box score), the exact integer rule is
``sum(q) >= n * (t / scale + zero_point)`` (mean commutes with the affine dequantization), so the
record carries the real-valued ``mean_code_threshold = t / scale + zero_point`` as well.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np

from ..errors import ConfigError

Comparison = Literal[">", ">="]

#: Integer ranges of the ONNX quantized element types (ONNX TensorProto data types).
DTYPE_RANGES: dict[str, tuple[int, int]] = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
}

_ALIASES = {"u8": "uint8", "s8": "int8", "u16": "uint16", "s16": "int16", "quint8": "uint8", "qint8": "int8",
            "quint16": "uint16", "qint16": "int16"}

ROUNDING_RULE = (
    "value = clamp(round_half_to_even(t / scale) + zero_point, qmin, qmax) (ONNX QuantizeLinear); "
    "decide with q >= decision_value, the smallest code q whose float32 (q - zero_point) * scale "
    "passes the comparison (ONNX DequantizeLinear)"
)


def normalize_dtype(dtype: str) -> str:
    """Map ``u8/s8/u16/s16``, ORT ``QUInt8``-style and numpy names to ``uint8/int8/uint16/int16``.

    Raises:
        ConfigError: the dtype is not one of the four integer types QDQ uses.
    """
    key = str(dtype).lower().replace("tensorproto.", "")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_RANGES:
        raise ConfigError(f"quantized dtype {dtype!r} is not supported; use one of {', '.join(DTYPE_RANGES)}")
    return key


def quantize_linear(t: float, scale: float, zero_point: int, dtype: str) -> int:
    """ONNX ``QuantizeLinear`` of one float: ``clamp(round_half_to_even(t / scale) + zp, qmin, qmax)``.

    ``t / scale`` is computed in float32, as ONNX Runtime does. Returns a Python int.
    """
    qmin, qmax = DTYPE_RANGES[normalize_dtype(dtype)]
    x = np.float32(t) / np.float32(scale)
    q = int(np.rint(x)) + int(zero_point)  # np.rint rounds half to even
    return min(max(q, qmin), qmax)


def dequantize_linear(q: np.ndarray | int, scale: float, zero_point: int) -> np.ndarray:
    """ONNX ``DequantizeLinear``: ``(q - zero_point) * scale`` in float32."""
    qq = np.asarray(q, dtype=np.int64) - np.int64(zero_point)
    return qq.astype(np.float32) * np.float32(scale)


def decision_code(t: float, scale: float, zero_point: int, dtype: str, comparison: Comparison = ">") -> int:
    """Smallest code ``q`` in ``[qmin, qmax]`` with ``dequantize(q) <comparison> t`` (float32 arithmetic).

    Returns ``qmax + 1`` when no code passes. The search starts at the analytic estimate
    ``floor(t / scale) + zero_point`` and is verified against the float32 dequantized values, so float
    rounding at a level boundary cannot flip a decision.
    """
    lo, hi = DTYPE_RANGES[normalize_dtype(dtype)]
    tf = np.float32(t)

    def passes(q: int) -> bool:
        v = dequantize_linear(q, scale, zero_point)
        return bool(v > tf) if comparison == ">" else bool(v >= tf)

    est = math.floor(float(t) / float(scale)) + int(zero_point)
    q = min(max(est - 2, lo), hi + 1)
    # walk down while the code below still passes, then up until one passes
    while q > lo and passes(q - 1):
        q -= 1
    while q <= hi and not passes(q):
        q += 1
    return q


@dataclasses.dataclass(frozen=True)
class IntegerThreshold:
    """A float threshold expressed in a quantized tensor's integer domain.

    Fields: ``tensor`` (name of the quantized tensor the threshold applies to), ``dtype``
    (``uint8|int8|uint16|int16``), ``scale`` (float, per-tensor), ``zero_point`` (int), ``float_value``
    (the float threshold), ``comparison`` (``>`` or ``>=`` on dequantized values), ``reduction``
    (``none``: compared per element; ``mean``: compared on a region mean), ``value``
    (QuantizeLinear code), ``decision_value`` (see module docstring), ``mean_code_threshold``
    (``t / scale + zero_point``), ``rounding`` (the rule, in words).
    """

    tensor: str
    dtype: str
    scale: float
    zero_point: int
    float_value: float
    comparison: str
    reduction: str
    value: int
    decision_value: int
    mean_code_threshold: float
    rounding: str = ROUNDING_RULE

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IntegerThreshold":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"integer_domain entry: unknown key {unknown[0]!r}; valid keys are {', '.join(sorted(names))}")
        return cls(**data)

    def decide(self, codes: np.ndarray) -> np.ndarray:
        """Apply the decision to integer codes (element-wise): ``codes >= decision_value`` (bool array)."""
        return np.asarray(codes) >= self.decision_value

    def __repr__(self) -> str:
        return (f"IntegerThreshold({self.tensor!r}, x{self.comparison}{self.float_value} <=> q>={self.decision_value} "
                f"[{self.dtype}, scale={self.scale:.6g}, zp={self.zero_point}])")


def integer_threshold(
    t: float,
    *,
    tensor: str,
    scale: float,
    zero_point: int,
    dtype: str,
    comparison: Comparison = ">",
    reduction: str = "none",
) -> IntegerThreshold:
    """Build the :class:`IntegerThreshold` of float threshold ``t`` on a per-tensor quantized tensor.

    Args:
        t: threshold in the tensor's float units (e.g. probability for a sigmoid map).
        scale: positive float32 scale of the tensor's QuantizeLinear.
        zero_point: the zero point (symmetric quantization: 0 for signed types, 128/32768 for
            unsigned types as ORT writes them; nothing special is assumed here).
        dtype: ``uint8|int8|uint16|int16`` (aliases ``u8, s8, u16, s16`` accepted).
        comparison: ``>`` or ``>=`` applied to dequantized values.
        reduction: ``none`` or ``mean`` (documentation of how the decision uses the tensor).

    Raises:
        ConfigError: non-positive or non-finite scale, zero point outside the dtype's range, bad comparison.
    """
    dt = normalize_dtype(dtype)
    qmin, qmax = DTYPE_RANGES[dt]
    if not (math.isfinite(scale) and scale > 0):
        raise ConfigError(f"tensor {tensor!r}: scale {scale} must be a positive finite number; re-quantize the model")
    if not qmin <= int(zero_point) <= qmax:
        raise ConfigError(f"tensor {tensor!r}: zero point {zero_point} is outside {dt} range [{qmin}, {qmax}]")
    if comparison not in (">", ">="):
        raise ConfigError(f"tensor {tensor!r}: comparison {comparison!r} must be '>' or '>='")
    return IntegerThreshold(
        tensor=tensor,
        dtype=dt,
        scale=float(np.float32(scale)),
        zero_point=int(zero_point),
        float_value=float(t),
        comparison=comparison,
        reduction=reduction,
        value=quantize_linear(t, scale, zero_point, dt),
        decision_value=decision_code(t, scale, zero_point, dt, comparison),
        mean_code_threshold=float(t) / float(np.float32(scale)) + int(zero_point),
    )

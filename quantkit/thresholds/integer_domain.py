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

import math
from typing import Literal

import numpy as np

from ..artifacts.thresholds import IntegerThreshold
from ..dtypes import int_type
from ..errors import ConfigError

Comparison = Literal[">", ">="]

#: Types a threshold can be put into: the 8- and 16-bit types QDQ outputs use (:data:`quantkit.dtypes.INT_TYPES`).
THRESHOLD_TYPES = ("uint8", "int8", "uint16", "int16")

def normalize_dtype(dtype: str) -> str:
    """Map ``u8/s8/u16/s16``, ORT ``QUInt8``-style and numpy names to ``uint8/int8/uint16/int16``.

    Raises:
        ConfigError: the dtype is not one of the four integer types QDQ uses.
    """
    t = int_type(dtype)
    if t.name not in THRESHOLD_TYPES:
        raise ConfigError(f"quantized dtype {dtype!r} is not supported for thresholds; use one of {', '.join(THRESHOLD_TYPES)}")
    return t.name


def quantize_linear(t: float, scale: float, zero_point: int, dtype: str) -> int:
    """ONNX ``QuantizeLinear`` of one float: ``clamp(round_half_to_even(t / scale) + zp, qmin, qmax)``.

    ``t / scale`` is computed in float32, as ONNX Runtime does. Returns a Python int.
    """
    it = int_type(normalize_dtype(dtype))
    qmin, qmax = it.qmin, it.qmax
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
    it = int_type(normalize_dtype(dtype))
    lo, hi = it.qmin, it.qmax
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
    it = int_type(dt)
    qmin, qmax = it.qmin, it.qmax
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

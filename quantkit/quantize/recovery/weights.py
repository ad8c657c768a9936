"""What ORT's QDQ quantizer makes of a weight: the dequantized 8-bit weight, for error estimates.

ORT (``onnxruntime/quantization/quant_utils.py``: ``compute_scale_zp``, ``get_qmin_qmax_for_qType``) quantizes
signed weights symmetrically by default: ``[-127, 127]`` for int8 (the restricted range), scale
``max|w| / 127`` per output channel (per-channel) or over the tensor; the zero point is 0.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import INT_TYPES


def fake_quant_weight(w: np.ndarray, *, weight_type: str = "int8", per_channel: bool = True, axis: int = 0) -> np.ndarray:
    """``dequantize(quantize(w))`` with symmetric scales (float64). Unsigned weight types are not modelled
    (returns ``w``)."""
    t = INT_TYPES[weight_type]
    if t.qmin >= 0:
        return w.astype(np.float64)
    qmax = t.qmax  # symmetric: [-qmax, qmax], e.g. [-127, 127] for int8
    w64 = w.astype(np.float64)
    if per_channel:
        red = tuple(i for i in range(w.ndim) if i != axis)
        absmax = np.max(np.abs(w64), axis=red, keepdims=True)
    else:
        absmax = np.max(np.abs(w64))
    scale = np.where(absmax > 0, absmax / qmax, 1.0)
    return np.clip(np.round(w64 / scale), -qmax, qmax) * scale


__all__ = ["fake_quant_weight"]

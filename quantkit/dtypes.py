"""The one table of integer quantization types: bits, signedness, range, numpy, ONNX and ORT names.

Ranges are the saturation ranges of ONNX ``QuantizeLinear`` (https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html;
4-bit types since opset 21). ``ort_name`` is the member of ``onnxruntime.quantization.QuantType``; numpy has no
4-bit type, so 4-bit values are held in ``int8`` / ``uint8`` arrays. ``int32`` is the type of quantized biases.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .errors import ConfigError


@dataclasses.dataclass(frozen=True)
class IntType:
    """One integer type. ``qmin``/``qmax``: the representable codes; ``onnx``: ``TensorProto`` data type number."""

    name: str
    bits: int
    signed: bool
    qmin: int
    qmax: int
    numpy: type
    onnx: int
    ort_name: str | None

    @property
    def levels(self) -> int:
        """Number of representable codes, ``qmax - qmin + 1``."""
        return self.qmax - self.qmin + 1


INT_TYPES: dict[str, IntType] = {t.name: t for t in (
    IntType("uint8", 8, False, 0, 255, np.uint8, 2, "QUInt8"),
    IntType("int8", 8, True, -128, 127, np.int8, 3, "QInt8"),
    IntType("uint16", 16, False, 0, 65535, np.uint16, 4, "QUInt16"),
    IntType("int16", 16, True, -32768, 32767, np.int16, 5, "QInt16"),
    IntType("uint4", 4, False, 0, 15, np.uint8, 21, "QUInt4"),
    IntType("int4", 4, True, -8, 7, np.int8, 22, "QInt4"),
    IntType("int32", 32, True, -(2**31), 2**31 - 1, np.int32, 6, None),
)}
"""Every integer type quantkit reads or writes, by name."""

QUANT_TYPE_NAMES: tuple[str, ...] = ("uint8", "int8", "uint16", "int16", "uint4", "int4")
"""Types an activation or weight may be quantized to (``params.yaml: quantize.activation_type / weight_type``)."""

_ALIASES = {"u8": "uint8", "s8": "int8", "u16": "uint16", "s16": "int16", "u4": "uint4", "s4": "int4",
            "quint8": "uint8", "qint8": "int8", "quint16": "uint16", "qint16": "int16", "quint4": "uint4", "qint4": "int4"}


def int_type(name: str) -> IntType:
    """The :class:`IntType` for a name (aliases ``u8``, ``s8``, ORT's ``QUInt8`` style and ``TensorProto.UINT8`` accepted).

    Raises:
        ConfigError: not an integer quantization type.
    """
    key = str(name).lower().replace("tensorproto.", "")
    key = _ALIASES.get(key, key)
    if key not in INT_TYPES:
        raise ConfigError(f"quantized dtype {name!r} is not supported; use one of {', '.join(INT_TYPES)}")
    return INT_TYPES[key]


def int_type_of_onnx(data_type: int) -> IntType | None:
    """The :class:`IntType` of an ONNX ``TensorProto`` data type number, or None for a non-integer type."""
    return next((t for t in INT_TYPES.values() if t.onnx == data_type), None)

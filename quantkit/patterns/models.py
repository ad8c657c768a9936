"""Tiny QDQ models of the patterns runtimes get wrong, each with a seeded input.

Every model takes a float image-like input ``[1, 3, 8, 8]`` (:data:`X_SHAPE`), runs one risky quantized construct and ends in a DequantizeLinear whose scale
is known (:attr:`PatternCase.output_scale`), so a runtime's output can be compared with ONNX's reference
evaluator in quantization steps. Families (``Pattern.family``):

* ``concat_scales``: Concat of two branches quantized with scales 25x apart, requantized into an int8 Conv; Concat
  of two branches quantized as int8 (NNCF writes tensors with negative values so), or as uint8 with one scale and
  two zero points, straight into an int8 Conv;
* ``resize``: QDQ around Resize (fused into an 8-bit Resize by ORT) for each mode / coordinate transform /
  nearest rounding: nearest and cubic to a non-integer size (8x8 -> 13x11, where the transforms differ); linear
  2x (8x8 -> 16x16, the upsampling of FPN and U-Net decoders) for every coordinate transform ONNX defines,
  ``tf_crop_and_resize`` with a region of interest, at a calibrated scale and zero point (0.011, 85: those quantkit
  gives the Resize of ``upsample_linear_opset9.onnx`` on photos). At 2x the interpolation weights are 1/4, 1/2 and
  3/4, so with the same input and output scale many interpolated values fall on or within float rounding of half a
  step, where a runtime that interpolates in another order rounds the other way: OpenVINO 2026.4 (f32) on 20-23% of
  the codes (asymmetric) and 6-10% (half_pixel) over 5 seeded inputs, as on that model on photos (23-25%);
* ``per_channel``: per-channel int8 weights of Conv (axis 0), ConvTranspose (axis 1), Gemm (transB, axis 0;
  and axis 1) and MatMul (axis 1) (Gemm and MatMul on the flattened input);
* ``activation_sign``: the same Conv chain with unsigned (zero point 128) and signed (zero point -20) 8-bit
  activations;
* ``activation_16bit``: 16-bit activations (uint16 / int16, opset 21) with int8 weights;
* ``weight_4bit``: int4 / uint4 weights (opset 21) with uint8 activations;
* ``elementwise``: QDQ around Sigmoid (a lookup table once fused), Add and Mul of inputs with different scales;
* ``saturation``: uint8 activations near 255 times int8 weights of +127 (AVX2 without VNNI sums pairs of
  products in 16 bits and saturates);
* ``rounding``: QuantizeLinear of values exactly half-way between two steps (ONNX: round half to even).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_T = {"uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int4": 22, "uint4": 21}  # onnx.TensorProto enum values


@dataclasses.dataclass(frozen=True)
class PatternCase:
    """A built pattern: the model, its input and the scale of its (dequantized) output."""

    model: Any
    feed: dict[str, np.ndarray]
    output_scale: float


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One risky construct. ``build()`` makes its tiny model; ``title`` says what it is."""

    name: str
    family: str
    title: str
    build: Callable[[], PatternCase]

    def __repr__(self) -> str:
        return f"Pattern({self.name!r})"


class _G:
    """A small graph builder: QDQ pairs, quantized weights, nodes, initializers."""

    def __init__(self, opset: int = 19) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.opset = opset
        self.n = 0

    def const(self, name: str, arr: np.ndarray, dtype: str | None = None) -> str:
        from onnx import helper, numpy_helper

        if dtype in ("int4", "uint4"):
            self.inits.append(helper.make_tensor(name, _T[dtype], list(arr.shape), np.asarray(arr).astype(np.int64).ravel().tolist()))
        else:
            self.inits.append(numpy_helper.from_array(np.asarray(arr) if dtype is None else np.asarray(arr).astype(dtype), name))
        return name

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        from onnx import helper

        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def qdq(self, x: str, scale: float, zp: int, dtype: str, name: str) -> str:
        """``x -> QuantizeLinear -> DequantizeLinear`` with a scalar scale and zero point."""
        s = self.const(f"{name}_scale", np.array(scale, np.float32))
        z = self.const(f"{name}_zp", np.array(zp), dtype)
        q = self.node("QuantizeLinear", [x, s, z], f"{name}_q")
        return self.node("DequantizeLinear", [q, s, z], f"{name}_dq")

    def weight(self, w: np.ndarray, axis: int | None, dtype: str, name: str) -> str:
        """Symmetric quantized weight ``w`` (per channel along ``axis``, or per tensor) through DequantizeLinear."""
        qmax = {"int8": 127, "int4": 7, "uint4": 7}[dtype]
        zp_val = 8 if dtype == "uint4" else 0
        if axis is None:
            scale = np.array(np.abs(w).max() / qmax, np.float32)
            s_b = scale
        else:
            red = tuple(i for i in range(w.ndim) if i != axis)
            scale = (np.abs(w).max(axis=red) / qmax).astype(np.float32)
            s_b = scale.reshape([-1 if i == axis else 1 for i in range(w.ndim)])
        q = np.clip(np.round(w / s_b) + zp_val, zp_val - qmax, zp_val + qmax)
        wq = self.const(f"{name}_q", q, dtype)
        s = self.const(f"{name}_scale", scale)
        z = self.const(f"{name}_zp", np.full(np.shape(scale), zp_val), dtype)
        attrs = {"axis": axis} if axis is not None else {}
        return self.node("DequantizeLinear", [wq, s, z], f"{name}_dq", **attrs)

    def model(self, x_shape: Sequence[int], y: str) -> Any:
        from onnx import TensorProto, helper

        g = helper.make_graph(self.nodes, "pattern", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="quantkit.patterns")
        m.ir_version = 10 if self.opset >= 21 else 9
        return m


X_SHAPE = (1, 3, 8, 8)
"""Every pattern takes one image-like float input of this shape (so a bundle can be built from it with image golden data)."""


def _x(shape: Sequence[int] = X_SHAPE, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)}


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(1000 + seed)


def concat_scales() -> PatternCase:
    g, r = _G(19), _rng(1)
    xd = g.qdq("x", 0.03, 128, "uint8", "in")
    a = g.qdq(g.node("Conv", [xd, g.weight(r.normal(0, 0.3, (4, 3, 3, 3)), 0, "int8", "wa")], "conv_a", pads=[1, 1, 1, 1]), 0.02, 128, "uint8", "a")
    b = g.qdq(g.node("Conv", [xd, g.weight(r.normal(0, 8.0, (4, 3, 3, 3)), 0, "int8", "wb")], "conv_b", pads=[1, 1, 1, 1]), 0.5, 128, "uint8", "b")
    c = g.qdq(g.node("Concat", [a, b], "concat", axis=1), 0.5, 128, "uint8", "cat")
    y = g.qdq(g.node("Conv", [c, g.weight(r.normal(0, 0.2, (4, 8, 3, 3)), 0, "int8", "wc")], "conv_c", pads=[1, 1, 1, 1]), 0.25, 128, "uint8", "y")
    return PatternCase(g.model(X_SHAPE, y), _x(), 0.25)


def concat_into_conv(zero_points: tuple[int, int], dtype: str) -> Callable[[], PatternCase]:
    """Two branches quantized with one scale and ``zero_points`` as ``dtype``, concatenated and read straight by an int8
    Conv (NNCF gives a Concat's inputs one quantizer and writes tensors with negative values as int8). Found on
    OpenVINO 2026.4's CPU plugin: with int8 branches the Conv computes on them rounded and clipped to [-128, 127] as if
    their scale were 1 (PP-OCR's DB neck quantized by NNCF, :mod:`quantkit.quantize.nncf_engine`); uint8 branches with
    two zero points are off by tens of steps too; uint8 with one zero point is computed as written."""
    def build() -> PatternCase:
        g, r = _G(19), _rng(7)
        xd = g.qdq("x", 0.03, 128, "uint8", "in")
        a = g.qdq(g.node("Conv", [xd, g.weight(r.normal(0, 0.3, (4, 3, 3, 3)), 0, "int8", "wa")], "conv_a", pads=[1, 1, 1, 1]),
                  0.02, zero_points[0], dtype, "a")
        b = g.qdq(g.node("Conv", [xd, g.weight(r.normal(0, 0.3, (4, 3, 3, 3)), 0, "int8", "wb")], "conv_b", pads=[1, 1, 1, 1]),
                  0.02, zero_points[1], dtype, "b")
        c = g.node("Concat", [a, b], "concat", axis=1)
        y = g.qdq(g.node("Conv", [c, g.weight(r.normal(0, 0.2, (4, 8, 3, 3)), 0, "int8", "wc")], "conv_c", pads=[1, 1, 1, 1]), 0.02, 128, "uint8", "y")
        return PatternCase(g.model(X_SHAPE, y), _x(), 0.02)
    return build


def resize(mode: str, coord: str, nearest: str = "round_prefer_floor") -> Callable[[], PatternCase]:
    def build() -> PatternCase:
        g = _G(19)
        scale, zp = (0.011, 85) if mode == "linear" else (0.03, 128)
        xd = g.qdq("x", scale, zp, "uint8", "in")
        crop = coord == "tf_crop_and_resize"  # a region of interest: rows 1/8..7/8, columns 1/4..3/4 of the image
        roi = g.const("roi", np.array([0, 0, 0.125, 0.25, 1, 1, 0.875, 0.75] if crop else [], np.float32))
        scales = g.const("scales", np.zeros(0, np.float32))
        sizes = g.const("sizes", np.array([1, 3, 16, 16] if mode == "linear" else [1, 3, 13, 11], np.int64))
        attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": coord}
        if mode == "nearest":
            attrs["nearest_mode"] = nearest
        y = g.qdq(g.node("Resize", [xd, roi, scales, sizes], "resize", **attrs), scale, zp, "uint8", "y")
        return PatternCase(g.model(X_SHAPE, y), _x(scale=0.5) if mode == "linear" else _x(), scale)
    return build


def per_channel(op: str, axis: int) -> Callable[[], PatternCase]:
    def build() -> PatternCase:
        g, r = _G(19), _rng(2)
        if op == "Conv":
            w = r.normal(0, 0.3, (6, 3, 3, 3)) * np.geomspace(0.05, 5, 6)[:, None, None, None]
            h = g.node("Conv", [g.qdq("x", 0.03, 128, "uint8", "in"), g.weight(w, axis, "int8", "w")], "conv", pads=[1, 1, 1, 1])
        elif op == "ConvTranspose":
            w = r.normal(0, 0.3, (3, 6, 3, 3)) * np.geomspace(0.05, 5, 6)[None, :, None, None]
            h = g.node("ConvTranspose", [g.qdq("x", 0.03, 128, "uint8", "in"), g.weight(w, axis, "int8", "w")], "convtranspose", strides=[2, 2])
        else:  # Gemm / MatMul on the flattened [1, 192] input
            n, k = 16, int(np.prod(X_SHAPE))
            trans = op == "Gemm" and axis == 0
            w = r.normal(0, 0.1, (n, k) if trans else (k, n))
            w = w * (np.geomspace(0.05, 5, n)[:, None] if trans else np.geomspace(0.05, 5, n)[None, :])
            attrs = {"transB": 1} if trans else {}
            flat = g.node("Flatten", ["x"], "flatten", axis=1)
            h = g.node(op, [g.qdq(flat, 0.03, 128, "uint8", "in"), g.weight(w, axis, "int8", "w")], op.lower(), **attrs)
        y = g.qdq(h, 0.1, 128, "uint8", "y")
        return PatternCase(g.model(X_SHAPE, y), _x(), 0.1)
    return build


def activations(dtype: str) -> Callable[[], PatternCase]:
    """Conv -> Relu -> Conv with ``dtype`` activations (zero points: uint8 128, int8 -20, uint16 32768, int16 -500)."""
    def build() -> PatternCase:
        bits = 16 if "16" in dtype else 8
        zp = {"uint8": 128, "int8": -20, "uint16": 32768, "int16": -500}[dtype]
        fine = 256.0 if bits == 16 else 1.0
        g, r = _G(21 if bits == 16 else 19), _rng(3)
        xd = g.qdq("x", 0.03 / fine, zp, dtype, "in")
        h = g.node("Conv", [xd, g.weight(r.normal(0, 0.3, (6, 3, 3, 3)), 0, "int8", "w1")], "conv1", pads=[1, 1, 1, 1])
        h = g.qdq(g.node("Relu", [g.qdq(h, 0.05 / fine, zp, dtype, "h")], "relu"), 0.05 / fine, zp, dtype, "r")
        y = g.qdq(g.node("Conv", [h, g.weight(r.normal(0, 0.3, (4, 6, 3, 3)), 0, "int8", "w2")], "conv2", pads=[1, 1, 1, 1]), 0.05 / fine, zp, dtype, "y")
        return PatternCase(g.model(X_SHAPE, y), _x(), 0.05 / fine)
    return build


def weights_4bit(dtype: str) -> PatternCase:
    g, r = _G(21), _rng(4)
    xd = g.qdq("x", 0.03, 128, "uint8", "in")
    h = g.node("Conv", [xd, g.weight(r.normal(0, 0.3, (6, 3, 3, 3)), 0, dtype, "w")], "conv", pads=[1, 1, 1, 1])
    y = g.qdq(h, 0.05, 128, "uint8", "y")
    return PatternCase(g.model(X_SHAPE, y), _x(), 0.05)


def elementwise(op: str) -> PatternCase:
    """QDQ around an element-wise op that ORT fuses into an 8-bit kernel (``QLinearSigmoid`` is a lookup table;
    ``QLinearAdd`` / ``QLinearMul`` requantize two inputs of different scales)."""
    g = _G(19)
    xd = g.qdq("x", 0.05, 128, "uint8", "in")
    if op == "Sigmoid":
        y = g.qdq(g.node("Sigmoid", [xd], "sigmoid"), 1 / 255, 0, "uint8", "y")
        return PatternCase(g.model(X_SHAPE, y), _x(scale=3.0), 1 / 255)
    other = g.qdq(g.node("Mul", [xd, g.const("k", np.array(0.37, np.float32))], "scale_branch"), 0.013, 100, "uint8", "b")
    y = g.qdq(g.node(op, [xd, other], op.lower()), 0.07 if op == "Add" else 0.02, 120, "uint8", "y")
    return PatternCase(g.model(X_SHAPE, y), _x(scale=2.0), 0.07 if op == "Add" else 0.02)


def conv_sigmoid_fine_output() -> PatternCase:
    """int8 Conv requantized to a coarse scale (0.057), then Sigmoid quantized to 1/255: a one-step rounding
    difference of the Conv output moves the Sigmoid output by up to 0.25 * 0.057 * 255 = 3.6 steps (YOLOX's SiLU)."""
    g, r = _G(19), _rng(6)
    xd = g.qdq("x", 0.03, 128, "uint8", "in")
    h = g.qdq(g.node("Conv", [xd, g.weight(r.normal(0, 0.5, (8, 3, 3, 3)), 0, "int8", "w")], "conv", pads=[1, 1, 1, 1]), 0.057, 128, "uint8", "h")
    y = g.qdq(g.node("Sigmoid", [h], "sigmoid"), 1 / 255, 0, "uint8", "y")
    return PatternCase(g.model(X_SHAPE, y), _x(), 1 / 255)


def saturation_u8s8() -> PatternCase:
    """uint8 activations near 255 times int8 weights of +127: adjacent products summed in 16 bits overflow
    (255 * 127 * 2 = 64770 > 32767) on x86 CPUs without VNNI (AVX2 ``vpmaddubsw``), unless the runtime guards."""
    g = _G(19)
    xd = g.qdq("x", 1 / 255, 0, "uint8", "in")
    y = g.qdq(g.node("Conv", [xd, g.weight(np.ones((4, 3, 1, 1)), 0, "int8", "w")], "conv"), 3 / 255, 0, "uint8", "y")
    x = np.random.default_rng(5).uniform(0.9, 1.0, X_SHAPE).astype(np.float32)
    return PatternCase(g.model(X_SHAPE, y), {"x": x}, 3 / 255)


def rounding() -> PatternCase:
    """Values exactly half-way between int8 steps, quantized and passed through a 1x1 Conv of identity weights."""
    g = _G(19)
    s = 0.1
    xd = g.qdq("x", s, 0, "int8", "in")
    y = g.qdq(g.node("Conv", [xd, g.weight(np.eye(3).reshape(3, 3, 1, 1), 0, "int8", "w")], "conv"), s, 0, "int8", "y")
    k = np.arange(-96, 96, dtype=np.float32).reshape(X_SHAPE)
    return PatternCase(g.model(X_SHAPE, y), {"x": ((k + 0.5) * s).astype(np.float32)}, s)


PATTERNS: tuple[Pattern, ...] = (
    Pattern("concat_scales_int8_conv", "concat_scales", "Concat of inputs quantized with scales 25x apart, into an int8 Conv", concat_scales),
    Pattern("concat_int8_conv", "concat_scales", "Concat of int8 inputs (zero points 0, -24; NNCF's signed activations) into an int8 Conv",
            concat_into_conv((0, -24), "int8")),
    Pattern("concat_zero_points_conv", "concat_scales", "Concat of uint8 inputs with one scale, zero points 128 and 104, into an int8 Conv",
            concat_into_conv((128, 104), "uint8")),
    *(Pattern(f"resize_{m}_{c}" + (f"_{n}" if m == "nearest" else ""), "resize",
              f"QDQ Resize mode={m}, coordinates={c}" + (f", nearest={n}" if m == "nearest" else ", 2x upsampling" if m == "linear" else ""),
              resize(m, c, n))
      for m, c, n in [("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
                      ("nearest", "align_corners", "round_prefer_ceil"), ("nearest", "pytorch_half_pixel", "round_prefer_floor"),
                      ("linear", "half_pixel", ""), ("linear", "asymmetric", ""), ("linear", "align_corners", ""),
                      ("linear", "pytorch_half_pixel", ""), ("linear", "half_pixel_symmetric", ""), ("linear", "tf_crop_and_resize", ""),
                      ("cubic", "half_pixel", "")]),
    Pattern("per_channel_conv_axis0", "per_channel", "per-channel int8 Conv weights, axis 0", per_channel("Conv", 0)),
    Pattern("per_channel_convtranspose_axis1", "per_channel", "per-channel int8 ConvTranspose weights, axis 1 (output channels)", per_channel("ConvTranspose", 1)),
    Pattern("per_channel_gemm_transb_axis0", "per_channel", "per-channel int8 Gemm weights [N, K], transB=1, axis 0", per_channel("Gemm", 0)),
    Pattern("per_channel_gemm_axis1", "per_channel", "per-channel int8 Gemm weights [K, N], axis 1", per_channel("Gemm", 1)),
    Pattern("per_channel_matmul_axis1", "per_channel", "per-channel int8 MatMul weights [K, N], axis 1", per_channel("MatMul", 1)),
    Pattern("activations_uint8", "activation_sign", "uint8 activations (zero point 128), int8 weights", activations("uint8")),
    Pattern("activations_int8", "activation_sign", "int8 activations (zero point -20), int8 weights", activations("int8")),
    Pattern("activations_uint16", "activation_16bit", "uint16 activations, int8 weights (opset 21)", activations("uint16")),
    Pattern("activations_int16", "activation_16bit", "int16 activations, int8 weights (opset 21)", activations("int16")),
    Pattern("weights_int4", "weight_4bit", "int4 per-channel Conv weights, uint8 activations (opset 21)", lambda: weights_4bit("int4")),
    Pattern("weights_uint4", "weight_4bit", "uint4 per-channel Conv weights, uint8 activations (opset 21)", lambda: weights_4bit("uint4")),
    Pattern("qdq_sigmoid", "elementwise", "QDQ around Sigmoid (ORT: 8-bit lookup table, QLinearSigmoid)", lambda: elementwise("Sigmoid")),
    Pattern("conv_sigmoid_fine_output", "elementwise", "int8 Conv at a coarse scale into Sigmoid quantized to 1/255 (YOLOX SiLU)", conv_sigmoid_fine_output),
    Pattern("qdq_add_mixed_scales", "elementwise", "QDQ Add of two inputs with different scales and zero points (QLinearAdd)", lambda: elementwise("Add")),
    Pattern("qdq_mul_mixed_scales", "elementwise", "QDQ Mul of two inputs with different scales and zero points (QLinearMul)", lambda: elementwise("Mul")),
    Pattern("saturation_u8s8", "saturation", "uint8 activations near 255 x int8 weights +127 (16-bit overflow without VNNI)", saturation_u8s8),
    Pattern("quantize_round_half", "rounding", "QuantizeLinear of values half-way between steps (ONNX: round half to even)", rounding),
)
"""Every pattern of the suite, in the order ``quantkit doctor`` prints them."""


def get_pattern(name: str) -> Pattern:
    """The pattern called ``name``.

    Raises:
        KeyError: no such pattern.
    """
    for p in PATTERNS:
        if p.name == name:
            return p
    raise KeyError(name)

"""Integer-domain thresholds: ONNX QuantizeLinear rounding and exact decision codes for u8/s8/u16/s16."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.errors import ConfigError
from quantkit.dtypes import int_type
from quantkit.thresholds.integer_domain import dequantize_linear, integer_threshold, quantize_linear

CASES = [  # (dtype, scale, zero_point): asymmetric and symmetric for each type
    ("uint8", 1 / 255, 0), ("uint8", 0.0123, 37), ("uint8", 1 / 127.5, 128),
    ("int8", 1 / 127, 0), ("int8", 0.0041, -100),
    ("uint16", 1 / 65535, 0), ("uint16", 3.1e-5, 32768),
    ("int16", 1 / 32767, 0), ("int16", 2.7e-5, -20000),
]


@pytest.mark.parametrize("dtype,scale,zp", CASES)
@pytest.mark.parametrize("cmp", [">", ">="])
def test_decision_code_matches_dequantized_comparison_for_every_code(dtype, scale, zp, cmp):
    lo, hi = int_type(dtype).qmin, int_type(dtype).qmax
    codes = np.arange(lo, hi + 1)
    deq = dequantize_linear(codes, scale, zp)
    for t in [0.0, 0.1, 0.3, 0.5, 0.7, 0.999, float(deq[len(deq) // 3]), float(deq[len(deq) // 2])]:
        it = integer_threshold(t, tensor="p", scale=scale, zero_point=zp, dtype=dtype, comparison=cmp)
        want = deq > np.float32(t) if cmp == ">" else deq >= np.float32(t)
        np.testing.assert_array_equal(it.decide(codes), want)


def test_exact_level_boundary_differs_between_gt_and_ge():
    t = float(dequantize_linear(77, 1 / 255, 0))  # a value the tensor can hold exactly
    assert integer_threshold(t, tensor="p", scale=1 / 255, zero_point=0, dtype="u8", comparison=">").decision_value == 78
    assert integer_threshold(t, tensor="p", scale=1 / 255, zero_point=0, dtype="u8", comparison=">=").decision_value == 77


def test_db_default_thresholds_on_a_unit_uint8_scale():
    it = integer_threshold(0.3, tensor="sigmoid_0.tmp_0", scale=1 / 255, zero_point=0, dtype="u8")
    assert (it.value, it.decision_value) == (76, 77)  # 76.5 rounds half to even -> 76; 76/255 < 0.3 so decide q >= 77
    assert it.mean_code_threshold == pytest.approx(76.5, rel=1e-6)


def test_never_and_always_fire():
    never = integer_threshold(0.99, tensor="p", scale=0.001, zero_point=0, dtype="int8")  # max value 0.127
    assert never.decision_value == 128 and not never.decide(np.arange(-128, 128)).any()
    always = integer_threshold(-1.0, tensor="p", scale=0.001, zero_point=0, dtype="uint8")
    assert always.decision_value == 0 and always.decide(np.arange(256)).all()


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_quantize_linear_agrees_with_onnxruntime(dtype):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    elem = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "uint16": TensorProto.UINT16, "int16": TensorProto.INT16}[dtype]
    scale, zp = (0.02, 3) if dtype in ("uint8", "int8") else (0.0002, 7)
    x = np.array([0.01, 0.03, 0.05, 0.07, 0.3, -0.5, 100.0, -100.0, 0.0001, 0.0003], np.float32)
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])],
                          [helper.make_tensor_value_info("y", elem, [len(x)])],
                          [helper.make_tensor("s", TensorProto.FLOAT, [], [scale]), helper.make_tensor("z", elem, [], [zp])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert [quantize_linear(float(v), scale, zp, dtype) for v in x] == y.astype(int).tolist()


def test_bad_scale_zero_point_and_dtype_are_one_line_errors():
    with pytest.raises(ConfigError, match="scale .* positive"):
        integer_threshold(0.3, tensor="p", scale=0.0, zero_point=0, dtype="u8")
    with pytest.raises(ConfigError, match="outside int8 range"):
        integer_threshold(0.3, tensor="p", scale=0.1, zero_point=200, dtype="s8")
    with pytest.raises(ConfigError, match="not supported"):
        integer_threshold(0.3, tensor="p", scale=0.1, zero_point=0, dtype="float8")

"""A threshold outside the float range its quantized output represents is refused at bind (issue #30: score_thresh 0.4
became ``q >= 256`` on a uint8 output calibrated to a max of 0.30, and bind passed silently)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import ThresholdRangeError
from quantkit.tasks import TaskConfig
from quantkit.thresholds import integer_domain_for, integer_threshold
from quantkit.thresholds.binding import check_representable


def _qdq_map(path: Path, vmax: float, dtype: str = "uint8", zero_point: int = 0) -> Path:
    """x [1, 1, 8, 8] -> QuantizeLinear -> DequantizeLinear -> prob: a probability map quantized to [0, vmax]."""
    np_dtype = np.uint8 if dtype == "uint8" else np.int8
    qmax = 255 if dtype == "uint8" else 127
    scale = np.float32(vmax / (qmax - zero_point))
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["prob"])],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1, 8, 8])],
        [numpy_helper.from_array(np.array(scale, np.float32), "s"), numpy_helper.from_array(np.array(zero_point, np_dtype), "z")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _db(thresh: float):
    return TaskConfig.from_dict({"adapter": "db_text", "options": {"thresh": thresh, "box_thresh": 0.2}}).make()


def test_a_threshold_above_the_calibrated_max_is_refused_with_the_range_and_the_fix(tmp_path):
    model = _qdq_map(tmp_path / "m.onnx", 0.30)
    with pytest.raises(ThresholdRangeError) as e:
        integer_domain_for(_db(0.4), {"thresh": 0.4, "box_thresh": 0.2}, model)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{model}: threshold thresh 0.4 is outside the float range [0, 0.3] that tensor 'prob' (uint8, scale 0.001176, zero point 0)")
    assert "q >= 256 can never fire" in msg
    assert "set task.options.thresh inside that range, or widen the tensor's range with quantize.tensor_overrides.prob: {rmax: 0.4}" in msg


def test_a_threshold_inside_the_range_gets_its_integer_form(tmp_path):
    model = _qdq_map(tmp_path / "m.onnx", 0.30)
    got = integer_domain_for(_db(0.25), {"thresh": 0.25, "box_thresh": 0.2}, model)
    # 0.25 / (0.3 / 255) = 212.5: code 213 is the first whose dequantized value exceeds 0.25
    assert got["thresh"].decision_value == 213 and got["thresh"].tensor == "prob"
    s, code = np.float32(0.3 / 255), got["box_thresh"].decision_value  # box_thresh compares with '>=' (mean of a region)
    assert np.float32(code - 1) * s < np.float32(0.2) <= np.float32(code) * s and code in (170, 171)


def test_the_top_code_itself_is_representable_but_not_above_it(tmp_path):
    """A threshold just below the top of the range fires on the top code; one at the top with '>' cannot fire."""
    model = _qdq_map(tmp_path / "m.onnx", 0.30)
    assert integer_domain_for(_db(0.299), {"thresh": 0.299, "box_thresh": 0.2}, model)["thresh"].decision_value == 255
    with pytest.raises(ThresholdRangeError, match=r"q >= 256 can never fire"):
        integer_domain_for(_db(0.3), {"thresh": 0.3, "box_thresh": 0.2}, model)


def test_a_threshold_below_the_range_always_fires_and_is_refused():
    """A representable range always holds 0 (the zero point is a code), so only a negative value on the tensor's scale
    is below it, e.g. the logit of a small probability where the task applies a sigmoid to the tensor."""
    it = integer_threshold(-4.595, tensor="logits", scale=5.0 / 127, zero_point=-128 + 51, dtype="int8")  # represents [-2.008, 8.031]
    with pytest.raises(ThresholdRangeError) as e:
        check_representable("score_thresh", 0.01, it, "m.onnx")
    msg = str(e.value)
    assert msg.startswith("m.onnx: threshold score_thresh 0.01 (-4.595 on the tensor's scale) is outside the float range [-2.008, 8.031]")
    assert "q >= -128 fires on every value" in msg and "quantize.tensor_overrides.logits: {rmin: -4.595}" in msg

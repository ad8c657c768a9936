"""bind's and evaluate's likely causes of low agreement: read from the record, in order, each with its params fix."""

from __future__ import annotations

from quantkit.artifacts import CalibrationRecord, SetRef
from quantkit.thresholds.causes import causes_hint, likely_causes

COLLAPSED = {"tensor": "det", "axis": 2, "channels": [4], "levels": [0.4], "floor": 16.0, "of_channels": 5}


def _record(config: dict, calibration: dict | None = None, mode: str = "static", cal: SetRef | None = None) -> CalibrationRecord:
    cal = cal if cal is not None else SetRef(name="cam1-day", set_id="s" * 64, camera="cam1", lighting="day", count=64)
    return CalibrationRecord(fingerprint="a" * 64, model_digest="m" * 64, quantized_model_digest="", calibration_set=None if mode == "dynamic" else cal,
                             config=config, config_hash="", opset_before=13, opset_after=13, versions={}, tensors=(), mode=mode,
                             calibration=calibration or {})


def test_per_tensor_record_lists_per_channel_first_then_collapsed_activation_calibration():
    rec = _record({"per_channel": False, "activation_type": "uint8"}, {"images": 64, "collapsed_outputs": [COLLAPSED]})
    causes = likely_causes(rec, SetRef(name="cam2-night", camera="cam2", lighting="night"))
    assert [c.name for c in causes] == ["per_channel", "collapsed_outputs", "activation_type", "calibration_set"]
    assert causes[0].fix == "set quantize.per_channel: true"
    assert "output 'det': 1 of 5 channels span fewer than 16 quantization steps" in causes[1].evidence
    assert "quantize.tensor_overrides.det.quant_type: uint16" in causes[1].fix
    assert causes[2].fix == "set quantize.activation_type: uint16 (needs quantize.format: qdq)"
    assert causes[3].evidence == "calibrated on 'cam1-day' (64 images), compared on 'cam2-night' (camera cam1 vs cam2, lighting day vs night)"
    hint = causes_hint(causes)
    assert hint.startswith("likely causes, most likely first: (1) per-channel weights are off") and "\n" not in hint
    assert hint.index("(2) output 'det'") < hint.index("(3) uint8 activations") < hint.index("(4) calibrated on")


def test_per_channel_is_not_blamed_when_the_record_has_it_on_and_16_bit_activations_drop_that_cause():
    causes = likely_causes(_record({"per_channel": True, "activation_type": "uint16"}), SetRef(name="ref", camera="cam1", lighting="day"))
    assert [c.name for c in causes] == ["collapsed_outputs", "calibration_set"]
    assert "no collapsed output flagged" in causes[0].evidence and "quantkit fallback" in causes[0].fix
    assert causes[1].evidence == "calibrated on 'cam1-day'"  # same camera and lighting: nothing to point at


def test_a_dynamic_record_points_at_static_quantization():
    (cause,) = likely_causes(_record({"per_channel": False}, mode="dynamic"))
    assert cause.name == "dynamic" and "'quantize' section" in cause.fix

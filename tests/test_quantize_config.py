"""Quantization configs and the ORT adapter: defaults, strictness, every rejected combination."""

from __future__ import annotations

import inspect

import pytest

from quantkit.errors import ConfigError, UnsupportedOptionError
from quantkit.quantize import DynamicQuantConfig, StaticQuantConfig, TensorOverride, ort_bridge


def test_static_defaults_equal_ort_quantize_static_defaults():
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    ort = inspect.signature(quantize_static).parameters
    kw = ort_bridge.static_kwargs(StaticQuantConfig(), ["Conv"], [])
    assert ort["calibrate_method"].default == kw["calibrate_method"] == CalibrationMethod.MinMax
    assert ort["quant_format"].default == kw["quant_format"] == QuantFormat.QDQ
    # per-channel weights by default (ORT's advice for CNNs), where the entry point's signature says per-tensor
    assert ort["per_channel"].default is False and kw["per_channel"] is True
    assert ort["reduce_range"].default is kw["reduce_range"] is False
    assert kw["weight_type"] == QuantType.QInt8 == ort["weight_type"].default
    # quantkit's activation default is uint8, the type ORT's docs recommend for x86 CPUs (the entry point's default is int8)
    assert kw["activation_type"] == QuantType.QUInt8
    assert kw["extra_options"] == {"ActivationSymmetric": False}  # nothing ORT would not read
    assert ort_bridge.calibrator_options(StaticQuantConfig()) == {}


def test_round_trip_and_hash():
    c = StaticQuantConfig(method="percentile", percentile=99.9, num_bins=1024, per_channel=True,
                          tensor_overrides={"t": TensorOverride(rmin=-1.0, rmax=2.0)}, nodes_to_exclude=("conv1",))
    d = c.to_dict()
    assert StaticQuantConfig.from_dict(d) == c
    assert StaticQuantConfig.from_dict(d).config_hash() == c.config_hash()
    assert c.config_hash() != StaticQuantConfig().config_hash()


@pytest.mark.parametrize("fields, match", [
    ({"method": "minmax", "percentile": 99.9}, "percentile: only used by method 'percentile'"),
    ({"method": "minmax", "num_bins": 512}, "num_bins: only used by histogram"),
    ({"method": "distribution", "num_bins": 128}, "num_bins: 128 < 512"),
    ({"method": "percentile", "num_quantized_bins": 64}, "num_quantized_bins: only used by method 'entropy'"),
    ({"method": "entropy", "moving_average": True}, "moving_average: only used by method 'minmax'"),
    ({"averaging_constant": 0.1}, "averaging_constant: only used with moving_average"),
    ({"moving_average": True, "averaging_constant": 2.0}, r"averaging_constant: 2.0 must be in \[0, 1\]"),
    ({"method": "distribution", "calibration_symmetric": True}, "calibration_symmetric: ORT's distribution calibrator ignores it"),
    ({"distribution_scenario": "p3"}, "distribution_scenario: only used by method 'distribution'"),
    ({"activation_type": "int8", "weight_type": "uint8"}, "rejected by ORT"),
    ({"format": "qoperator", "activation_type": "uint16"}, "16- and 4-bit types need format: qdq"),
    ({"op_types_to_quantize": ["Conv"], "op_types_to_exclude": ["Conv"]}, "also in op_types_to_quantize"),
    ({"tensor_overrides": {"t": {"scale": 0.1}}}, "'scale' and 'zero_point' must be given together"),
    ({"tensor_overrides": {"t": {"scale": 0.1, "zero_point": 0, "rmax": 1.0}}}, "'rmax' conflicts with a fixed scale"),
])
def test_ignored_or_rejected_combinations_are_errors(fields, match):
    with pytest.raises(UnsupportedOptionError, match=match) as e:
        StaticQuantConfig.from_dict(fields)
    assert "\n" not in str(e.value)


def test_unknown_and_mistyped_keys():
    with pytest.raises(ConfigError, match="unknown option 'calib_moving_average'"):
        StaticQuantConfig.from_dict({"calib_moving_average": True})
    with pytest.raises(ConfigError, match="method: 'kl' is not one of"):
        StaticQuantConfig.from_dict({"method": "kl"})
    with pytest.raises(ConfigError, match="calibration_chunk_size: 0 must be >= 1"):
        StaticQuantConfig(calibration_chunk_size=0)
    with pytest.raises(ConfigError, match="max_images"):
        StaticQuantConfig(max_images=0)
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        StaticQuantConfig(node_patterns_to_exclude=("conv[",))


def test_dynamic_config():
    assert DynamicQuantConfig().weight_type == "int8"
    with pytest.raises(UnsupportedOptionError, match="weight_type: int16 is not supported by dynamic"):
        DynamicQuantConfig(weight_type="int16")
    with pytest.raises(ConfigError, match="unknown option 'method'"):
        DynamicQuantConfig.from_dict({"method": "minmax"})


def test_every_option_reaches_ort():
    from onnxruntime.quantization import QuantType

    c = StaticQuantConfig(method="entropy", num_bins=256, num_quantized_bins=64, calibration_symmetric=True, symmetric_activations=True,
                          symmetric_weights=False, reduce_range=True, per_channel=True, format="qoperator",
                          tensor_overrides={"t": TensorOverride(quant_type="uint8", scale=0.5, zero_point=3)})
    assert ort_bridge.calibrator_options(c) == {"symmetric": True, "num_bins": 256, "num_quantized_bins": 64}
    kw = ort_bridge.static_kwargs(c, ["Conv"], ["n1"])
    ex = kw["extra_options"]
    assert ex["ActivationSymmetric"] is True and ex["WeightSymmetric"] is False
    ov = ex["TensorQuantOverrides"]["t"][0]
    assert ov["quant_type"] == QuantType.QUInt8 and float(ov["scale"]) == 0.5 and int(ov["zero_point"]) == 3
    assert kw["reduce_range"] and kw["per_channel"] and kw["nodes_to_exclude"] == ["n1"]
    p = StaticQuantConfig(method="percentile", percentile=99.5, num_bins=1000)
    assert ort_bridge.calibrator_options(p) == {"num_bins": 1000, "percentile": 99.5}
    m = StaticQuantConfig(moving_average=True, averaging_constant=0.2)
    assert ort_bridge.calibrator_options(m) == {"moving_average": True, "averaging_constant": 0.2}
    d = StaticQuantConfig(method="distribution", distribution_scenario="p3", num_bins=1024)
    assert ort_bridge.calibrator_options(d) == {"num_bins": 1024, "scenario": "p3"}


def test_model_dependent_checks(tmp_path):
    import onnx
    from test_quantize_fixtures import make_tiny_intake

    m = onnx.load(str(make_tiny_intake(tmp_path / "t") / "model.onnx"))
    ops, excl = ort_bridge.resolve_exclusions(StaticQuantConfig(node_patterns_to_exclude=("conv.*",), op_types_to_exclude=("Relu",)), m, "qdq")
    assert excl == ["conv1", "conv2"] and "Relu" not in ops and "Conv" in ops
    for cfg, match in [(StaticQuantConfig(nodes_to_exclude=("nope",)), "node 'nope' is not in the model"),
                       (StaticQuantConfig(node_patterns_to_exclude=("x.*",)), "matches no node"),
                       (StaticQuantConfig(op_types_to_exclude=("MatMul",)), "has no 'MatMul' node"),
                       (StaticQuantConfig(op_types_to_quantize=("Gemm",)), "has no 'Gemm' node"),
                       (StaticQuantConfig(tensor_overrides={"zz": TensorOverride(rmax=1.0)}), "tensor 'zz' is not in the model")]:
        with pytest.raises(UnsupportedOptionError, match=match):
            ort_bridge.resolve_exclusions(cfg, m, "qdq")
    with pytest.raises(UnsupportedOptionError, match="ConvInteger is per-tensor"):
        ort_bridge.resolve_exclusions(DynamicQuantConfig(per_channel=True), m, "dynamic")
    with pytest.raises(UnsupportedOptionError, match="opset 12 is too old for per-channel QDQ.*quantkit intake"):
        ort_bridge.check_opset(StaticQuantConfig(per_channel=True), 12, "m.onnx")
    ort_bridge.check_opset(StaticQuantConfig(per_channel=True, format="qoperator"), 12, "m.onnx")  # QLinearConv has no axis limit


def test_calibrator_defaults_are_those_create_calibrator_builds(tmp_path):
    """ort_bridge.CALIBRATOR_DEFAULTS (the defaults quantkit resolves without building ORT's calibrator) equal the
    attributes of the calibrator ORT's create_calibrator builds, method by method."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator
    from test_quantize_fixtures import make_tiny_intake

    model = make_tiny_intake(tmp_path / "t") / "model.onnx"
    for method, defaults in ort_bridge.CALIBRATOR_DEFAULTS.items():
        cal = create_calibrator(model, ["Conv"], augmented_model_path=str(tmp_path / f"{method}.onnx"),
                                calibrate_method=getattr(CalibrationMethod, ort_bridge.METHODS[method]))
        got = {k: getattr(cal, k) for k in defaults}
        assert got == defaults, method
        p = ort_bridge.calibrator_params(StaticQuantConfig(method=method))
        assert {k: getattr(p, k) for k in defaults} == defaults


def test_config_types_are_the_dtypes_table():
    """The typed field's allowed names are exactly the quantizable types of quantkit.dtypes (one table)."""
    from typing import get_args

    from quantkit.dtypes import QUANT_TYPE_NAMES
    from quantkit.quantize.config import QType

    assert get_args(QType) == QUANT_TYPE_NAMES


def test_a_value_out_of_range_is_named_with_its_file_and_section(tmp_path):
    """validate() names only the field; the error a user sees names the params file and the section too."""
    from quantkit.config import config_from_params
    from quantkit.intake.prepare import IntakeConfig

    p = tmp_path / "params.yaml"
    p.write_text("quantize: {max_images: 0}\nmodels:\n  m:\n    intake: {input_size: [0, 320]}\n")
    with pytest.raises(ConfigError, match=r"^.*params\.yaml:quantize\.max_images: 0 must be >= 1"):
        config_from_params(StaticQuantConfig, p, "quantize")
    with pytest.raises(ConfigError, match=r"^.*params\.yaml:models\.m\.intake\.input_size: \[0, 320\] must be positive"):
        config_from_params(IntakeConfig, p, "intake", model="m")


@pytest.mark.parametrize("fields, match", [
    ({"method": "percentile", "percentile": 100}, "percentile: 100 does not give the full range.*use method: minmax"),
    ({"method": "percentile", "percentile": 1e-9}, r"percentile: 1e-09 must be in \[50, 100\)"),
    ({"method": "percentile", "num_bins": 1}, "num_bins: 1 must be >= 2"),
    ({"method": "entropy", "num_bins": 64}, r"num_bins: 64 is below num_quantized_bins \(default 128\)"),
])
def test_degenerate_histogram_settings_are_refused(fields, match):
    """Found by trying the CLI on the rapidocr classifier: these ran into ORT internals (num_bins 1: a tuple ORT's
    TensorsData rejects; entropy num_bins < 128: negative dimensions) or gave a range narrower than at 99.999 (100)."""
    with pytest.raises(UnsupportedOptionError, match=match):
        StaticQuantConfig.from_dict(fields)


def test_per_channel_default_is_one_default_for_every_static_entry_point(tmp_path):
    """Python construction, a params file without the key and the params reference all say per-channel; dynamic
    keeps ORT's per-tensor default (its ConvInteger has no per-channel form)."""
    from quantkit.config import config_from_params
    from quantkit.params import reference

    assert StaticQuantConfig().per_channel is True
    assert StaticQuantConfig.from_dict({}).per_channel is True
    p = tmp_path / "params.yaml"
    p.write_text("quantize:\n  method: minmax\n")
    assert config_from_params(StaticQuantConfig, p, "quantize").per_channel is True
    assert DynamicQuantConfig().per_channel is False
    keys = {k.key: k for s in reference("quantize") for k in s.keys if s.section == "quantize"}
    assert keys["per_channel"].default == "true"

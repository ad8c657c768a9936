"""Q/DQ placement recipes (quantize.placement): the openvino recipe's plan on a model with the activation chains
detectors use, and one calibration's ranges quantized with both recipes (quantize --ranges-from)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import activation_chains_model
from onnx import numpy_helper
from test_quantize_fixtures import _write_intake, make_set

from quantkit.artifacts import CalibrationRecord
from quantkit.cli.main import main
from quantkit.errors import ConfigError, UnsupportedOptionError
from quantkit.quantize import StaticQuantConfig, quantize, quantize_with_ranges
from quantkit.quantize.placement import OPENVINO, OPENVINO_ELTWISE, ORT, PlacementRecipe, placement_recipe, plan_placement, register_placement

SIZE = 16
ALL = ["Add", "Conv", "GlobalAveragePool", "Mul", "Sigmoid"]


def test_openvino_plan_quantizes_conv_inputs_only():
    m = activation_chains_model(SIZE)
    plan = plan_placement(OPENVINO, m, ALL, ["conv3"])
    assert plan.op_types == ("Conv",) and plan.nodes_to_exclude == ("conv3",) and plan.no_output_op_types == ("Conv",)


def test_openvino_plan_keeps_conv_transpose_outputs_quantized():
    from onnx import TensorProto, helper

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    wt = numpy_helper.from_array(np.ones((4, 2, 2, 2), np.float32), "wt")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c", "wt"], ["d"], name="deconv", strides=[2, 2]),
             helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 16, 16])], [w, wt])
    plan = plan_placement(OPENVINO, helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ["Conv", "ConvTranspose", "Sigmoid"], [])
    assert plan.op_types == ("Conv", "ConvTranspose") and plan.no_output_op_types == ("Conv",)


def test_eltwise_plan_keeps_activation_chains_and_broadcasts_out():
    m = activation_chains_model(SIZE)
    plan = plan_placement(OPENVINO_ELTWISE, m, ALL, ["conv3"])
    assert plan.op_types == ("Add", "Conv", "Mul")
    # SiLU's and HardSwish's Mul are the activation; the SE block's Mul broadcasts; the residual Add stays quantized
    assert plan.nodes_to_exclude == ("conv3", "hswish_mul", "se_mul", "silu_mul")
    assert plan.no_output_op_types == ("Add", "Conv", "Mul")
    ort = plan_placement(ORT, m, ALL, [])
    assert ort.op_types == tuple(ALL) and ort.nodes_to_exclude == () and ort.no_output_op_types == ()


def test_recipes_are_checked_against_the_config():
    assert StaticQuantConfig().placement == "ort"
    ok = StaticQuantConfig(placement="openvino", per_channel=True)
    assert StaticQuantConfig.from_dict(ok.to_dict()) == ok and ok.to_dict()["placement"] == "openvino"
    with pytest.raises(UnsupportedOptionError, match="placement: openvino needs per-channel weights; set per_channel: true"):
        StaticQuantConfig(placement="openvino", per_channel=False)
    with pytest.raises(UnsupportedOptionError, match="needs activation_type: uint8"):
        StaticQuantConfig(placement="openvino", per_channel=True, activation_type="int8")
    with pytest.raises(UnsupportedOptionError, match="remove symmetric_weights: false"):
        StaticQuantConfig(placement="openvino", per_channel=True, symmetric_weights=False)
    with pytest.raises(UnsupportedOptionError, match="remove op_types_to_quantize"):
        StaticQuantConfig(placement="openvino", per_channel=True, op_types_to_quantize=("Conv",))
    with pytest.raises(ConfigError, match="'tflite' is not a known recipe; use one of nncf, openvino, openvino-eltwise, ort"):
        StaticQuantConfig(placement="tflite")
    with pytest.raises(ConfigError, match="already registered"):
        register_placement(PlacementRecipe("openvino"))
    register_placement(PlacementRecipe("conv-only", op_types=("Conv",)))
    assert placement_recipe("conv-only").op_types == ("Conv",)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    root = tmp_path_factory.mktemp("placement")
    intake = _write_intake(activation_chains_model(SIZE), root / "intake", SIZE)
    cset = make_set(root / "set", 3, size=32)
    ort = quantize(intake, StaticQuantConfig(per_channel=True), out=root / "ort", calibration_set=cset)
    params = root / "params.yaml"
    params.write_text("quantize:\n  per_channel: true\n")
    rc = main(["quantize", str(intake), "--params", str(params), "--placement", "openvino-eltwise", "--ranges-from", str(root / "ort"),
               "--out", str(root / "openvino")])
    assert rc == 0
    return root, intake, ort, CalibrationRecord.load(root / "openvino")


def _producers(m):
    return {o: n for n in m.graph.node for o in n.output}


def test_openvino_file_has_no_qdq_inside_chains_nor_on_outputs(quantized):
    root, _, ort, ov = quantized
    q = onnx.load(str(root / "openvino" / "model_int8.onnx"))
    prod = _producers(q)
    quantized_tensors = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert "c1" not in quantized_tensors and "c2" not in quantized_tensors  # Conv -> activation: no pair between
    assert {"x", "a", "b", "m", "p"} <= quantized_tensors  # Conv inputs, the residual Add's inputs
    assert prod["y"].op_type == "Conv"  # the graph output is the Conv's float output
    silu = next(n for n in q.graph.node if n.name == "silu_mul")
    assert all(prod[i].op_type != "DequantizeLinear" for i in silu.input)
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    for n in q.graph.node:  # weights: per-channel, zero point 0
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].dtype == np.int8 and inits[n.input[0]].ndim == 4:
            assert inits[n.input[1]].ndim == 1 and not inits[n.input[2]].any()
    assert ov.config["placement"] == "openvino-eltwise" and ov.calibration["ranges_from"] == ort.fingerprint
    assert ov.calibrated_ranges == ort.calibrated_ranges
    # one calibration, same activation scale where both recipes quantize the tensor
    ort_scales = {t.name: t.scale for t in ort.tensors if t.role == "activation"}
    for t in ov.tensors:
        if t.role == "activation" and t.name in ort_scales:
            assert t.scale == ort_scales[t.name]


def test_ranges_from_refuses_another_calibration(quantized, tmp_path, capsys):
    root, intake, _, _ = quantized
    with pytest.raises(ConfigError, match="method: 'entropy' differs from the record's 'minmax'"):
        quantize_with_ranges(root / "ort", intake, StaticQuantConfig(method="entropy", per_channel=True), out=tmp_path / "x")
    rc = main(["quantize", str(intake), "--ranges-from", str(root / "ort"), "--calibration-set", str(root / "set"), "--out", str(tmp_path / "x")])
    assert rc == 2 and "--ranges-from reuses a record's calibration; drop --calibration-set" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_target_takes_the_runtimes_placement_from_params(quantized, tmp_path, capsys):
    """The main job's place stage: `quantize --ranges-from DEPLOYED --target RUNTIME` quantizes with params
    targets.RUNTIME.placement and the deployed record's ranges; bad targets are refused in one line, nothing written."""
    root, intake, ort, _ = quantized
    params = tmp_path / "params.yaml"
    params.write_text("quantize:\n  per_channel: true\ntargets:\n  onnxruntime: {placement: ort}\n  openvino: {placement: openvino}\n")
    args = ["quantize", str(intake), "--ranges-from", str(root / "ort"), "--params", str(params)]
    assert main([*args, "--target", "openvino", "--out", str(tmp_path / "ov")]) == 0
    ov = CalibrationRecord.load(tmp_path / "ov")
    assert ov.config["placement"] == "openvino" and ov.calibration["ranges_from"] == ort.fingerprint
    assert main([*args, "--target", "onnxruntime", "--out", str(tmp_path / "ort")]) == 0
    assert CalibrationRecord.load(tmp_path / "ort").quantized_model_digest == ort.quantized_model_digest  # the record's own placement: same file
    capsys.readouterr()
    bad = {("--target", "tensorrt"): "--target tensorrt: not a runtime; use one of",
           ("--target", "openvino", "--placement", "ort"): "--target takes the placement from params targets.RUNTIME; drop --placement",
           }
    for extra, message in bad.items():
        assert main([*args, *extra, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    for text, message in {"quantize:\n  per_channel: true\n": "no targets section; add targets: {openvino: {placement: NAME}}",
                          "quantize:\n  per_channel: true\ntargets:\n  onnxruntime: {placement: ort}\n": "targets has no 'openvino'",
                          "quantize:\n  per_channel: true\ntargets:\n  openvino: ort\n": "targets.openvino must be {placement: NAME}",
                          "quantize:\n  per_channel: true\ntargets:\n  openvino: {placement: tflite}\n": "placement: 'tflite' is not a known recipe"}.items():
        params.write_text(text)
        assert main([*args, "--target", "openvino", "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "x").exists()

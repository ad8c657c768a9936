"""Target support from the runtime itself (ORT loads and runs, OpenVINO reads/queries/compiles/runs), the kernel
registry for EPs not in this build, and documentation-derived capability profiles (one format, one loader)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantkit.cli.main import main
from quantkit.demo import packaged_model_path
from quantkit.errors import ConfigError
from quantkit.intake.support import check_support, list_profiles
from quantkit.profiles import PROFILES_DIR, load_profile
from quantkit.runtimes import available_runtimes

DET = str(packaged_model_path())
CASES = Path("/work/shared/cases")
needs_openvino = pytest.mark.skipif("openvino" not in available_runtimes(), reason="openvino is not installed (pip install 'quantkit[openvino]')")


def _model(nodes, inits=(), opset=13, dtype=TensorProto.FLOAT, extra_opsets=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", dtype, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in extra_opsets]])
    m.ir_version = 8
    return m


def test_detector_loads_and_runs_on_cpu(capsys):
    r = check_support(DET, "cpu")
    assert r.supported and r.nodes_checked == 672 and r.provenance == "runtime"
    assert "loaded and ran at graph optimization level all" in r.source and r.runtime.name == "onnxruntime" and not r.run_error
    assert main(["support", DET, "--target", "cpu"]) == 0
    assert "[runtime]" in capsys.readouterr().out


@needs_openvino
def test_detector_on_openvino_is_asked_of_openvino(capsys):
    r = check_support(DET, "openvino")
    assert r.supported and r.provenance == "runtime" and r.runtime.name == "openvino" and r.runtime.inference_precision == "f32"
    assert "read_model, query_model, compiled (f32) and ran" in r.source
    assert main(["support", DET, "--target", "openvino", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runtime"]["options"]["INFERENCE_PRECISION_HINT"] == "f32"


def _function_models():
    """(op, case name, model, real inputs) for every ONNX backend node test case using a function-defined op."""
    import onnx.defs as D
    from onnx.backend.test.case import node

    fn_ops = {s.name for s in D.get_all_schemas_with_history() if s.domain == "" and (s.has_function or s.has_context_dependent_function)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    for c in cases:
        hit = sorted({n.op_type for n in c.model.graph.node} & fn_ops)
        if hit:
            inputs, _ = c.data_sets[0]
            yield hit[0], c.name, c.model, {vi.name: (a if isinstance(a, list) else np.asarray(a)) for vi, a in zip(c.model.graph.input, inputs)}


def test_function_defined_ops_are_not_false_positives():
    """Every function-defined ONNX op: where ORT runs the backend test case with its real inputs, support agrees;
    where ORT refuses to load it, support says so too."""
    from quantkit.runtimes.ort import OrtRuntime

    ran_ops, refused = set(), set()
    for op, name, model, feed in _function_models():
        rt = OrtRuntime(model)
        try:
            rt.activate()
        except Exception:  # noqa: BLE001 - ORT refuses this op/opset
            assert not check_support(model, "cpu").supported, name
            refused.add(op)
            continue
        try:
            rt.session.run(None, feed)
        except Exception:  # noqa: BLE001 - test data ORT's Python binding cannot take (bfloat16, ...)
            continue
        finally:
            rt.deactivate()
        r = check_support(model, "cpu")
        assert r.supported, (name, r.issues)
        ran_ops.add(op)
    assert {"HardSwish", "Mish", "HardSigmoid", "Gelu", "LayerNormalization", "Celu", "Softplus", "GroupNormalization"} <= ran_ops
    assert len(ran_ops) >= 40, sorted(ran_ops)


@pytest.mark.parametrize("case", ["hardswish_opset14.onnx", "mish_opset18.onnx", "conv_small.onnx", "upsample_linear_opset9.onnx",
                                  "output_also_feeds_relu.onnx", "variable_shape_branch.onnx"])
def test_shared_cases_run_on_cpu_and_openvino(case):
    if not (CASES / case).is_file():
        pytest.skip(f"{CASES / case} not on this machine")
    for target in ["cpu"] + (["openvino"] if "openvino" in available_runtimes() else []):
        r = check_support(str(CASES / case), target)
        assert r.supported and r.provenance == "runtime", (target, r.issues)


def _int4_activation_model():
    """Conv -> Relu -> Conv with int4 activations and int8 weights in QDQ: ORT's QDQ fusion at level >= extended
    makes a QLinearConv that has no int4 kernel, so the session refuses to load (level disable runs it)."""
    rng = np.random.default_rng(0)
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
    zp = helper.make_tensor("zp", TensorProto.INT4, [], [0])
    wq = helper.make_tensor("wq", TensorProto.INT8, [4, 3, 3, 3], rng.integers(-20, 20, 108).tolist())
    ws = helper.make_tensor("ws", TensorProto.FLOAT, [], [0.05])
    wz = helper.make_tensor("wz", TensorProto.INT8, [], [0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q_x"),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w"),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "zp"], ["cq"], name="q_c"),
             helper.make_node("DequantizeLinear", ["cq", "s", "zp"], ["y"], name="dq_c")]
    g = helper.make_graph(nodes, "a4w8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [s, zp, wq, ws, wz])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_int4_activations_are_refused_at_the_deployment_level(tmp_path, capsys):
    m = _int4_activation_model()
    r = check_support(m, "cpu")
    (i,) = r.issues
    assert (i.node, i.op_type, i.kind) == ("conv1", "QLinearConv", "dtype") and "int4" in i.detail
    assert check_support(m, "cpu", level="disable").supported
    p = tmp_path / "a4w8.onnx"
    onnx.save(m, p)
    assert main(["support", str(p), "--target", "cpu"]) == 5
    assert "conv1" in capsys.readouterr().out
    assert main(["support", str(p), "--target", "cpu", "--level", "disable"]) == 0


def test_profile_lacking_hardsigmoid_names_nodes_and_exits_5(capsys):
    assert set(list_profiles()) >= {"tensorrt", "openvino", "npu-generic"}
    r = check_support(DET, "npu-generic")
    assert not r.supported and {i.op_type for i in r.issues} == {"HardSigmoid"} and len(r.issues) == 10
    assert all(i.kind == "unsupported_op" and i.node.startswith("p2o.HardSigmoid") for i in r.issues)
    assert main(["support", DET, "--target", "npu-generic"]) == 5
    cap = capsys.readouterr()
    assert "p2o.HardSigmoid.0" in cap.out and cap.err.count("\n") == 1 and "HardSigmoid" in cap.err
    assert main(["support", DET, "--target", "npu-generic", "--json"]) == 5
    d = json.loads(capsys.readouterr().out)
    assert d["supported"] is False and d["issues"][0]["op_type"] == "HardSigmoid"


def test_custom_domain_on_cpu_and_profile(capsys, tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["r"], name="r0"), helper.make_node("FancyAct", ["r"], ["y"], name="fancy0", domain="com.acme")],
               extra_opsets=[("com.acme", 1)])
    p = tmp_path / "custom.onnx"
    onnx.save(m, p)
    for target in ["cpu", "openvino", str(PROFILES_DIR / "openvino.json")]:
        r = check_support(str(p), target)
        assert [(i.node, i.kind, i.domain) for i in r.issues] == [("fancy0", "custom_domain", "com.acme")], target
        assert main(["support", str(p), "--target", target]) == 5
        assert "fancy0" in capsys.readouterr().out


def test_cpu_refusals_name_the_node_in_ort_words():
    m = _model([helper.make_node("HardSigmoid", ["x"], ["y"], name="hs")], dtype=TensorProto.DOUBLE)
    (i,) = check_support(m, "cpu").issues
    assert (i.node, i.kind) == ("hs", "unsupported_op") and "Could not find an implementation for HardSigmoid" in i.detail
    sc = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    m = _model([helper.make_node("Upsample", ["x", "s"], ["y"], name="up")], inits=[sc], opset=10)
    (i,) = check_support(m, "cpu").issues
    assert (i.node, i.op_type, i.kind) == ("up", "Upsample", "load") and "deprecated" in i.detail


def test_registry_predictions_keep_opset_and_dtype_detail():
    """When ORT refuses to load, the other nodes get the kernel registry's prediction (function ops excepted)."""
    from quantkit.intake.support import _check_ort_registry

    m = _model([helper.make_node("HardSigmoid", ["x"], ["h"], name="hs"), helper.make_node("HardSwish", ["h"], ["y"], name="hsw")],
               dtype=TensorProto.DOUBLE, opset=14)
    (i,) = _check_ort_registry(m, "CPUExecutionProvider")  # HardSwish(double) has no kernel but is a function: not reported
    assert (i.node, i.kind) == ("hs", "dtype") and "tensor(double)" in i.detail
    sc = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    m = _model([helper.make_node("Upsample", ["x", "s"], ["y"], name="up")], inits=[sc], opset=10)
    (i,) = _check_ort_registry(m, "CPUExecutionProvider")
    assert i.kind == "opset" and (9, 9) in i.supported_opsets


def _qdq(act=TensorProto.UINT8, per_channel=False):
    zp = helper.make_tensor("zp", act, [], [128 if act == TensorProto.UINT8 else 0])
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [0.02])
    wq = helper.make_tensor("wq", TensorProto.INT8, [4, 3, 1, 1], np.arange(12, dtype=np.int8).tolist())
    ws = helper.make_tensor("ws", TensorProto.FLOAT, [4] if per_channel else [], [0.1] * (4 if per_channel else 1))
    wz = helper.make_tensor("wz", TensorProto.INT8, [4] if per_channel else [], [0] * (4 if per_channel else 1))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q_x"),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w", axis=0),
             helper.make_node("Conv", ["xd", "w"], ["y"], name="conv")]
    return _model(nodes, inits=[zp, s, wq, ws, wz])


def test_quantized_patterns_against_profiles(tmp_path, capsys):
    u8 = _qdq(TensorProto.UINT8)
    assert check_support(u8, "cpu").supported
    trt = check_support(u8, "tensorrt")  # TensorRT takes signed int8 QDQ only
    assert any(i.kind == "quantized_pattern" and i.node == "dq_x" and "activation dtype uint8" in i.detail for i in trt.issues)
    assert check_support(_qdq(TensorProto.INT8), "tensorrt").supported
    prof = json.loads((PROFILES_DIR / "npu-generic.json").read_text())
    prof["quantization"]["per_channel"] = False
    pp = tmp_path / "board.json"
    pp.write_text(json.dumps(prof))
    r = check_support(_qdq(TensorProto.INT8, per_channel=True), str(pp))
    assert [(i.node, i.kind) for i in r.issues] == [("dq_w", "quantized_pattern")] and "per-channel" in r.issues[0].detail
    assert main(["support", "--target", str(pp), _dump(tmp_path, _qdq(TensorProto.INT8))]) == 0


def _dump(tmp_path, m):
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    return str(p)


@pytest.mark.parametrize("content,needle", [("{not json", "not a valid JSON"), ('{"schema_version": 1}', "needs an 'ops' mapping"),
                                            ('{"schema_version": 1, "ops": {"Conv": {"opset": [1, 2]}}}', "ops.Conv must be a mapping")])
def test_bad_profiles_and_targets(tmp_path, capsys, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    assert main(["support", DET, "--target", str(p)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="unknown target"):
        check_support(DET, "hexagon")
    with pytest.raises(ConfigError, match="CUDAExecutionProvider: the installed onnxruntime has no kernels"):
        check_support(DET, "cuda")


def test_profile_op_supported_only_at_other_opsets(tmp_path, capsys):
    prof = tmp_path / "old_board.json"
    prof.write_text(json.dumps({"schema_version": 1, "name": "old", "ops": {"Relu": {"opsets": [6, 12]}}}))
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="act")], opset=13)
    (i,) = check_support(m, str(prof)).issues
    assert (i.node, i.kind, i.supported_opsets) == ("act", "opset", ((6, 12),))
    assert main(["support", _dump(tmp_path, m), "--target", str(prof)]) == 5
    assert "supported at opsets [[6, 12]]" in capsys.readouterr().out
    assert check_support(_model([helper.make_node("Relu", ["x"], ["y"])], opset=12), str(prof)).supported


def test_one_profile_format_and_loader(tmp_path):
    """Packaged profiles are labelled by provenance; the older short form migrates into the same type."""
    trt = load_profile("tensorrt")
    assert trt.provenance == "documentation" and "documentation-derived" in trt.label
    assert check_support(DET, "tensorrt").provenance == "documentation"
    short = tmp_path / "board.json"
    short.write_text(json.dumps({"name": "board-x", "opset": {"ai.onnx": 12}, "ops": {"Relu": [6, 21], "com.acme:Fancy": [1, 1]}}))
    p = load_profile(short)
    assert p.ops["Relu"].opsets == (6, 21) and "com.acme::Fancy" in p.ops and p.domain_opsets == {"ai.onnx": 12}
    r = check_support(_model([helper.make_node("Relu", ["x"], ["y"], name="act")], opset=13), str(short))
    assert [(i.node, i.kind, i.detail) for i in r.issues] == [("<model>", "opset", "opset ai.onnx 13 > 12")]
    short.write_text(json.dumps({"ops": {"Conv": "all"}}))
    with pytest.raises(ConfigError, match="ops.Conv"):
        load_profile(short)


def test_openvino_without_the_package_falls_back_to_its_labelled_profile(monkeypatch):
    import quantkit.intake.support as support

    monkeypatch.setattr(support, "available_runtimes", lambda: ["onnxruntime"])
    r = check_support(DET, "openvino")
    assert r.provenance == "documentation" and "openvino not installed here" in r.source and r.runtime is None

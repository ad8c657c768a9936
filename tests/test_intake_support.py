"""Target support: ORT's kernel registry for the CPU EP and JSON capability profiles."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantkit.cli.main import main
from quantkit.demo import packaged_model_path
from quantkit.errors import ConfigError
from quantkit.intake.support import PROFILES_DIR, check_support, list_profiles

DET = str(packaged_model_path())


def _model(nodes, inits=(), opset=13, dtype=TensorProto.FLOAT, extra_opsets=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", dtype, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in extra_opsets]])
    m.ir_version = 8
    return m


def test_detector_runs_on_cpu_registry(capsys):
    r = check_support(DET, "cpu")
    assert r.supported and r.nodes_checked == 672 and "kernel registry (CPUExecutionProvider)" in r.source
    assert main(["support", DET, "--target", "cpu"]) == 0


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
    for target in ("cpu", "openvino"):
        r = check_support(str(p), target)
        assert [(i.node, i.kind, i.domain) for i in r.issues] == [("fancy0", "custom_domain", "com.acme")]
        assert main(["support", str(p), "--target", target]) == 5
        assert "fancy0" in capsys.readouterr().out


def test_cpu_dtype_and_opset_issues_from_registry():
    m = _model([helper.make_node("HardSigmoid", ["x"], ["y"], name="hs")], dtype=TensorProto.DOUBLE)
    (i,) = check_support(m, "cpu").issues
    assert i.kind == "dtype" and "tensor(double)" in i.detail and "tensor(float)" in i.detail
    sc = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    m = _model([helper.make_node("Upsample", ["x", "s"], ["y"], name="up")], inits=[sc], opset=10)
    (i,) = check_support(m, "cpu").issues
    assert i.kind == "opset" and i.node == "up" and (9, 9) in i.supported_opsets


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


@pytest.mark.parametrize("content,needle", [("{not json", "not a valid JSON"), ('{"schema_version": 1}', "needs schema_version: 1 and an 'ops' mapping"),
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

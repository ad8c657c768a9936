"""quantkit.intake inspection, validation and loading errors (tiny models + the real PP-OCR detector)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantkit.cli.main import main
from quantkit.demo import packaged_model_path
from quantkit.errors import ModelError
from quantkit.intake import inspect_model, load_model, validate_model

DET = packaged_model_path()


def _tiny(opset: int = 13) -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], np.ones(12, np.float32).tobytes(), raw=True)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv0"), helper.make_node("Relu", ["c"], ["y"], name="relu0")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch", producer_version="2.5")
    m.ir_version = 8
    return m


def test_inspect_detector_reports_opset_dynamic_dims_and_ops():
    r = inspect_model(DET)
    assert r.opset == 12 and r.ir_version == 8
    (x,) = r.inputs
    assert x.name == "x" and x.dtype == "float32" and x.shape[1] == 3
    assert x.symbolic_dims == ("p2o.DynamicDimension.0", "p2o.DynamicDimension.1", "p2o.DynamicDimension.2")
    assert {"Conv", "ConvTranspose", "Resize", "HardSigmoid", "GlobalAveragePool", "BatchNormalization"} <= r.op_types()
    assert sum(o.count for o in r.ops) == r.node_count == 672
    assert r.initializer_bytes > 4_000_000 and r.custom_domains == ()
    assert "opset=12" in repr(r) and len(repr(r)) < 400


def test_cli_inspect_table_and_json(capsys):
    assert main(["inspect", str(DET)]) == 0
    out = capsys.readouterr().out
    assert "ai.onnx=12" in out and "p2o.DynamicDimension.1" in out and "HardSigmoid" in out and "ConvTranspose" in out
    assert main(["inspect", str(DET), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["opsets"] == {"": 12} and d["inputs"][0]["symbolic_dims"][0] == "p2o.DynamicDimension.0"
    assert {o["op_type"]: o["count"] for o in d["ops"]}["Resize"] == 6


def test_inspect_tiny_counts_bytes_producer(tmp_path):
    p = tmp_path / "t.onnx"
    onnx.save(_tiny(), p)
    r = inspect_model(p)
    assert r.producer_name == "pytorch" and r.initializer_count == 1 and r.initializer_bytes == 48
    assert r.inputs[0].shape == ("N", 3, 8, 8) and r.outputs[0].dtype == "float32"


@pytest.mark.parametrize("kind", ["garbage", "truncated", "text", "empty", "png", "folder", "missing"])
def test_bad_files_give_one_line_model_error(tmp_path, kind, capsys):
    p = tmp_path / "bad.onnx"
    data = _tiny().SerializeToString()
    if kind == "garbage":
        p.write_bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    elif kind == "truncated":
        p.write_bytes(DET.read_bytes()[:200_000])
    elif kind == "text":
        p.write_text("name,value\na,1\n")
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "png":
        p.write_bytes(b"\x89PNG\r\n\x1a\n" + data[:50])
    elif kind == "folder":
        p.mkdir()
    with pytest.raises(ModelError) as e:
        load_model(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)
    assert main(["inspect", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("quantkit inspect: error:")


def test_missing_external_data(tmp_path):
    m = _tiny()
    p = tmp_path / "ext.onnx"
    onnx.save(m, p, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert inspect_model(p).external_data == ("weights.bin",)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelError, match=r"external data file 'weights.bin' not found next to the model"):
        load_model(p)


def test_validate_ok_warns_dynamic_dims_and_explains_errors(tmp_path, capsys):
    rep = validate_model(DET)
    assert rep.ok and [i.stage for i in rep.issues] == ["inputs"]
    assert "fix the input shape" in rep.issues[0].fix
    # a declared output shape that contradicts the Conv's inferred one: strict shape inference must fail
    bad = _tiny()
    bad.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 9
    p = tmp_path / "bad_shape.onnx"
    onnx.save(bad, p)
    rep = validate_model(p)
    assert not rep.ok and rep.issues[0].severity == "error" and "re-export" in rep.issues[0].fix
    assert main(["inspect", str(p), "--validate"]) == 2
    captured = capsys.readouterr()
    assert "fix:" in captured.out and captured.err.count("\n") == 1


def test_validate_unknown_op_and_custom_domain(tmp_path):
    m = _tiny()
    m.graph.node[1].op_type = "FancyAct"
    m.graph.node[1].domain = "com.acme"
    rep = validate_model(m)  # domain not imported: the checker fails, explained as a custom op
    assert not rep.ok
    assert all("custom op" in i.fix for i in rep.issues if i.stage in ("checker", "shape_inference", "domains"))
    m.opset_import.append(helper.make_opsetid("com.acme", 1))
    rep = validate_model(m)  # imported: ONNX cannot check it, so it is a warning naming the node
    assert rep.ok
    (dom,) = [i for i in rep.issues if i.stage == "domains"]
    assert "com.acme" in dom.message and "relu0" in dom.message

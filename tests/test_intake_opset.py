"""Opset conversion notes, numeric verification and the intake stage's artifact contract."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from quantkit.cli.main import main
from quantkit.demo import packaged_model_path
from quantkit.errors import ConfigError, ModelError
from quantkit.intake import (
    IntakeConfig,
    convert_opset,
    intake,
    semantics_notes,
    verify_conversion,
)
from quantkit.note import ExportNote


def _softmax(shape, opset=12, axis=1) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=axis)], "sm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _feeds(shape, n=2):
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(size=shape).astype(np.float32)} for _ in range(n)]


def test_softmax_3d_relabel_is_caught_by_numeric_check():
    m = _softmax([2, 3, 4])
    notes = semantics_notes(m, 12, 13)
    assert [(n.node, n.risk) for n in notes] == [("sm", "meaning")] and "dims 1..2 jointly" in notes[0].detail
    relabelled, log = convert_opset(m, 13, method="relabel")
    assert log.method == "relabel" and log.notes == notes
    check = verify_conversion(m, relabelled, _feeds([2, 3, 4]))
    assert not check.passed and check.max_abs_diff > 0.05


def test_softmax_3d_onnx_converter_keeps_meaning():
    m = _softmax([2, 3, 4])
    conv, log = convert_opset(m, 13)
    assert log.opset_after == 13 and "Reshape" in log.op_types_added  # the adapter rewrites via Flatten/Reshape
    check = verify_conversion(m, conv, _feeds([2, 3, 4]))
    assert check.passed and check.max_abs_diff < 1e-6


def test_softmax_last_axis_has_no_note():
    assert semantics_notes(_softmax([2, 3, 4], axis=-1), 12, 13) == ()
    assert semantics_notes(_softmax([2, 3]), 12, 13) == ()


def test_clip_and_resize_notes_from_opset_10():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    sc = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    g = helper.make_graph([helper.make_node("Clip", ["x"], ["c"], name="clip", min=0.0, max=6.0),
                           helper.make_node("Resize", ["c", "s"], ["y"], name="up", mode="nearest")], "g", [x], [y], [sc])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    m.ir_version = 7
    notes = {(n.node, n.version): n for n in semantics_notes(m, 10, 13)}
    assert notes[("clip", 11)].risk == "signature" and "inputs" in notes[("clip", 11)].what
    assert notes[("up", 11)].risk == "meaning" and "mode=nearest" in notes[("up", 11)].detail
    conv, _ = convert_opset(m, 13)
    assert verify_conversion(m, conv, _feeds([1, 3, 4, 4])).passed


def _channel_softmax_model(path: Path) -> None:
    m = _softmax(["N", 3, "H", "W"])
    onnx.save(m, path)


def _params(tmp_path: Path, name: str = "params.yaml", **section) -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump({"intake": section}))
    return p


def test_intake_numeric_failure_writes_nothing_unless_accepted(tmp_path, capsys):
    src = tmp_path / "sm.onnx"
    _channel_softmax_model(src)
    params = _params(tmp_path, input_size=[16, 16], conversion="relabel", note_check="off")
    out = tmp_path / "work" / "intake"
    assert main(["intake", str(src), "--params", str(params), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changes output 'y'" in err and "accept_numeric_change" in err
    assert not out.exists() and list((tmp_path / "work").iterdir()) == []
    assert main(["intake", str(src), "--params", str(params), "--out", str(out), "--accept-numeric-change"]) == 0
    rec = json.loads((out / "intake.json").read_text())
    assert rec["numeric_check"]["passed"] is False and rec["config"]["accept_numeric_change"] is True
    assert rec["conversion"]["notes"][0]["node"] == "sm"


def test_intake_bad_inputs_one_line_errors(tmp_path, capsys):
    src = tmp_path / "sm.onnx"
    _channel_softmax_model(src)
    out = tmp_path / "out"
    cases = [
        (_params(tmp_path, "a.yaml", input_size=[16, 16], bogus=1), "unknown option 'bogus'"),
        (_params(tmp_path, "b.yaml", input_size=[16, 16], preprocessing={"input_name": "image"}), "no input named 'image'"),
        (_params(tmp_path, "c.yaml", input_size=[0, 16]), "must be positive"),
        (_params(tmp_path, "d.yaml", input_size=[16, 16], preprocessing={"scale": 0}), "preprocessing.scale: 0.0 must be positive"),
    ]
    for params, needle in cases:
        assert main(["intake", str(src), "--params", str(params), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1
        assert not out.exists()
    assert main(["intake", str(tmp_path / "nope.onnx"), "--params", str(cases[0][0]), "--out", str(out)]) == 2
    assert not out.exists()


def test_intake_config_roundtrip_and_input_size_single_source():
    cfg = IntakeConfig.from_dict({"input_size": [320, 256], "preprocessing": {"color_order": "BGR"}})
    assert cfg.preprocessing.input_size == (320, 256) and cfg.preprocessing.color_order == "BGR"
    assert IntakeConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="differs from intake.input_size"):
        IntakeConfig.from_dict({"input_size": [320, 256], "preprocessing": {"input_size": [640, 640]}})


def test_intake_detector_contract(tmp_path, capsys):
    """The pipeline stage on the real PP-OCRv4 detector at a small input size (160x160)."""
    params = _params(tmp_path, input_size=[160, 160], batch_size=1, min_opset=13)
    out = tmp_path / "work" / "intake"
    src = tmp_path / "ppocr_det.onnx"
    src.write_bytes(packaged_model_path().read_bytes())
    assert main(["intake", str(src), "--params", str(params), "--out", str(out)]) == 0
    assert "12 -> 13" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [".quantkit-output", "export_note.json", "intake.json", "model.onnx"]
    m = onnx.load(out / "model.onnx")
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 160, 160]
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1, 1, 160, 160]
    assert {o.domain: o.version for o in m.opset_import}[""] == 13
    assert len(m.graph.value_info) > 100  # shapes inferred
    note = ExportNote.from_model(m)
    assert note == ExportNote.load(out / "export_note.json")
    assert note.provenance.framework == "PaddlePaddle (paddle2onnx)" and note.provenance.opset == 13
    assert note.provenance.source_digest == __import__("hashlib").sha256(src.read_bytes()).hexdigest()
    assert note.preprocessing.input_size == (160, 160) and len(note.provenance.sample_input_digest) == 64
    assert set(note.provenance.runtime_versions) >= {"onnx", "onnxruntime", "numpy", "quantkit"}
    rec = json.loads((out / "intake.json").read_text())
    assert rec["inspection"]["before"]["opsets"] == {"": 12} and rec["inspection"]["after"]["opsets"] == {"": 13}
    assert rec["numeric_check"]["passed"] and rec["numeric_check"]["max_abs_diff"] <= 1e-4
    assert rec["validation"]["ok"] and rec["note_check"]["ok"]
    # deterministic: a second run gives the same bytes
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["intake", str(src), "--params", str(params), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


def test_intake_flags_wrong_value_range_on_detector(tmp_path, capsys):
    src = tmp_path / "ppocr_det.onnx"
    src.write_bytes(packaged_model_path().read_bytes())
    raw = {"scale": 1.0, "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
    out = tmp_path / "work" / "intake"
    params = _params(tmp_path, "err.yaml", input_size=[160, 160], preprocessing=raw)
    assert main(["intake", str(src), "--params", str(params), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "intake.preprocessing:" in err and "check preprocessing.scale/mean/std" in err and err.count("\n") == 1
    assert not out.exists()
    params = _params(tmp_path, "warn.yaml", input_size=[160, 160], preprocessing=raw, note_check="warn", ort_pre_process=True)
    assert main(["intake", str(src), "--params", str(params), "--out", str(out)]) == 0
    rec = json.loads((out / "intake.json").read_text())
    assert rec["note_check"]["verdicts"]["value_range"] == "flagged"
    assert rec["shape_inference"][-1].startswith("onnxruntime.quantization.shape_inference.quant_pre_process")
    assert rec["numeric_check"]["passed"]


def test_intake_model_already_at_opset(tmp_path):
    src = tmp_path / "sm13.onnx"
    onnx.save(_softmax(["N", 3, "H", "W"], opset=13), src)
    r = intake(src, IntakeConfig.from_dict({"input_size": [8, 8], "note_check": "off"}), tmp_path / "out")
    assert r.conversion.method == "none" and r.conversion.opset_after == 13 and r.numeric.passed
    with pytest.raises(ModelError, match="dim 1 is fixed at 3"):
        intake(src, IntakeConfig.from_dict({"input_size": [8, 8], "note_check": "off", "preprocessing": {"layout": "NHWC"}}), tmp_path / "o2")
    assert not (tmp_path / "o2").exists()

"""Intake takes any image model: 1/3/4 channels, NCHW/NHWC, rank 3, dynamic batch (-1 or symbolic), classifiers,
small inputs, unnamed nodes; opset-9 Upsample keeps its meaning; a custom-domain op gives one line, no ORT noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.cli.main import main
from quantkit.intake import IntakeConfig, intake
from quantkit.note import ExportNote, Preprocessing

RNG = np.random.default_rng(0)


def _model(in_shape, nodes, out_shape, inits, opset=13) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="quantkit-tests")
    m.ir_version = 8
    return m


def _w(name, shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def conv_map(channels: int, *, layout: str = "NCHW", batch="N", rank3: bool = False, named: bool = True) -> onnx.ModelProto:
    """Image -> Conv(c -> 1) -> Sigmoid map; NHWC inputs are transposed first, rank-3 inputs unsqueezed."""
    nm = (lambda s: s) if named else (lambda s: "")
    nodes, src = [], "x"
    if rank3:
        nodes.append(helper.make_node("Unsqueeze", ["x", "axes0"], ["x4"], name=nm("unsq")))
        src = "x4"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", [src], ["xt"], name=nm("to_nchw"), perm=[0, 3, 1, 2]))
        src = "xt"
    nodes += [helper.make_node("Conv", [src, "w"], ["c"], name=nm("conv"), pads=[1, 1, 1, 1]),
              helper.make_node("Sigmoid", ["c"], ["y"], name=nm("sig"))]
    spatial = ["H", "W"]
    shape = ([channels] + spatial if layout == "NCHW" else spatial + [channels])
    if not rank3:
        shape = [batch] + shape
    inits = [_w("w", (1, channels, 3, 3))] + ([numpy_helper.from_array(np.array([0], np.int64), "axes0")] if rank3 else [])
    return _model(shape, nodes, None, inits)


def classifier(batch=-1, classes: int = 5) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["l"], name="fc"),
             helper.make_node("Softmax", ["l"], ["y"], name="softmax", axis=1)]
    m = _model([batch, 3, "H", "W"], nodes, [batch, classes], [_w("w", (8, 3, 3, 3)), _w("fc", (8, classes))])
    return m


def _intake(tmp: Path, model: onnx.ModelProto, section: str, capsys, name: str = "m") -> tuple[int, str, str]:
    onnx.save(model, tmp / f"{name}.onnx")
    (tmp / "params.yaml").write_text("intake:\n" + section)
    rc = main(["intake", str(tmp / f"{name}.onnx"), "--params", str(tmp / "params.yaml"), "--out", str(tmp / f"out-{name}")])
    c = capsys.readouterr()
    return rc, c.out, c.err


@pytest.mark.parametrize("channels,layout,rank3,section", [
    (1, "NCHW", False, "  preprocessing: {channels: 1, mean: [0.5], std: [0.5]}\n"),
    (4, "NHWC", False, "  preprocessing: {channels: 4, layout: NHWC}\n"),
    (3, "NCHW", True, "  preprocessing: {batch_axis: false}\n"),
    (1, "NHWC", True, "  preprocessing: {channels: 1, layout: NHWC, batch_axis: false, mean: [0.0], std: [1.0], scale: 1.0}\n"),
])
def test_channels_layouts_and_rank3_go_through(tmp_path, capsys, channels, layout, rank3, section):
    m = conv_map(channels, layout=layout, rank3=rank3)
    rc, out, err = _intake(tmp_path, m, "  input_size: [40, 48]\n" + section, capsys)
    assert rc == 0, err
    pre = ExportNote.load(tmp_path / "out-m" / "export_note.json").preprocessing
    shape = pre.input_shape(1)
    assert pre.channels == channels and pre.batch_axis == (not rank3) and len(shape) == (3 if rank3 else 4)
    fixed = json.loads((tmp_path / "out-m" / "intake.json").read_text())["fixed_input"]["shape"]
    assert tuple(fixed) == shape and channels in shape
    x, _ = pre.apply(RNG.integers(0, 256, (30, 70, 3), dtype=np.uint8))
    assert x.shape == shape and x.dtype == np.float32
    assert "note check" in out


@pytest.mark.parametrize("model,section,fix", [
    (conv_map(1), "  input_size: [32, 32]\n", "set intake.preprocessing.channels: 1 (grayscale)"),
    (conv_map(4, layout="NHWC"), "  input_size: [32, 32]\n  preprocessing: {channels: 4}\n", "set intake.preprocessing.layout: NHWC"),
    (conv_map(3, rank3=True), "  input_size: [32, 32]\n", "set intake.preprocessing.batch_axis: false"),
    (conv_map(3, batch=4), "  input_size: [32, 32]\n", "set intake.batch_size: 4"),
    (conv_map(7), "  input_size: [32, 32]\n", "quantkit feeds images with 1, 3 or 4 channels"),
])
def test_mismatches_name_the_key_that_fixes_them(tmp_path, capsys, model, section, fix):
    rc, _, err = _intake(tmp_path, model, section, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and fix in lines[0], err
    assert not (tmp_path / "out-m").exists()


def test_fix_hint_is_accepted(tmp_path, capsys):
    """The suggested fix works when applied (the batch dim fixed at 4: batch_size 4)."""
    rc, _, err = _intake(tmp_path, conv_map(3, batch=4), "  input_size: [32, 32]\n  batch_size: 4\n", capsys)
    assert rc == 0, err


@pytest.mark.parametrize("batch", [-1, "batch", None])
def test_classifier_with_dynamic_batch_and_default_note_check(tmp_path, capsys, batch):
    rc, out, err = _intake(tmp_path, classifier(batch), "  input_size: [40, 40]\n", capsys)
    assert rc == 0, err
    r = json.loads((tmp_path / "out-m" / "intake.json").read_text())
    assert r["fixed_input"]["shape"] == [1, 3, 40, 40]
    nc = r["note_check"]
    assert nc["verdicts"]["value_range"] == "untested" and "not a per-pixel map" in nc["untested_reason"]
    assert "untested" in out and "not a per-pixel map" in out


def test_small_input_map_model_has_a_verdict_not_a_traceback(tmp_path, capsys):
    rc, out, err = _intake(tmp_path, conv_map(3), "  input_size: [16, 16]\n", capsys)
    assert rc == 0, err
    nc = json.loads((tmp_path / "out-m" / "intake.json").read_text())["note_check"]
    assert "under 32 px" in nc["untested_reason"] and nc["verdicts"]["layout"] == "ok"


def test_note_check_off_written_plainly(tmp_path, capsys):
    rc, _, err = _intake(tmp_path, conv_map(3), "  input_size: [32, 32]\n  note_check: off\n", capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "out-m" / "intake.json").read_text())["note_check"] is None


def test_unnamed_nodes_get_deterministic_names(tmp_path, capsys):
    m = classifier()
    for n in m.graph.node:
        n.name = ""
    m.graph.node[1].name = "Conv_0"  # a taken name: the generated one must not collide
    runs = []
    for k in range(2):
        rc, out, err = _intake(tmp_path, m, "  input_size: [24, 24]\n  ort_pre_process: false\n", capsys, name=f"m{k}")
        assert rc == 0, err
        runs.append(onnx.load(str(tmp_path / f"out-m{k}" / "model.onnx")))
        r = json.loads((tmp_path / f"out-m{k}" / "intake.json").read_text())
        assert r["named_nodes"]["rule"] == "{op_type}_{index}" and len(r["named_nodes"]["names"]) == 4
        assert ExportNote.load(tmp_path / f"out-m{k}" / "export_note.json").provenance.named_nodes == 4
    names = [n.name for n in runs[0].graph.node]
    assert names == [n.name for n in runs[1].graph.node] and all(names) and len(set(names)) == len(names)
    assert names[0] == "Conv_0_2" and names[2] == "Flatten_2"


def test_old_export_note_loads_unchanged(tmp_path):
    old = {"input_name": "x", "input_size": [64, 64], "color_order": "RGB", "layout": "NCHW", "dtype": "float32", "scale": 1 / 255,
           "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "resize_policy": "letterbox", "pad_value": 0, "schema_version": 1}
    pre = Preprocessing.from_dict(old)
    assert pre.channels == 3 and pre.batch_axis and pre.input_shape(2) == (2, 3, 64, 64)
    x, _ = pre.apply(np.full((64, 64, 3), 255, np.uint8))
    assert x.shape == (1, 3, 64, 64) and np.allclose(x, 1.0)


def test_preprocessing_channels_values():
    img = np.zeros((8, 8, 3), np.uint8)
    img[..., 0] = 200  # pure red
    gray = Preprocessing(input_size=(8, 8), channels=1, scale=1.0, mean=(0.0,), std=(1.0,))
    x, _ = gray.apply(img)
    assert x.shape == (1, 1, 8, 8) and np.allclose(x, round(0.299 * 200))  # BT.601 luma
    rgba = Preprocessing(input_size=(8, 8), channels=4, color_order="BGR", layout="NHWC", scale=1.0, mean=(0.0,), std=(1.0,))
    y, _ = rgba.apply(img)
    assert y.shape == (1, 8, 8, 4) and y[0, 0, 0].tolist() == [0, 0, 200, 255]
    with pytest.raises(Exception, match="3 values for a 1-channel input"):
        Preprocessing(channels=1, mean=(0.1, 0.2, 0.3))


def test_upsample_linear_opset9_keeps_asymmetric(tmp_path, capsys):
    case = Path("/work/shared/cases/upsample_linear_opset9.onnx")
    src = onnx.load(str(case)) if case.exists() else _upsample("linear", [1, 1, 2, 2])
    rc, out, err = _intake(tmp_path, src, "  input_size: [32, 32]\n", capsys)
    assert rc == 0, err
    m = onnx.load(str(tmp_path / "out-m" / "model.onnx"))
    rs = [n for n in m.graph.node if n.op_type == "Resize"]
    assert rs and all({a.name: helper.get_attribute_value(a) for a in n.attribute}["coordinate_transformation_mode"] == b"asymmetric" for n in rs)
    r = json.loads((tmp_path / "out-m" / "intake.json").read_text())
    assert r["numeric_check"]["passed"] and r["numeric_check"]["max_abs_diff"] < 1e-5
    note = next(n for n in r["conversion"]["notes"] if n["op_type"] == "Upsample")
    assert "coordinate_transformation_mode=asymmetric" in note["detail"] and "half_pixel" not in note["detail"]


def _upsample(mode: str, scales: list[float]) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Upsample", ["c", "scales"], ["y"], name="up", mode=mode)]
    return _model([1, 3, 32, 32], nodes, None, [_w("w", (2, 3, 3, 3)), numpy_helper.from_array(np.array(scales, np.float32), "scales")], opset=9)


@pytest.mark.parametrize("mode,scales", [("nearest", [1, 1, 1.5, 1.5]), ("linear", [1, 1, 3, 2]), ("nearest", [1, 1, 2, 2])])
def test_upsample_kinds_convert_without_numeric_change(tmp_path, capsys, mode, scales):
    rc, _, err = _intake(tmp_path, _upsample(mode, scales), "  input_size: [32, 32]\n  note_check: off\n", capsys)
    assert rc == 0, err
    r = json.loads((tmp_path / "out-m" / "intake.json").read_text())
    assert r["numeric_check"]["max_abs_diff"] < 1e-5
    assert "asymmetric" in r["conversion"]["notes"][0]["detail"]


def test_custom_domain_op_is_one_line_without_runtime_noise(tmp_path, capfd):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("MyOp", ["r"], ["y"], name="mine", domain="com.acme")]
    m = _model([1, 3, 32, 32], nodes, [1, 3, 32, 32], [])
    m.opset_import.append(helper.make_opsetid("com.acme", 1))
    onnx.save(m, tmp_path / "c.onnx")
    (tmp_path / "p.yaml").write_text("intake:\n  input_size: [32, 32]\n")
    rc = main(["intake", str(tmp_path / "c.onnx"), "--params", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "o")])
    err = capfd.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "com.acme::MyOp" in err and "Traceback" not in err and "ONNXRuntimeError" not in err
    assert not (tmp_path / "o").exists()


def test_intake_config_rank3_needs_batch_one():
    with pytest.raises(Exception, match="batch_axis: false"):
        IntakeConfig.from_dict({"batch_size": 2, "preprocessing": {"batch_axis": False}})
    assert intake  # the library entry point the CLI calls


REAL = {  # documented preprocessing: ddddocr's YOLOX det (416x416 BGR 0-255, letterbox 114); rapidocr's rec/cls (BGR, /255, 0.5/0.5)
    "ddddocr/common_det.onnx": "  input_size: [416, 416]\n  preprocessing: {input_name: images, color_order: BGR, scale: 1.0, mean: [0.0], std: [1.0], pad_value: 114}\n",
    "ch_PP-OCRv4_rec_infer.onnx": "  input_size: [48, 320]\n  preprocessing: {color_order: BGR}\n",
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": "  input_size: [48, 192]\n  preprocessing: {color_order: BGR}\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_models_with_their_documented_preprocessing(tmp_path, capsys, name):
    if name.startswith("ddddocr/"):
        ddddocr = pytest.importorskip("ddddocr")
        path = Path(ddddocr.__file__).parent / name.split("/", 1)[1]
    else:
        from quantkit.demo import packaged_model_path

        path = packaged_model_path(name)
    (tmp_path / "p.yaml").write_text("intake:\n" + REAL[name])
    rc = main(["intake", str(path), "--params", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "o")])
    c = capsys.readouterr()
    assert rc == 0, c.err
    r = json.loads((tmp_path / "o" / "intake.json").read_text())
    assert r["numeric_check"]["passed"] and r["note_check"]["ok"] and r["note_check"]["verdicts"]["layout"] == "ok"
    assert r["note_check"]["untested_reason"].startswith("no probe: db_text: first output")


def test_an_input_size_that_cannot_fit_in_memory_is_refused_before_anything_runs(tmp_path, capsys):
    """At 60000x60000 one Conv's input and output take 28.8 + 14.4 GB: more than this machine has. Intake names the
    setting to lower in one line (exit non-zero, nothing written) instead of being killed by the OOM killer."""
    from quantkit.intake.graph import check_memory, machine_memory

    side = 60000 if machine_memory() < 40e9 else 200000
    rc, out, err = _intake(tmp_path, conv_map(1), f"  input_size: [{side}, {side}]\n  preprocessing: {{channels: 1, mean: [0.5], std: [0.5]}}\n", capsys)
    assert rc != 0 and err.count("\n") == 1, err
    assert f"lower intake.input_size [{side}, {side}]" in err and "Traceback" not in err
    assert not (tmp_path / "out-m").exists()
    m = onnx.shape_inference.infer_shapes(_model([1, 1, 100, 100], conv_map(1).graph.node, None, [_w("w", (1, 1, 3, 3))]))
    check_memory(m, "m.onnx", "intake.input_size [100, 100]", memory=10**6)  # 80 kB: fits
    with pytest.raises(Exception, match=r"m\.onnx: at intake.input_size \[100, 100\] one inference needs at least 0\.0 GB"):
        check_memory(m, "m.onnx", "intake.input_size [100, 100]", memory=50_000)


def test_a_checker_error_onnx_runtime_runs_is_printed_with_its_reason(tmp_path, capsys):
    """A com.microsoft op ONNX Runtime runs and onnx's checker does not know: written (numeric check passed), and the
    summary names each checker error instead of a bare FAILED (a new user's trial: the reason was only in intake.json)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Gelu", ["r"], ["y"], name="gelu", domain="com.microsoft")]
    m = _model([1, 3, 32, 32], nodes, [1, 3, 32, 32], [])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    rc, out, err = _intake(tmp_path, m, "  input_size: [32, 32]\n  note_check: off\n", capsys)
    assert rc == 0, err
    report = json.loads((tmp_path / "out-m" / "intake.json").read_text())["validation"]
    errors = [i for i in report["issues"] if i["severity"] == "error"]
    assert errors and not report["ok"]
    assert f"validation  {len(errors)} error" in out and "written all the same" in out and "FAILED" not in out
    assert all(f"  {i['stage']}: {i['message']}" in out for i in errors)

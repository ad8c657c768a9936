"""What the written model computes (issues 12 and 17), on tiny generated models: graph outputs keep their own
range, variable-shaped tensors, the runtime gate, every output in the record and the summary, collapsed channels."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import (
    concat_head_model,
    conv_relu_conv_model,
    output_feeds_activation_model,
    reshaped_softmax_output_model,
    variable_shape_model,
)
from test_quantize_fixtures import make_set, write_model_intake

from quantkit.artifacts import CalibrationRecord
from quantkit.cli.main import main
from quantkit.errors import TargetSupportError
from quantkit.quantize import StaticQuantConfig, TensorOverride, quantize
from quantkit.quantize.outputs import ChannelRange, channel_axes, effective_levels

SIZE = 16


@pytest.fixture(scope="module")
def cset(tmp_path_factory):
    return make_set(tmp_path_factory.mktemp("set") / "set", 4, size=32)


def _feed(cset, intake, i: int = 0) -> dict[str, np.ndarray]:
    """Calibration image ``i`` as the model reads it."""
    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote

    r = CalibrationSetReader(CalibrationSet.load(cset), ExportNote.load(intake / "export_note.json").preprocessing)
    return {"x": list(r.iter_batches())[i][1]}


def _run(path, feed, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    s = ort.InferenceSession(str(path), so)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


@pytest.mark.parametrize("op, fmt", [("Relu", "qdq"), ("Clip", "qdq"), ("Relu", "qoperator")])
def test_graph_output_feeding_an_activation_keeps_its_own_range(tmp_path, cset, op, fmt):
    """ORT's adjust_tensor_ranges would give y1 the Relu/Clip output's range (zero point 0: every negative value of a
    graph output lost). quantize pins it to its own calibrated range, says so, and the written model computes it."""
    intake = write_model_intake(output_feeds_activation_model(SIZE, op), tmp_path / "intake", SIZE)
    rec = quantize(intake, StaticQuantConfig(format=fmt), out=tmp_path / "q", calibration_set=cset)
    y1 = rec.tensor("y1")
    lo, hi = rec.calibrated_ranges["y1"]
    assert lo < -0.1 and y1.zero_point[0] > 0
    rep_lo, rep_hi = y1.representable()
    assert rep_lo[0] <= lo + y1.scale[0] and rep_hi[0] >= hi - y1.scale[0]  # the written range is the calibrated one
    assert rec.calibration["outputs_pinned"] == ["y1"] and "range_changes" not in rec.calibration
    out = rec.calibration["outputs"]
    assert [o["name"] for o in out] == ["y1", "y2"] and all(o["quantized"] for o in out)
    fp = _run(intake / "model.onnx", _feed(cset, intake))["y1"]
    # QDQ: ORT's simulation (level disable: float kernels between Q/DQ pairs) is what the model computes by ONNX's
    # definition; ORT's INT8 kernels on an x86 CPU without VNNI sum pairs of uint8 x int8 products in 16 bits and
    # saturate (pattern saturation_u8s8, 0.4 off on an AMD EPYC with AVX2), which is not this test's subject
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL if fmt == "qdq" else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    q = _run(tmp_path / "q" / "model_int8.onnx", _feed(cset, intake), level)["y1"]
    assert q.min() < -0.1  # negatives survive
    if fmt == "qdq" or _runtime_sums_u8s8_exactly():
        assert np.abs(q - fp).max() <= 2 * y1.scale[0]  # within quantization error


def _runtime_sums_u8s8_exactly() -> bool:
    """Whether ORT's INT8 Conv on this machine agrees with ONNX on the saturation_u8s8 pattern (False on x86 without VNNI)."""
    from quantkit.patterns import get_pattern, run_pattern, runtime_variants

    variant = next(v for v in runtime_variants(["onnxruntime"]) if v.deployment)
    return run_pattern(get_pattern("saturation_u8s8"), variant).verdict == "agree"


def test_a_written_range_narrower_than_calibrated_is_reported(tmp_path, cset, capsys):
    """A user override that clips a graph output is honoured, and the record and summary say what it costs."""
    intake = write_model_intake(conv_relu_conv_model(SIZE), tmp_path / "intake", SIZE)
    params = tmp_path / "p.yaml"
    params.write_text("quantize:\n  tensor_overrides:\n    y: {rmin: 0.0, rmax: 0.05}\n")
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--params", str(params), "--out", str(tmp_path / "q")]) == 0
    text = capsys.readouterr().out
    rec = CalibrationRecord.load(tmp_path / "q")
    (change,) = rec.calibration["range_changes"]
    assert change["tensor"] == "y" and change["kind"] == "clipped" and change["graph_output"] is True
    assert change["calibrated"][0] < 0 and change["written"][1] == pytest.approx(0.05, rel=0.02)
    assert "range changed: graph output 'y': calibrated range [" in text and "clipped: values outside it are lost" in text
    assert "graph outputs:\n  y: uint8 scale" in text


def test_every_graph_output_is_in_the_record_and_summary(tmp_path, cset, capsys):
    intake = write_model_intake(conv_relu_conv_model(SIZE, extra_int_output=True), tmp_path / "intake", SIZE)
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--out", str(tmp_path / "q")]) == 0
    text = capsys.readouterr().out
    rec = CalibrationRecord.load(tmp_path / "q")
    assert [(o["name"], o["quantized"]) for o in rec.calibration["outputs"]] == [("y", True), ("cls", False)]
    assert "  cls: float (not quantized)" in text and "  y: uint8 scale" in text
    assert main(["quantize", str(intake), "--dynamic", "--out", str(tmp_path / "d")]) == 0
    dyn = CalibrationRecord.load(tmp_path / "d")
    assert [(o["name"], o["quantized"]) for o in dyn.calibration["outputs"]] == [("y", False), ("cls", False)]


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile", "distribution"])
def test_variable_shaped_tensors_calibrate_with_every_method(tmp_path, cset, method):
    """NonZero -> GatherND: the tensor's length changes per image. Every calibrator reads it at whatever size
    arrives; ORT 1.32 then crashes running the quantized Mul on an empty GatherND at its default level, so the
    runtime gate keeps the nodes around the variable-shaped tensors in float, and says so."""
    intake = write_model_intake(variable_shape_model(SIZE), tmp_path / "intake", SIZE)
    rec = quantize(intake, StaticQuantConfig(method=method), out=tmp_path / "q", calibration_set=cset)
    cal = rec.calibration
    assert set(cal["variable_shape"]) >= {"vals"} and "vals" in rec.calibrated_ranges
    lo, hi = rec.calibrated_ranges["vals"]
    assert hi > 0.5 and (lo > 0.5 or method == "distribution")  # GatherND keeps the values above the threshold only
    code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1]); "
            "print(s.run(None, {'x': np.zeros((1, 3, 16, 16), np.float32)})[1].shape)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q" / "model_int8.onnx")], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "(0,)"  # the written model runs on an image with no hit
    assert cal.get("float_nodes", []) in ([], ["gather", "post"])


def test_variable_shaped_tensor_ranges_equal_the_values_seen(tmp_path, cset):
    """MinMax of a variable-shaped tensor equals min/max over every value it held on the set (FP32 model run)."""
    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote

    intake = write_model_intake(variable_shape_model(SIZE), tmp_path / "intake", SIZE)
    rec = quantize(intake, StaticQuantConfig(), out=tmp_path / "q", calibration_set=cset)
    m = onnx.load(str(intake / "model.onnx"))
    m.graph.output.append(onnx.helper.make_tensor_value_info("vals", onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as calibration runs it (bit for bit)
    s = ort.InferenceSession(m.SerializeToString(), so)
    r = CalibrationSetReader(CalibrationSet.load(cset), ExportNote.load(intake / "export_note.json").preprocessing)
    vals = np.concatenate([s.run(["vals"], feed)[0] for _, feed in ((None, {"x": b}) for _, b in r.iter_batches())])
    assert rec.calibrated_ranges["vals"] == (float(vals.min()), float(vals.max()))


def test_tensor_empty_on_every_image_keeps_its_nodes_in_float(tmp_path, cset, caplog):
    intake = write_model_intake(variable_shape_model(SIZE, threshold=1e9), tmp_path / "intake", SIZE)
    with caplog.at_level("WARNING", logger="quantkit.quantize.engine"):
        rec = quantize(intake, StaticQuantConfig(method="percentile"), out=tmp_path / "q", calibration_set=cset)
    assert "vals" in rec.calibration["unobserved"] and {"gather", "post"} <= set(rec.calibration["float_nodes"])
    assert "tensor 'vals' held no value on any calibration image" in caplog.text
    q = onnx.load(str(tmp_path / "q" / "model_int8.onnx"))
    assert next(n for n in q.graph.node if n.name == "post").input[0] == "vals"  # float Mul on the float GatherND


def test_a_combination_the_runtime_cannot_load_is_refused(tmp_path, cset, capsys):
    """4-bit activations with 8-bit weights (QDQ): ORT's CPU provider refuses the model at its default level."""
    intake = write_model_intake(conv_relu_conv_model(SIZE), tmp_path / "intake", SIZE)
    params = tmp_path / "p.yaml"
    params.write_text("quantize:\n  activation_type: uint4\n  weight_type: int8\n")
    dest = tmp_path / "q"
    rc = main(["quantize", str(intake), "--calibration-set", str(cset), "--params", str(params), "--out", str(dest)])
    err = capsys.readouterr().err.strip()
    assert rc == 5 and len(err.splitlines()) == 1, err
    assert "onnxruntime-cpu cannot run the quantized model at optimization level 'all'" in err
    assert "activation_type uint4 with weight_type int8 (qdq)" in err and "set weight_type: int4" in err
    assert not dest.exists() and not list(tmp_path.glob(".q*"))
    rec = quantize(intake, StaticQuantConfig(activation_type="uint4", weight_type="int4"), out=dest, calibration_set=cset)
    assert rec.tensor("y").dtype == "uint4"  # the fix the message names loads


def test_check_runs_turns_a_crash_into_a_refusal(tmp_path):
    """The check runs in a child process: a runtime that dies (here: a model that is not ONNX at all) is one line."""
    from quantkit.quantize.runtime_check import check_runs

    bad = tmp_path / "m.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(TargetSupportError, match="m.onnx: onnxruntime-cpu cannot run the quantized model .*; fix it; nothing was written"):
        check_runs(bad, name="m.onnx", fix="fix it")


def test_concatenated_boxes_and_scores_are_flagged(tmp_path, cset, capsys):
    """Issue 12's collapse kind: pixel boxes (0..470) and sigmoid scores (0..1) concatenated into one output share
    one scale (470/255 per step), so every score falls into less than one quantization step."""
    model = concat_head_model(SIZE)
    assert channel_axes(model, "det") == (-1,)
    intake = write_model_intake(model, tmp_path / "intake", SIZE)
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--out", str(tmp_path / "q")]) == 0
    text = capsys.readouterr().out
    rec = CalibrationRecord.load(tmp_path / "q")
    (flag,) = rec.calibration["collapsed_outputs"]
    assert flag["tensor"] == "det" and flag["axis"] == 2 and flag["channels"] == [4] and flag["of_channels"] == 5
    assert 0 < flag["levels"][0] < 1 and flag["floor"] == 16
    assert "COLLAPSED: output 'det' axis 2: 1 of 5 channels span fewer than 16 quantization steps (channel: levels 4: " in text
    scores = _run(tmp_path / "q" / "model_int8.onnx", _feed(cset, intake, 1))["det"][..., 4]
    assert len(np.unique(scores)) <= 2  # what the flag predicts: the scores collapse to one or two values
    # the same head with separate outputs is not flagged, and --min-levels moves the floor
    split = write_model_intake(concat_head_model(SIZE, split=True), tmp_path / "split", SIZE)
    ok = quantize(split, StaticQuantConfig(), out=tmp_path / "s", calibration_set=cset)
    assert "collapsed_outputs" not in ok.calibration
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--min-levels", "0.01", "--out", str(tmp_path / "q2")]) == 0
    assert "collapsed_outputs" not in json.loads((tmp_path / "q2" / "record.json").read_text())["calibration"]


def test_effective_levels_for_an_adapters_own_channels(tmp_path, cset):
    """The function task adapters call with their decision channels: levels = channel range / the tensor's scale."""
    intake = write_model_intake(concat_head_model(SIZE, split=True), tmp_path / "intake", SIZE)
    rec = quantize(intake, StaticQuantConfig(), out=tmp_path / "q", calibration_set=cset)
    s = rec.tensor("boxes").scale[0]
    (lv,) = effective_levels(rec, [ChannelRange("boxes", 2, (0.0, 0.0, 0.0, 100.0), (470.0, 1.0, 0.5, 101.0))], floor=16)
    assert lv.levels == pytest.approx((470 / s, 1 / s, 0.5 / s, 1 / s)) and lv.collapsed == (1, 2, 3)
    assert effective_levels(rec, [ChannelRange("not-quantized", 0, (0.0,), (1.0,))]) == ()


def test_channel_axes_follow_transposes_and_elementwise_ops():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=1), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 1]), helper.make_node("Reshape", ["t", "shape"], ["r"])]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b", "shape")]
    g = helper.make_graph(nodes, "g", vi, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("t", "r")])
    m = helper.make_model(g)
    assert channel_axes(m, "t") == (2,)  # Concat axis 1 moved to 2 by the Transpose
    assert channel_axes(m, "r") == ()  # a Reshape breaks the correspondence
    assert channel_axes(m, "a") == ()  # a graph input
    flat = conv_relu_conv_model(SIZE)
    assert channel_axes(flat, "y") == (1,)  # a Conv's output channels


def test_override_and_pin_do_not_fight(tmp_path, cset):
    """A user's own override of a Relu-fed graph output wins over the pin (and nothing is pinned)."""
    intake = write_model_intake(output_feeds_activation_model(SIZE), tmp_path / "intake", SIZE)
    rec = quantize(intake, StaticQuantConfig(tensor_overrides={"y1": TensorOverride(rmin=-2.0, rmax=2.0)}), out=tmp_path / "q",
                   calibration_set=cset)
    assert "outputs_pinned" not in rec.calibration
    lo, hi = rec.tensor("y1").representable()
    assert lo[0] == pytest.approx(-2.0, abs=0.02) and hi[0] == pytest.approx(2.0, abs=0.02)


def test_an_output_sharing_its_inputs_scale_is_reported_quantized(tmp_path, cset, capsys):
    """A Reshape output carries its input's scale in ORT's QDQ model; the summary said "float (not quantized)"."""
    intake = write_model_intake(reshaped_softmax_output_model(SIZE), tmp_path / "intake", SIZE)
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--out", str(tmp_path / "q")]) == 0
    text = capsys.readouterr().out
    (out,) = CalibrationRecord.load(tmp_path / "q").calibration["outputs"]
    assert out["quantized"] and out["shares"] == "y_intermediate" and out["dtype"] == "uint8"
    assert "not quantized" not in text and "y: uint8 scale" in text and "(shares y_intermediate's parameters)" in text


def test_one_checker_child_serves_the_checks_and_a_crash_starts_a_new_one(tmp_path, cset, monkeypatch):
    """The runtime gate's child process is started once and serves every check; a check during which it dies
    (ORT 1.32's SIGSEGV on a quantized Mul fed by an empty GatherND) is a one-line refusal, and the next check
    (quantize's retry with those nodes in float) gets a new child."""
    from quantkit.quantize import files
    from quantkit.quantize import runtime_check as rc

    seen: list[tuple[int | None, str | None]] = []
    real = rc.check_runs

    def watched(model, **kw):
        try:
            real(model, **kw)
        except TargetSupportError as e:
            seen.append((rc._CHECKER.proc.pid if rc._CHECKER.proc else None, str(e)))
            raise
        seen.append((rc._CHECKER.proc.pid, None))

    monkeypatch.setattr(files, "check_runs", watched)
    intake = write_model_intake(variable_shape_model(SIZE), tmp_path / "intake", SIZE)
    good = write_model_intake(conv_relu_conv_model(SIZE), tmp_path / "good", SIZE)
    quantize(intake, StaticQuantConfig(), out=tmp_path / "q", calibration_set=cset)
    (pid_crash, refused), (pid_retry, ok) = seen
    assert pid_crash is None and pid_retry is not None  # the crashed child is gone; the retry started another
    assert "crashed with SIGSEGV" in refused and refused.endswith("nothing was written") and ok is None
    quantize(good, StaticQuantConfig(), out=tmp_path / "q2", calibration_set=cset)
    assert seen[-1] == (pid_retry, None)  # the same child served the next model


def test_checker_child_runs_this_code_from_inside_another_checkout(tmp_path, cset, monkeypatch):
    """`dvc repro` runs stages in the project folder; when that folder is another checkout of quantkit (a clone
    of an older commit) the child started with `python -m` must still import the parent's quantkit, not the
    folder's. Relative model paths are resolved by the parent."""
    from quantkit.quantize import runtime_check as rc

    other = tmp_path / "checkout" / "quantkit" / "quantize"
    other.mkdir(parents=True)
    for d in (other.parent, other):
        (d / "__init__.py").write_text("")
    (other / "runtime_check.py").write_text("raise SystemExit('the other checkout was imported')\n")
    good = write_model_intake(conv_relu_conv_model(SIZE), tmp_path / "checkout" / "good", SIZE)
    quantize(good, StaticQuantConfig(), out=tmp_path / "checkout" / "q", calibration_set=cset)
    monkeypatch.chdir(tmp_path / "checkout")
    checker = rc._Checker()
    try:
        assert checker.check("q/model_int8.onnx", "all") is None
        assert checker.check("q/missing.onnx", "all") is not None
    finally:
        checker.close()

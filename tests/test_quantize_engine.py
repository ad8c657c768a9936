"""quantize / replay / CLI on the real PP-OCR detector at 64x64 (pipeline contract of issue 2, stage 2)."""

from __future__ import annotations

import difflib
import json
import logging
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_quantize_fixtures import make_intake, make_set, make_tiny_intake

from quantkit.artifacts import CalibrationRecord, scale_diff
from quantkit.cli.main import main
from quantkit.errors import ModelError, UnsupportedOptionError
from quantkit.quantize import DynamicQuantConfig, StaticQuantConfig, quantize, replay

SIZE = 64


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    intake = make_intake(root / "intake", SIZE)
    cset = make_set(root / "set", 6, size=80)
    params = root / "params.yaml"
    params.write_text("quantize:\n  method: minmax\n  format: qdq\n  per_channel: true\n  activation_type: uint8\n  weight_type: int8\n")
    out = root / "work" / "quantize" / "deployed"
    rc = main(["quantize", str(intake), "--calibration-set", str(cset), "--params", str(params), "--out", str(out)])
    assert rc == 0
    return root, intake, cset, params, out


def test_cli_static_writes_model_and_complete_record(env):
    root, intake, cset, params, out = env
    assert sorted(p.name for p in out.iterdir()) == [".quantkit-output", "model_int8.onnx", "record.json"]
    assert not list(out.parent.glob(".deployed*"))  # no temp folder or checkpoint left behind
    rec = CalibrationRecord.load(out / "record.json")
    raw = json.loads((out / "record.json").read_text())
    assert set(raw) >= {"schema_version", "fingerprint", "model_digest", "quantized_model_digest", "calibration_set", "config",
                        "config_hash", "opset_before", "opset_after", "versions", "tensors"}
    assert set(raw["versions"]) == {"onnx", "onnxruntime", "numpy", "quantkit"}
    manifest = json.loads((cset / "manifest.json").read_text())
    cs = rec.calibration_set
    assert (cs.set_id, cs.name, cs.camera, cs.lighting, cs.count) == (manifest["set_id"], manifest["name"], "cam1", "day", 6)
    assert rec.config["per_channel"] is True and rec.config["method"] == "minmax" and rec.opset_before == rec.opset_after == 13
    from quantkit._io import sha256_file

    assert rec.model_digest == sha256_file(intake / "model.onnx") and rec.quantized_model_digest == sha256_file(out / "model_int8.onnx")
    df = rec.table()
    assert set(df["role"]) == {"activation", "weight", "bias"}
    conv_w = df[(df.role == "weight") & (df.channels > 1)]
    assert len(conv_w) > 50 and set(conv_w["axis"]) == {0.0, 1.0}  # Conv axis 0, ConvTranspose axis 1
    acts = df[df.role == "activation"]
    assert (acts.calibrator == "minmax").all() and acts.range_min.notna().all()
    # every scale in the record is the one in the model
    q = onnx.load(str(out / "model_int8.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    for t in rec.tensors[:40]:
        key = t.name + ("_quantized_scale" if t.role == "bias" else "_scale")
        assert np.array_equal(inits[key].reshape(-1), np.asarray(t.scale, np.float32)), t.name
    # activation scale = (max(rmax,0) - min(rmin,0)) / 255 for u8 asymmetric (ORT compute_scale_zp)
    t = rec.tensor("x")
    assert t.dtype == "uint8" and t.scale[0] == pytest.approx((max(t.range_max, 0) - min(t.range_min, 0)) / 255, rel=1e-6)
    from quantkit.note import ExportNote

    assert ExportNote.from_model(q).preprocessing.input_size == (SIZE, SIZE)
    # ORT runs it
    import onnxruntime as ort

    y = ort.InferenceSession(str(out / "model_int8.onnx")).run(None, {"x": np.zeros((1, 3, SIZE, SIZE), np.float32)})[0]
    assert y.shape == (1, 1, SIZE, SIZE)


@pytest.mark.slow  # >10 s on the shared 2-core machine
def test_same_inputs_same_bytes_and_replay_is_byte_identical(env, tmp_path):
    root, intake, cset, params, out = env
    rec = CalibrationRecord.load(out)
    again = quantize(intake, StaticQuantConfig.from_dict(rec.config), out=tmp_path / "again", calibration_set=cset)
    assert (tmp_path / "again" / "model_int8.onnx").read_bytes() == (out / "model_int8.onnx").read_bytes()
    assert again.fingerprint == rec.fingerprint
    rep = replay(out / "record.json", intake, out=tmp_path / "replayed")
    assert (tmp_path / "replayed" / "model_int8.onnx").read_bytes() == (out / "model_int8.onnx").read_bytes()
    assert rep.fingerprint == rec.fingerprint and rep.calibration["replayed_from"] == rec.fingerprint
    assert rep.calibration["outputs"] == rec.calibration["outputs"]  # the same written model at its outputs


@pytest.mark.slow  # >10 s on the shared 2-core machine
def test_scale_diff_ranks_moved_tensors(env, tmp_path):
    root, intake, cset, params, out = env
    a = CalibrationRecord.load(out)
    b = quantize(intake, StaticQuantConfig(per_channel=True, max_images=1), out=tmp_path / "b", calibration_set=cset)
    d = scale_diff(a, b)
    assert len(d) == len(a.tensors) and d["rel_change"].is_monotonic_decreasing
    assert d.iloc[0].rel_change > 0 and d.iloc[0].role == "activation"
    # weights depend on the images only through ORT's int32-bias adjustment (weight scale raised when
    # input_scale * weight_scale is too small for the bias), so nearly all stay put
    w = d[d.role == "weight"]
    assert (w.rel_change == 0).mean() > 0.95
    top = d.iloc[0]
    assert top.rel_change == pytest.approx(abs(b.tensor(top["name"]).scale[0] - a.tensor(top["name"]).scale[0]) / a.tensor(top["name"]).scale[0])


def test_cli_dynamic(env, tmp_path, capsys):
    root, intake, cset, params, out = env
    rc = main(["quantize", str(intake), "--dynamic", "--params", str(params), "--out", str(tmp_path / "dyn"), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    rec = CalibrationRecord.load(tmp_path / "dyn")
    assert summary["mode"] == rec.mode == "dynamic" and rec.calibration_set is None
    assert rec.tensors and all(t.role in ("weight", "bias") for t in rec.tensors)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "dyn" / "model_int8.onnx")).graph.node}
    assert "ConvInteger" in ops and "DynamicQuantizeLinear" in ops


def test_histogram_method_and_qoperator(env, tmp_path):
    root, intake, cset, params, out = env
    rec = quantize(intake, StaticQuantConfig(method="percentile", format="qoperator", per_channel=True), out=tmp_path / "p", calibration_set=cset)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "p" / "model_int8.onnx")).graph.node}
    assert "QLinearConv" in ops and "QuantizeLinear" in ops
    acts = [t for t in rec.tensors if t.role == "activation"]
    assert acts and all(t.calibrator == "percentile" for t in acts)
    assert any(len(t.scale) > 1 and t.axis == 0 for t in rec.tensors if t.role == "weight")


def test_distribution_with_integer_types_warns_and_records_symmetric_ranges(env, tmp_path, caplog):
    root, intake, cset, params, out = env
    with caplog.at_level("WARNING", logger="quantkit.quantize.engine"):
        rec = quantize(intake, StaticQuantConfig(method="distribution"), out=tmp_path / "d", calibration_set=cset)
    assert "ORT's float 8 calibrator" in caplog.text
    lo, hi = zip(*rec.calibrated_ranges.values())
    assert all(a == -b for a, b in zip(lo, hi))  # the symmetric (-max|x|, max|x|) the warning names


def _fails(argv, capsys, match):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1 and match in err, err
    return rc


def test_bad_input_one_line_nonzero_no_output(env, tmp_path, capsys):
    root, intake, cset, params, out = env
    dest = tmp_path / "o"
    old = make_intake(tmp_path / "old", SIZE, opset=12)
    _fails(["quantize", str(old), "--calibration-set", str(cset), "--params", str(params), "--out", str(dest)], capsys,
           "opset 12 is too old for per-channel QDQ")
    empty = tmp_path / "empty"
    (empty / "images").mkdir(parents=True)
    _fails(["quantize", str(intake), "--calibration-set", str(empty), "--params", str(params), "--out", str(dest)], capsys, "manifest.json")
    bad = tmp_path / "bad.yaml"
    bad.write_text("quantize:\n  method: minmax\n  percentile: 99.9\n")
    _fails(["quantize", str(intake), "--calibration-set", str(cset), "--params", str(bad), "--out", str(dest)], capsys,
           "percentile: only used by method 'percentile'")
    bad.write_text("quantize:\n  calib_symmetric: true\n")
    _fails(["quantize", str(intake), "--calibration-set", str(cset), "--params", str(bad), "--out", str(dest)], capsys, "unknown option 'calib_symmetric'")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(intake, corrupt)
    (corrupt / "model.onnx").write_bytes(b"not a model")
    _fails(["quantize", str(corrupt), "--calibration-set", str(cset), "--params", str(params), "--out", str(dest)], capsys, "not a readable ONNX protobuf")
    _fails(["quantize", str(tmp_path / "missing"), "--dynamic", "--out", str(dest)], capsys, "model not found")
    _fails(["quantize", str(intake), "--params", str(params), "--out", str(dest)], capsys, "needs --calibration-set")
    assert not dest.exists() and not list(tmp_path.glob(".o.*"))


@pytest.mark.slow  # >10 s on the shared 2-core machine
def _record_diff(before: dict[str, bytes], dest) -> str:
    return "\n".join(difflib.unified_diff(before["record.json"].decode().splitlines(), (dest / "record.json").read_text().splitlines(), lineterm=""))


def test_failed_run_keeps_previous_output_and_checkpoint(env, tmp_path, monkeypatch, caplog):
    from quantkit.quantize.calibration import calibrate

    monkeypatch.setattr(calibrate, "CHECKPOINT_INTERVAL_S", 0.0)  # save after every chunk
    root, intake, cset, params, out = env
    dest = tmp_path / "keep"
    quantize(intake, StaticQuantConfig(calibration_chunk_size=2), out=dest, calibration_set=cset)
    before = {f: (dest / f).read_bytes() for f in ("model_int8.onnx", "record.json")}
    import quantkit.calibset.reader as rd

    real = _interrupt_at_image(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        quantize(intake, StaticQuantConfig(calibration_chunk_size=2), out=dest, calibration_set=cset)
    assert {f: (dest / f).read_bytes() for f in before} == before, _record_diff(before, dest)
    assert (tmp_path / ".keep.calib-checkpoint").is_file()
    monkeypatch.setattr(rd.CalibrationSetReader, "get_next", real)
    with caplog.at_level(logging.INFO, logger="quantkit"):
        quantize(intake, StaticQuantConfig(calibration_chunk_size=2), out=dest, calibration_set=cset)
    assert "after 2 of" in caplog.text and not (tmp_path / ".keep.calib-checkpoint").exists()
    # the resumed run writes the same bytes as the uninterrupted one: the record holds no trace of the resume
    assert {f: (dest / f).read_bytes() for f in before} == before, _record_diff(before, dest)


def _interrupt_at_image(monkeypatch, n: int):
    """Make the calibration reader raise KeyboardInterrupt (Ctrl-C) when it is asked for its ``n``-th image; returns
    the real ``get_next``, to put back."""
    import quantkit.calibset.reader as rd

    real = rd.CalibrationSetReader.get_next
    calls = {"n": 0}

    def ctrl_c(self):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(rd.CalibrationSetReader, "get_next", ctrl_c)
    return real


def test_cli_interrupt_names_the_kept_checkpoint_only_when_this_run_wrote_it(tmp_path, monkeypatch, capsys):
    from quantkit.cli.main import Terminated
    from quantkit.quantize import engines as engine

    def interrupted(save: bool, error: type[KeyboardInterrupt] = KeyboardInterrupt):
        def run(intake, config, *, out, checkpoint=None, **kw):
            if save:  # calibration saved its state before the interrupt
                engine.checkpoint_path(out, checkpoint).write_bytes(b"state")
            raise error
        return run

    out = tmp_path / "work" / "quantize" / "sig"
    out.parent.mkdir(parents=True)
    ckpt = out.parent / ".sig.calib-checkpoint"
    args = ["quantize", str(tmp_path / "intake"), "--calibration-set", str(tmp_path / "set"), "--out", str(out)]
    monkeypatch.setattr(engine, "quantize", interrupted(save=True))
    assert main(args) == 130
    assert capsys.readouterr().err == (f"quantkit quantize: interrupted; no output was written; the calibration checkpoint {ckpt} was kept: "
                                       "the same command resumes from it\n")
    monkeypatch.setattr(engine, "quantize", interrupted(save=False))  # the stale file was not written by this run: not named
    assert main(args) == 130
    assert capsys.readouterr().err == "quantkit quantize: interrupted; no output was written\n"
    ckpt.unlink()
    assert main(args) == 130 and capsys.readouterr().err == "quantkit quantize: interrupted; no output was written\n"
    monkeypatch.setattr(engine, "quantize", interrupted(save=True, error=Terminated))
    own = tmp_path / "my.ckpt"
    assert main([*args, "--checkpoint", str(own)]) == 143
    err = capsys.readouterr().err
    assert err.startswith("quantkit quantize: terminated (SIGTERM); no output was written; the calibration checkpoint ") and str(own) in err
    assert err.count("\n") == 1


def test_cli_ctrl_c_during_calibration_names_the_checkpoint_a_rerun_resumes_from(tmp_path, monkeypatch, capsys, caplog):
    import quantkit.calibset.reader as rd
    from quantkit.quantize.calibration import calibrate

    monkeypatch.setattr(calibrate, "CHECKPOINT_INTERVAL_S", 0.0)  # save after every chunk
    intake, cset = make_tiny_intake(tmp_path / "intake"), make_set(tmp_path / "set", 6, size=32)
    out = tmp_path / "q"
    args = ["quantize", str(intake), "--calibration-set", str(cset), "--chunk-size", "2", "--out", str(out)]
    real = _interrupt_at_image(monkeypatch, 4)
    assert main(args) == 130
    ckpt = tmp_path / ".q.calib-checkpoint"
    assert capsys.readouterr().err.endswith(f"interrupted; no output was written; the calibration checkpoint {ckpt} was kept: "
                                            "the same command resumes from it\n")
    assert ckpt.is_file() and not out.exists()
    monkeypatch.setattr(rd.CalibrationSetReader, "get_next", real)
    with caplog.at_level(logging.INFO, logger="quantkit"):
        assert main(args) == 0
    assert "resuming calibration from" in caplog.text and not ckpt.exists()


def test_exclusions_keep_nodes_float(tmp_path):
    intake = make_tiny_intake(tmp_path / "tiny")
    cset = make_set(tmp_path / "set", 2, size=32)
    rec = quantize(intake, StaticQuantConfig(nodes_to_exclude=("conv2",)), out=tmp_path / "q", calibration_set=cset)
    q = onnx.load(str(tmp_path / "q" / "model_int8.onnx"))
    conv2 = next(n for n in q.graph.node if n.name == "conv2")
    assert conv2.input[1] == "w2"  # float weight, no DequantizeLinear in front
    assert "w1" in {t.name for t in rec.tensors} and "w2" not in {t.name for t in rec.tensors}
    with pytest.raises(UnsupportedOptionError, match="node 'conv9' is not in the model"):
        quantize(intake, StaticQuantConfig(nodes_to_exclude=("conv9",)), out=tmp_path / "q2", calibration_set=cset)
    assert not (tmp_path / "q2").exists()
    with pytest.raises(ModelError):
        quantize(tmp_path / "nowhere", DynamicQuantConfig(), out=tmp_path / "q3")


def test_changed_image_after_registration_fails_naming_it(tmp_path, capsys):
    """A set whose image was overwritten after registration is not calibrated under its old set id."""
    intake = make_tiny_intake(tmp_path / "intake")
    cset = make_set(tmp_path / "set", 3, size=32)
    victim = sorted((cset / "images").iterdir())[1]
    shutil.copyfile(sorted((cset / "images").iterdir())[0], victim)
    dest = tmp_path / "q"
    _fails(["quantize", str(intake), "--calibration-set", str(cset), "--out", str(dest)], capsys, victim.name)
    main(["quantize", str(intake), "--calibration-set", str(cset), "--out", str(dest)])
    assert "as a new version" in capsys.readouterr().err
    from quantkit.errors import CalibrationSetError

    with pytest.raises(CalibrationSetError, match="content changed since registration"):
        quantize(intake, StaticQuantConfig(), out=dest, calibration_set=cset)
    from quantkit.calibset import CalibrationSet

    loaded = CalibrationSet.load(cset)  # an already-loaded set object is verified too
    with pytest.raises(CalibrationSetError, match=victim.name):
        quantize(intake, StaticQuantConfig(), out=dest, calibration_set=loaded)
    assert not dest.exists()


def test_dynamic_with_calibration_set_is_an_error(tmp_path, capsys):
    intake = make_tiny_intake(tmp_path / "intake")
    cset = make_set(tmp_path / "set", 2, size=32)
    dest = tmp_path / "d"
    _fails(["quantize", str(intake), "--dynamic", "--calibration-set", str(cset), "--out", str(dest)], capsys,
           "--calibration-set applies to static quantization only")
    _fails(["quantize", str(intake), "--dynamic", "--max-images", "2", "--out", str(dest)], capsys, "--max-images applies to static")
    with pytest.raises(UnsupportedOptionError, match="drop --calibration-set"):
        quantize(intake, DynamicQuantConfig(), out=dest, calibration_set=cset)
    assert not dest.exists()


def test_summary_says_how_many_images_were_used(tmp_path, capsys):
    intake = make_tiny_intake(tmp_path / "intake")
    cset = make_set(tmp_path / "set", 4, size=32)
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--max-images", "2", "--out", str(tmp_path / "a")]) == 0
    assert "2 of 4 images" in capsys.readouterr().out
    assert main(["quantize", str(intake), "--calibration-set", str(cset), "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert ", 4 images," in out and " of " not in out


def test_summary_labels_activation_typed_constants():
    """Initializers ORT quantized with the activation type (scalar Mul/Add operands) print as 'constant'."""
    from types import SimpleNamespace

    from quantkit.cli.quantize import role_counts

    def t(role, dtype):
        return SimpleNamespace(role=role, dtype=dtype)

    rec = SimpleNamespace(config={"weight_type": "int8", "activation_type": "uint8"},
                          tensors=[t("weight", "int8"), t("weight", "int8"), t("weight", "uint8"), t("bias", "int32"), t("activation", "uint8")])
    assert role_counts(rec) == {("activation", "uint8"): 1, ("bias", "int32"): 1, ("constant", "uint8"): 1, ("weight", "int8"): 2}
    same = SimpleNamespace(config={"weight_type": "uint8", "activation_type": "uint8"}, tensors=[t("weight", "uint8")])
    assert role_counts(same) == {("weight", "uint8"): 1}  # indistinguishable by dtype: the record's role


def test_compare_on_a_dynamic_record_says_it_needs_a_static_one(tmp_path, capsys):
    intake = make_tiny_intake(tmp_path / "intake")
    cset = make_set(tmp_path / "set", 2, size=32)
    assert main(["quantize", str(intake), "--dynamic", "--out", str(tmp_path / "dyn")]) == 0
    capsys.readouterr()
    _fails(["compare", str(intake), str(tmp_path / "dyn"), "--set", str(cset)], capsys,
           "dynamic one: it has no activation scales")
    main(["compare", str(intake), str(tmp_path / "dyn"), "--set", str(cset)])
    assert "compare needs a static record" in capsys.readouterr().err

"""Record file, AIMET encodings round trip, layer-wise comparison and clipping rates (tiny model + CLI)."""

from __future__ import annotations

import json

import pytest
from test_quantize_fixtures import make_set, make_tiny_intake

from quantkit.calibset import CalibrationSet, CalibrationSetReader
from quantkit.cli.main import main
from quantkit.errors import InputFileError
from quantkit.note import ExportNote
from quantkit.artifacts import CalibrationRecord
from quantkit.quantize import StaticQuantConfig, export_aimet, import_aimet, quantize
from quantkit.quantize.compare import (
    clipping_rates,
    compare_layers,
    compare_outputs,
    plot_layer_errors,
)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("record")
    intake = make_tiny_intake(root / "intake", size=16)
    cset = CalibrationSet.load(make_set(root / "set", 4, size=24))
    rec = quantize(intake, StaticQuantConfig(per_channel=True), out=root / "q", calibration_set=cset)
    pre = ExportNote.load(intake / "export_note.json").preprocessing
    return root, intake, cset, rec, pre


def test_record_roundtrip_and_tamper_detection(env, tmp_path):
    root, intake, cset, rec, pre = env
    loaded = CalibrationRecord.load(root / "q" / "record.json")
    assert loaded == rec and "tensors" in repr(loaded) and len(repr(loaded)) < 120
    assert rec.tensor("w1").axis == 0 and len(rec.tensor("w1").scale) == 4
    with pytest.raises(KeyError, match="tensor 'nope' is not quantized"):
        rec.tensor("nope")
    d = json.loads((root / "q" / "record.json").read_text())
    d["tensors"][0]["scale"][0] *= 2
    bad = tmp_path / "record.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(InputFileError, match="fingerprint does not match"):
        CalibrationRecord.load(bad)
    bad.write_text("{")
    with pytest.raises(InputFileError, match="not a valid JSON"):
        CalibrationRecord.load(bad)


def test_aimet_export_offset_sign_and_round_trip(env, tmp_path):
    root, intake, cset, rec, pre = env
    doc = export_aimet(rec, tmp_path / "enc.json")
    assert doc["version"] == "1.0.0" and json.loads((tmp_path / "enc.json").read_text()) == doc
    acts = {e["name"]: e for e in doc["activation_encodings"]}
    params = {e["name"]: e for e in doc["param_encodings"]}
    x = rec.tensor("x")
    assert x.dtype == "uint8" and acts["x"]["offset"] == [-x.zero_point[0]] and acts["x"]["is_sym"] is False and acts["x"]["bw"] == 8
    assert params["w1"]["enc_type"] == "PER_CHANNEL" and params["w1"]["is_sym"] is True and set(params["w1"]["offset"]) == {-128}
    assert "b1" not in params  # int32 biases are left to the runtime, as AIMET does
    back = import_aimet(tmp_path / "enc.json", template=rec)
    assert back == tuple(t for t in rec.tensors if t.role != "bias")
    plain = {t.name: t for t in import_aimet(doc)}
    assert plain["w1"].zero_point == (0,) * 4 and plain["w1"].dtype == "int8" and plain["x"].zero_point == x.zero_point
    with pytest.raises(InputFileError, match="version '0.6.1' is not 1.0.0"):
        import_aimet({"version": "0.6.1"})
    with pytest.raises(InputFileError, match=r"activation_encodings\[0\] has no .bw. field"):
        import_aimet({"version": "1.0.0", "activation_encodings": [{"name": "a"}]})


def test_compare_layers_streaming(env):
    root, intake, cset, rec, pre = env
    reader = CalibrationSetReader(cset, pre)
    df = compare_layers(intake, root / "q", rec, reader.iter_batches(), max_elements=200)
    assert set(df.tensor) >= {"x", "r", "y"}  # y: graph output, kept by name in the QDQ model
    assert list(df.columns) == ["tensor", "sqnr_db", "cosine", "max_abs_error", "clipping_rate", "n", "kind", "note"]
    row = df.set_index("tensor").loc["x"]
    step = rec.tensor("x").scale[0]
    assert row.sqnr_db > 20 and row.cosine > 0.999 and row.max_abs_error <= step / 2 + 1e-6  # input: rounding error only
    assert row.n == 4 * 200  # sub-sampled: 200 of 768 elements per image
    assert df.sqnr_db.is_monotonic_increasing
    fig = plot_layer_errors(df)
    assert fig.axes[0].get_xlabel().startswith("SQNR")
    lv = compare_outputs(root / "q" / "model_int8.onnx", reader.iter_batches())
    assert list(lv.tensor) == ["y"] and lv.cosine.iloc[0] > 0.99


def test_clipping_rates(env):
    root, intake, cset, rec, pre = env
    reader = CalibrationSetReader(cset, pre)
    base = clipping_rates(intake, rec, reader.iter_batches()).set_index("tensor")
    assert base.loc["x", "n"] == 4 * 3 * 16 * 16
    assert (base.clipping_rate < 0.01).all()  # calibrated on these very images: only zero-point rounding clips
    bright = [(e, a * 3.0) for e, a in reader.iter_batches()]
    moved = clipping_rates(intake, rec, bright).set_index("tensor")
    assert moved.loc["x", "clipping_rate"] > 0.2 > base.loc["x", "clipping_rate"]
    assert moved.loc["x", "clip_low"] + moved.loc["x", "clip_high"] == pytest.approx(moved.loc["x", "clipping_rate"])
    lo, hi = rec.tensor("x").representable()
    assert moved.loc["x", "lo"] == pytest.approx(lo[0]) and moved.loc["x", "hi"] == pytest.approx(hi[0])


def test_compare_cli(env, capsys, tmp_path):
    root, intake, cset, rec, pre = env
    assert main(["compare", str(intake), str(root / "q"), "--set", str(cset.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["images"] == 4 and {r["tensor"] for r in out["tensors"]} >= {"x", "r"}
    assert main(["compare", str(intake), str(root / "q"), "--set", str(cset.root), "--max-images", "2"]) == 0
    assert "over 2 images" in capsys.readouterr().out
    rc = main(["compare", str(intake), str(tmp_path / "nothing"), "--set", str(cset.root)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "calibration record not found" in err

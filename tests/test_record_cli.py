"""``quantkit record``: show, diff, AIMET export/import and byte-identical replay from the command line."""

from __future__ import annotations

import json

import pytest
from test_quantize_fixtures import make_set, make_tiny_intake

from quantkit.cli.main import main
from quantkit.artifacts import CalibrationRecord
from quantkit.quantize import StaticQuantConfig, quantize


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("reccli")
    intake = make_tiny_intake(root / "intake", size=16)
    a, b = make_set(root / "a", 3, size=24, name="a"), make_set(root / "b", 3, size=24, name="b", seed=1)
    quantize(intake, StaticQuantConfig(), out=root / "qa", calibration_set=a)
    quantize(intake, StaticQuantConfig(), out=root / "qb", calibration_set=b)
    return root, intake


def test_show_diff_export_import_replay(env, tmp_path, capsys):
    root, intake = env
    rec = CalibrationRecord.load(root / "qa")
    assert main(["record", "show", str(root / "qa"), "--json", "--csv", str(tmp_path / "t.csv")]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fingerprint"] == rec.fingerprint and len(shown["tensors"]) == len(rec.tensors)
    assert [o["name"] for o in shown["calibration"]["outputs"]] == ["y"]
    assert main(["record", "show", str(root / "qa")]) == 0
    assert "graph outputs:\n  y: uint8 scale" in capsys.readouterr().out
    assert len((tmp_path / "t.csv").read_text().splitlines()) == len(rec.tensors) + 1

    assert main(["record", "diff", str(root / "qa"), str(root / "qb"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["rel_change"] >= rows[-1]["rel_change"] or rows[-1]["rel_change"] is None
    assert any(r["role"] == "activation" and r["rel_change"] > 0 for r in rows)  # other images, other activation scales

    assert main(["record", "export-aimet", str(root / "qa"), "--out", str(tmp_path / "enc.json")]) == 0
    capsys.readouterr()
    assert main(["record", "import-aimet", str(tmp_path / "enc.json"), "--record", str(root / "qa"), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["differ"] == [] and cmp["only_encodings"] == [] and cmp["same"] == cmp["encodings"] > 0

    assert main(["record", "replay", str(root / "qa"), str(intake), "--out", str(tmp_path / "replayed")]) == 0
    assert "byte-identical" in capsys.readouterr().out
    assert (tmp_path / "replayed" / "model_int8.onnx").read_bytes() == (root / "qa" / "model_int8.onnx").read_bytes()


def _record(folder, *tensors):
    """A record of ``tensors`` (``TensorScale``) saved in ``folder``: enough for ``record diff``."""
    from quantkit.artifacts import SetRef

    fp = CalibrationRecord.compute_fingerprint(tensors, "m" * 64, "set", "c" * 64)
    CalibrationRecord(fingerprint=fp, model_digest="m" * 64, quantized_model_digest="q" * 64, calibration_set=SetRef(set_id="set"),
                      config={}, config_hash="c" * 64, opset_before=13, opset_after=13, versions={}, tensors=tensors).save(folder / "record.json")
    return folder


def _scale(name, scale, zero_point=0):
    from quantkit.artifacts import TensorScale

    return TensorScale(name, "activation", "uint8", None, (scale,), (zero_point,))


def test_diff_of_identical_records_says_nothing_changed_in_one_line(tmp_path, capsys):
    tensors = [_scale(f"t{i}", 0.01 * (i + 1)) for i in range(25)]
    a, b = _record(tmp_path / "a", *tensors), _record(tmp_path / "b", *tensors)
    assert main(["record", "diff", str(a), str(b)]) == 0
    assert capsys.readouterr().out == "25 tensors: no tensor's scale or zero point changed\n"  # not "the 20 that moved most:" over zeros


def test_diff_lists_only_the_tensors_that_changed(tmp_path, capsys):
    same = [_scale(f"same{i}", 0.01) for i in range(25)]
    a = _record(tmp_path / "a", *same, _scale("moved", 0.01), _scale("zp", 0.01, 0), _scale("gone", 0.01))
    b = _record(tmp_path / "b", *same, _scale("moved", 0.02), _scale("zp", 0.01, 3), _scale("new", 0.01))
    assert main(["record", "diff", str(a), str(b)]) == 0
    head, *table = capsys.readouterr().out.splitlines()
    assert head == ("29 tensors: 1 changed scale, 1 changed zero point, 25 unchanged, 0 changed shape (per-tensor <-> per-channel), "
                    "1 only in A, 1 only in B; the 4 that moved most:")
    assert [line.split()[0] for line in table[1:]] == ["moved", "zp", "gone", "new"]  # no unchanged rows


def test_replay_refuses_another_model(env, tmp_path, capsys):
    root, intake = env
    other = make_tiny_intake(tmp_path / "other", size=20)
    assert main(["record", "replay", str(root / "qa"), str(other), "--out", str(tmp_path / "r")]) == 2
    assert "differs from the record's model_digest" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_outputs_never_replace_user_files_and_os_errors_are_one_line(env, tmp_path, capsys):
    root, intake = env
    mine = tmp_path / "mine.json"
    mine.write_text("keep me")
    assert main(["record", "export-aimet", str(root / "qa"), "--out", str(mine)]) == 2
    assert "already exists" in capsys.readouterr().err and mine.read_text() == "keep me"
    assert main(["record", "show", str(root / "qa"), "--csv", str(mine)]) == 2
    assert mine.read_text() == "keep me"
    capsys.readouterr()
    for bad in (mine / "sub.json", "/proc/quantkit-test/enc.json"):  # a file as folder; a place the OS refuses
        assert main(["record", "export-aimet", str(root / "qa"), "--out", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("quantkit record: error: ") and "Traceback" not in err


@pytest.mark.parametrize("edit, msg", [
    (lambda d: d["activation_encodings"][0].update(scale=[0.0]), "not finite and positive"),
    (lambda d: d["activation_encodings"][0].update(offset=[500]), "off the 8-bit grid"),
    (lambda d: d["activation_encodings"][0].update(dtype="FLOAT"), "only integer (INT) encodings"),
    (lambda d: d["activation_encodings"][0].update(enc_type="PER_BLOCK"), "only PER_TENSOR and PER_CHANNEL"),
    (lambda d: d["activation_encodings"].append(dict(d["activation_encodings"][0])), "listed twice"),
    (lambda d: (d.pop("activation_encodings"), d.pop("param_encodings")), "no 'activation_encodings' or 'param_encodings'"),
])
def test_import_aimet_rejects_invalid_encodings(env, tmp_path, capsys, edit, msg):
    root, intake = env
    assert main(["record", "export-aimet", str(root / "qa"), "--out", str(tmp_path / "enc.json")]) == 0
    doc = json.loads((tmp_path / "enc.json").read_text())
    edit(doc)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["record", "import-aimet", str(tmp_path / "bad.json"), "--record", str(root / "qa")]) == 2
    assert msg in capsys.readouterr().err


def test_import_aimet_other_record_differs_exit_4(env, tmp_path, capsys):
    root, intake = env
    assert main(["record", "export-aimet", str(root / "qb"), "--out", str(tmp_path / "enc.json")]) == 0
    capsys.readouterr()
    assert main(["record", "import-aimet", str(tmp_path / "enc.json"), "--record", str(root / "qa")]) == 4
    out = capsys.readouterr().out
    assert "note: the encodings were exported from record" in out and "differs:" in out

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

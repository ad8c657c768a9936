"""Params errors of intake, bind and evaluate name the params file passed (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantkit.cli.main import main


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_intake_params_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "x.yaml"
    out = tmp_path / "out"
    params.write_text("intake:\n  atol: small\n")
    err = _one_line_error(["intake", str(tmp_path / "m.onnx"), "--params", str(params), "--out", str(out)], capsys)
    assert f"{params}:intake.atol: expected a number, got 'small'" in err and err.count(str(params)) == 1
    params.write_text("intake:\n  input_size: [0, 16]\n")  # a validate() error: no field path of its own
    err = _one_line_error(["intake", str(tmp_path / "m.onnx"), "--params", str(params), "--out", str(out)], capsys)
    assert str(params) in err and "must be positive" in err and err.count(str(params)) == 1
    assert not out.exists()


@pytest.mark.parametrize("command", ["bind", "evaluate"])
def test_bind_and_evaluate_params_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    params = tmp_path / "p.yaml"
    params.write_text("thresholds:\n  operating_point:\n    grid_step: small\ntask:\n  adapter: db_text\n  options:\n    match_iou: small\n")
    if command == "bind":
        argv = ["bind", str(tmp_path / "q"), "--fp32", str(tmp_path / "i"), "--reference", str(tmp_path / "r")]
    else:
        argv = ["evaluate", str(tmp_path / "s"), "--fp32", str(tmp_path / "i"), "--deployed", str(tmp_path / "q"),
                "--deployed-thresholds", str(tmp_path / "t.json")]
    err = _one_line_error([*argv, "--params", str(params), "--out", str(tmp_path / "o")], capsys)
    field = "thresholds.operating_point.grid_step" if command == "bind" else "match_iou"
    assert err.count(str(params)) == 1 and field in err, err


@pytest.mark.parametrize("command", ["bind", "evaluate"])
def test_fp32_given_a_model_file_says_it_wants_the_intake_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    model = tmp_path / "trunc.onnx"
    model.write_bytes(b"\x08\x07")
    if command == "bind":
        argv = ["bind", str(tmp_path / "q"), "--fp32", str(model), "--reference", str(tmp_path / "r")]
    else:
        argv = ["evaluate", str(tmp_path / "s"), "--fp32", str(model), "--deployed", str(tmp_path / "q"),
                "--deployed-thresholds", str(tmp_path / "t.json")]
    err = _one_line_error([*argv, "--out", str(tmp_path / "o")], capsys)
    assert "--fp32 expects the intake folder (model.onnx + export_note.json" in err and "trunc.onnx/model.onnx" not in err

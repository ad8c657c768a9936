"""What an ``--out`` may replace (:mod:`quantkit._overwrite`), through the CLI: a command replaces its own earlier
output and nothing else; never one of its inputs; a single-file output replaces only a file of its own kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_quantize_fixtures import make_set, make_tiny_intake

from quantkit._io import OUTPUT_MARKER
from quantkit.cli.main import main


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"quantkit {command}: error: ") and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("overwrite")
    make_tiny_intake(root / "src", size=16, channels=1)  # db_text layout: the default task fits
    (root / "params.yaml").write_text("intake:\n  input_size: [16, 16]\n  note_check: off\nexport: {}\n")
    make_set(root / "calib", 6, size=24, name="calib")
    make_set(root / "site", 6, size=24, name="site", seed=1)
    for name in ("intake", "intake2"):
        assert main(["intake", str(root / "src" / "model.onnx"), "--params", str(root / "params.yaml"), "--out", str(root / name)]) == 0
    for name in ("q", "q2"):
        assert main(["quantize", str(root / "intake"), "--calibration-set", str(root / "calib"), "--out", str(root / name)]) == 0
    return root


def _quantize(work: Path, out: Path | str, *extra: str) -> int:
    return main(["quantize", str(work / "intake"), "--calibration-set", str(work / "calib"), "--out", str(out), *extra])


def test_a_command_replaces_its_own_earlier_output_and_names_itself_in_the_marker(work, capsys):
    out = work / "again"
    assert _quantize(work, out) == 0
    first = _files(out)
    assert _quantize(work, out) == 0  # what `dvc repro` and a manual re-run do
    assert _files(out) == first
    assert json.loads((out / OUTPUT_MARKER).read_text()) == {"command": "quantize"}
    assert json.loads((work / "intake" / OUTPUT_MARKER).read_text()) == {"command": "intake"}


def test_another_commands_output_folder_is_refused_in_one_line(work, capsys):
    before, q_before = _files(work / "intake2"), _files(work / "q2")
    capsys.readouterr()
    assert _quantize(work, work / "intake2") == 2  # the trial: a quantized model over an intake
    err = _one_line_error(capsys, "quantize")
    assert f"{work / 'intake2'}: folder holds the output of 'quantkit intake'" in err and "pass another --out, or delete the folder" in err
    assert main(["intake", str(work / "src" / "model.onnx"), "--params", str(work / "params.yaml"), "--out", str(work / "q2")]) == 2
    assert "holds the output of 'quantkit quantize', which 'quantkit intake' will not replace" in _one_line_error(capsys, "intake")
    assert _quantize(work, work / "intake2" / "sub") == 2  # nor is an output written inside another command's output
    err = _one_line_error(capsys, "quantize")
    assert "--out lies inside" in err and "the output of 'quantkit intake'" in err
    assert _files(work / "intake2") == before and _files(work / "q2") == q_before


@pytest.mark.parametrize("argv", [
    ["export", "mypkg.models:build", "--params", "{root}/params.yaml"],
    ["record", "replay", "{q}", "{intake}"],
    ["fallback", "{intake}", "--base", "{q}", "--reference-set", "{site}"],
    ["evaluate", "{site}", "--fp32", "{intake}", "--deployed", "{q}", "--deployed-thresholds", "{root}/th.json"],
    ["bundle", "{q}", "--thresholds", "{root}/th.json", "--fp32", "{intake}", "--golden", "{site}"],
    ["report", "--work-dir", "{root}/no-work"],
    ["measure", "--work-dir", "{root}/no-work"],
    ["fleet", "score", "{root}/m.parquet", "--calibration-set", "{calib}"],
], ids=lambda a: " ".join(a[:2]))
def test_every_folder_command_refuses_another_commands_output(work, capsys, argv):
    names = {"q": work / "q", "intake": work / "intake", "site": work / "site", "calib": work / "calib", "root": work}
    before = _files(work / "intake2")
    capsys.readouterr()
    assert main([a.format(**names) for a in argv] + ["--out", str(work / "intake2")]) == 2
    err = _one_line_error(capsys, argv[0])
    assert "holds the output of 'quantkit intake'" in err
    assert _files(work / "intake2") == before


@pytest.mark.parametrize("out,says", [
    ("intake", "--out is also an input of this command"),
    ("intake/sub", "--out lies inside the input folder"),
    (".", "--out contains the input"),
    ("calib", "--out is also an input of this command"),
])
def test_an_out_that_is_holds_or_lies_in_an_input_is_refused(work, capsys, out, says):
    before = _files(work / "intake")
    capsys.readouterr()
    assert _quantize(work, work / out) == 2
    assert says in _one_line_error(capsys, "quantize")
    assert _files(work / "intake") == before and not (work / "intake" / "sub").exists()


def test_a_marker_without_a_command_is_read_from_the_folders_files(work, capsys):
    """Markers of quantkit <= 0.1.0 are empty: the files tell the command (record.json + model_int8.onnx: quantize);
    a folder whose files tell none is refused; a marker quantkit did not write is refused."""
    old = work / "old-q"
    shutil.copytree(work / "q", old)
    (old / OUTPUT_MARKER).write_text("")
    capsys.readouterr()
    assert main(["intake", str(work / "src" / "model.onnx"), "--params", str(work / "params.yaml"), "--out", str(old)]) == 2
    assert "holds the output of 'quantkit quantize' or 'quantkit record replay'" in _one_line_error(capsys, "intake")
    assert _quantize(work, old) == 0
    assert json.loads((old / OUTPUT_MARKER).read_text()) == {"command": "quantize"}
    unknown = work / "old-unknown"
    unknown.mkdir()
    (unknown / OUTPUT_MARKER).write_text("")
    (unknown / "notes.txt").write_text("keep")
    assert _quantize(work, unknown) == 2
    assert "did not record its name" in _one_line_error(capsys, "quantize")
    (unknown / OUTPUT_MARKER).write_text("not ours\n")
    assert _quantize(work, unknown) == 2
    assert "output marker quantkit did not write" in _one_line_error(capsys, "quantize")
    assert (unknown / "notes.txt").read_text() == "keep"


def test_a_json_out_replaces_only_an_earlier_file_of_its_kind(work, tmp_path, capsys):
    def drift(out: Path) -> int:
        return main(["drift", str(work / "site"), "--calibration-set", str(work / "calib"), "--no-clipping", "--out", str(out)])

    notes = tmp_path / "mynotes.json"
    notes.write_text('{"my": "notes"}\n')
    record = tmp_path / "record.json"
    shutil.copy(work / "q" / "record.json", record)  # another quantkit artifact
    capsys.readouterr()
    for path in (notes, record):
        assert drift(path) == 2
        err = _one_line_error(capsys, "drift")
        assert f"{path}: exists and is not a drift result quantkit wrote" in err and "pass another --out, or delete the file" in err
    assert notes.read_text() == '{"my": "notes"}\n' and record.read_bytes() == (work / "q" / "record.json").read_bytes()
    out = tmp_path / "site.json"
    assert drift(out) == 0 and drift(out) == 0  # an earlier drift result is replaced
    assert json.loads(out.read_text())["site_set"]["name"] == "site"


def test_a_file_out_inside_an_input_folder_is_refused(work, tmp_path, capsys):
    copy = tmp_path / "intake-copy"
    shutil.copytree(work / "intake", copy)
    before = _files(copy)
    capsys.readouterr()
    assert main(["bind", str(work / "q"), "--fp32", str(copy), "--reference", str(work / "site"), "--out", str(copy / "model.onnx")]) == 2
    assert f"{copy / 'model.onnx'}: --out lies inside the input folder {copy}" in _one_line_error(capsys, "bind")
    assert _files(copy) == before


@pytest.mark.parametrize("argv", [
    ["bind", "{q}", "--fp32", "{intake}", "--reference", "{site}", "--out", "{f}"],
    ["drift", "{site}", "--calibration-set", "{calib}", "--no-clipping", "--out", "{f}"],
    ["verify", "{root}/dist", "--fp32", "{intake}", "--site-set", "{site}", "--out", "{f}"],
    ["params", "--out", "{f}"],
    ["demo", "model", "--out", "{f}"],
    ["calibset", "stats", "{calib}", "--plot", "{f}"],
    ["record", "export-aimet", "{q}", "--out", "{f}"],
    ["quantize", "{intake}", "--calibration-set", "{calib}", "--out", "{root}/q-ckpt", "--checkpoint", "{f}"],
    ["fleet", "register", "{calib}", "--out", "{f}"],
    ["fleet", "check", "{root}/scores", "--calibration-set", "{calib}", "--out", "{f}"],
    ["fleet", "check", "{root}/scores", "--calibration-set", "{calib}", "--metrics", "{f}"],
    ["fleet", "report", "{root}/check.json", "--out", "{f}"],
    ["fleet", "score", "{root}/m.parquet", "--calibration-set", "{calib}", "--out", "{root}/scores", "--run-info", "{f}"],
    ["report", "--work-dir", "{root}/no-work", "--out", "{d}"],
    ["measure", "--work-dir", "{root}/no-work", "--out", "{d}"],
], ids=lambda a: " ".join(a[:2]))
def test_no_single_file_output_replaces_a_users_file(work, tmp_path, capsys, argv):
    mine = tmp_path / "precious.txt"
    mine.write_text("keep me\n")
    folder = tmp_path / "mine"  # report and measure write named files into --out
    folder.mkdir()
    for name in ("shift_report.html", "shift_report.md", "metrics.json", "measurements.json", "measurements.js"):
        (folder / name).write_text("keep me\n")
    names = {"q": work / "q", "intake": work / "intake", "site": work / "site", "calib": work / "calib", "root": tmp_path, "f": mine, "d": folder}
    capsys.readouterr()
    assert main([a.format(**names) for a in argv]) == 2
    err = _one_line_error(capsys, argv[0])
    assert "not replaced" in err or "already exists" in err, err
    assert mine.read_text() == "keep me\n" and all(p.read_text() == "keep me\n" for p in folder.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "precious.txt"]

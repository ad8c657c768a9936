"""Inputs that do not belong together are refused in one line, naming both sides and the fix, before anything is
written: an FP32 intake that is not the model a record was quantized from (bind, compare, bundle), a set whose
images changed since registration (bind, evaluate), a calibration set that is not the record's (drift), a set's
image folder passed for the set, and a reference set on which the FP32 model itself finds nothing (bind: agreement
with nothing would read as perfect). Found by trying the product on ddddocr's YOLOX detector and rapidocr's models."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from models import concat_head_model
from PIL import Image
from test_collapse import PARAMS, _set

from quantkit.cli.main import main

LENIENT = PARAMS.replace("min_agreement: 0.5", "min_agreement: 0.0")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mismatch")
    (root / "params.yaml").write_text(LENIENT)
    onnx.save(concat_head_model(16), root / "det.onnx")
    other = concat_head_model(16)
    other.doc_string = "another export of the detector"  # another file, another digest
    onnx.save(other, root / "other.onnx")
    for name, seed in (("calib", 1), ("ref", 2), ("site", 3)):
        _set(root, name, seed)
    for model, intake in (("det.onnx", "intake"), ("other.onnx", "intake-other")):
        assert main(["intake", str(root / model), "--params", str(root / "params.yaml"), "--out", str(root / intake)]) == 0
    assert main(["quantize", str(root / "intake"), "--calibration-set", str(root / "calib"), "--params", str(root / "params.yaml"),
                 "--out", str(root / "q")]) == 0
    return root


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _bind(work: Path, out: Path, *, fp32: str = "intake", reference: Path | None = None, params: Path | None = None) -> int:
    return main(["bind", str(work / "q"), "--fp32", str(work / fp32), "--reference", str(reference or work / "ref"),
                 "--params", str(params or work / "params.yaml"), "--out", str(out)])


def test_bind_compare_and_bundle_refuse_an_fp32_intake_of_another_model(work: Path, tmp_path: Path, capsys) -> None:
    capsys.readouterr()
    assert _bind(work, tmp_path / "th.json", fp32="intake-other") == 3
    err = _one_line(capsys)
    assert "is not the model" in err and "record.json was quantized from" in err and "--fp32" in err
    assert not (tmp_path / "th.json").exists()
    assert main(["compare", str(work / "intake-other"), str(work / "q"), "--set", str(work / "ref"), "--no-runtimes"]) == 3
    assert "is not the model" in _one_line(capsys)
    assert _bind(work, tmp_path / "th.json") == 0  # the right pair binds
    capsys.readouterr()
    assert main(["bundle", str(work / "q"), "--thresholds", str(tmp_path / "th.json"), "--fp32", str(work / "intake-other"),
                 "--golden", str(work / "site"), "--out", str(tmp_path / "dist")]) == 3
    err = _one_line(capsys)
    assert "intake-other/model.onnx" in err and "own intake folder as --fp32" in err and not (tmp_path / "dist").exists()


def test_bind_and_evaluate_refuse_a_set_changed_since_registration(work: Path, tmp_path: Path, capsys) -> None:
    changed = tmp_path / "ref"
    shutil.copytree(work / "ref", changed)
    Image.new("RGB", (16, 16), (9, 9, 9)).save(changed / "images" / "03.png")
    capsys.readouterr()
    assert _bind(work, tmp_path / "th.json", reference=changed) == 2
    err = _one_line(capsys)
    assert "03.png" in err and "content changed since registration" in err and not (tmp_path / "th.json").exists()
    assert _bind(work, tmp_path / "th.json") == 0
    capsys.readouterr()
    assert main(["evaluate", str(changed), "--fp32", str(work / "intake"), "--deployed", str(work / "q"), "--deployed-thresholds",
                 str(tmp_path / "th.json"), "--params", str(work / "params.yaml"), "--out", str(tmp_path / "eval")]) == 2
    assert "content changed since registration" in _one_line(capsys) and not (tmp_path / "eval").exists()


def test_drift_refuses_a_calibration_set_the_model_was_not_calibrated_on(work: Path, tmp_path: Path, capsys) -> None:
    capsys.readouterr()
    code = main(["drift", str(work / "site"), "--calibration-set", str(work / "ref"), "--quantized", str(work / "q"), "--fp32",
                 str(work / "intake"), "--params", str(work / "params.yaml"), "--out", str(tmp_path / "d.json")])
    err = _one_line(capsys)
    assert code == 3 and "set ref" in err and "was calibrated on (calib" in err and "--calibration-set" in err
    assert not (tmp_path / "d.json").exists()


def test_the_image_folder_of_a_set_is_refused_naming_the_set(work: Path, tmp_path: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["quantize", str(work / "intake"), "--calibration-set", str(work / "calib" / "images"), "--params", str(work / "params.yaml"),
                 "--out", str(tmp_path / "q")]) == 2
    err = _one_line(capsys)
    assert f"pass {work / 'calib'} itself" in err and "calibset register" not in err


def test_bind_refuses_a_reference_set_where_fp32_finds_nothing(work: Path, tmp_path: Path, capsys) -> None:
    blind = tmp_path / "blind.yaml"  # FP32's own score threshold above every score: FP32 finds no box on any image
    blind.write_text(LENIENT.replace("score_thresh: 0.25", "score_thresh: 0.9999999"))
    capsys.readouterr()
    assert _bind(work, tmp_path / "th.json", params=blind) == 2
    err = _one_line(capsys)
    assert "the FP32 model finds nothing on any of its 6 images" in err and "preprocessing" in err
    assert not (tmp_path / "th.json").exists()


def test_demo_check_says_n_a_for_metrics_with_nothing_to_count(work: Path, tmp_path: Path, capsys) -> None:
    """Nothing detected: recall 0 against the labelled boxes, but precision and mean IoU have nothing to count and
    read n/a (they read 1.000, next to F1 0.000, on ddddocr's YOLOX at the wrong scale)."""
    from quantkit.calibset import register_set

    labelled = tmp_path / "labelled"
    shutil.copytree(work / "ref" / "images", labelled / "images")
    register_set(labelled, name="labelled", kind="reference",
                 labels={f"images/{p.name}": {"boxes": [[2, 2, 10, 10, 0]]} for p in (labelled / "images").iterdir()})
    blind = tmp_path / "blind.yaml"
    blind.write_text(LENIENT.replace("score_thresh: 0.25", "score_thresh: 0.9999999") + f"models:\n  det: {{file: {work / 'det.onnx'}}}\n")
    capsys.readouterr()
    assert main(["demo", "check", str(labelled), "--params", str(blind), "--model", "det"]) == 0
    out = capsys.readouterr().out
    assert "f1 0.000" in out and "recall 0.000" in out and "precision n/a" in out and "mean_iou n/a" in out, out


def test_a_label_key_no_task_reads_is_named_at_registration(work: Path, tmp_path: Path, caplog) -> None:
    from quantkit.calibset import register_set

    folder = tmp_path / "typo"
    shutil.copytree(work / "ref" / "images", folder / "images")
    register_set(folder, name="typo", kind="reference", labels={"images/00.png": {"box": [[2, 2, 10, 10, 0]]}})
    assert any("no task reads the label key(s) box" in m and "boxes" in m for m in caplog.messages), caplog.messages

"""A loader handed another kind of quantkit file says what the file is and what to pass instead, in one line, instead
of a schema-version or fingerprint complaint; a damaged or old file of the right kind keeps its own message."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from quantkit.artifacts import CalibrationRecord, DriftResult, EvalSummary, FallbackResult, ThresholdSet
from quantkit.artifacts.verification import DeploymentVerification
from quantkit.errors import InputFileError
from quantkit.kinds import describe
from quantkit.note import ExportNote


def _record(path: Path) -> Path:
    r = CalibrationRecord(fingerprint="", model_digest="m" * 64, quantized_model_digest="q" * 64, calibration_set=None, config={},
                          config_hash="c" * 64, opset_before=13, opset_after=13, versions={}, tensors=())
    r = dataclasses.replace(r, fingerprint=CalibrationRecord.compute_fingerprint((), r.model_digest, None, r.config_hash))
    return r.save(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "q").mkdir()
    return {"record": _record(tmp_path / "q" / "record.json"), "thresholds": ThresholdSet().save(tmp_path / "minmax.json"),
            "note": ExportNote().save(tmp_path / "export_note.json")}


def test_a_threshold_set_given_as_a_record_is_named(files):
    with pytest.raises(InputFileError) as e:
        CalibrationRecord.load(files["thresholds"])
    msg = str(e.value)
    assert msg == (f"{files['thresholds']}: this is a threshold set (thresholds.json, written by 'quantkit bind'), not a calibration "
                   "record; pass the record.json that 'quantkit quantize' writes (or the folder holding it)")
    assert "schema_version" not in msg


@pytest.mark.parametrize("cls", [ThresholdSet, EvalSummary, FallbackResult, DriftResult, DeploymentVerification])
def test_a_record_given_to_another_loader_is_named(files, cls):
    with pytest.raises(InputFileError, match=r"this is a calibration record \(record\.json, written by 'quantkit quantize'\), "
                                             rf"not an? {cls.KIND}; pass ") as e:
        cls.load(files["record"])
    assert "\n" not in str(e.value) and "fingerprint" not in str(e.value)


def test_the_export_note_and_its_loader(files):
    with pytest.raises(InputFileError, match=r"this is an export note \(export_note\.json, written by 'quantkit intake'\), not a calibration record"):
        CalibrationRecord.load(files["note"])
    with pytest.raises(InputFileError, match=r"this is a calibration record .*, not an export note; pass the export_note\.json"):
        ExportNote.load(files["record"])
    with pytest.raises(InputFileError, match=r"this is a threshold set .*, not an export note"):
        ExportNote.load(files["thresholds"])
    assert ExportNote.load(files["note"]) == ExportNote()


def test_files_that_are_not_artifacts_are_named(tmp_path):
    """The image set manifest and intake.json, as their writers write them (so the signatures cannot go stale)."""
    from test_quantize_fixtures import make_set, make_tiny_intake

    from quantkit.intake import IntakeConfig, intake

    s = make_set(tmp_path / "set", n=2, size=24)
    with pytest.raises(InputFileError, match=r"this is an image set manifest \(manifest\.json, written by 'quantkit calibset register'\), "
                                             r"not a calibration record"):
        CalibrationRecord.load(s / "manifest.json")
    src = make_tiny_intake(tmp_path / "src", size=16) / "model.onnx"
    intake(src, IntakeConfig.from_dict({"input_size": [16, 16], "note_check": "off", "random_samples": 0}), tmp_path / "in")
    with pytest.raises(InputFileError, match=r"this is an intake report \(intake\.json, written by 'quantkit intake'\), not a threshold set"):
        ThresholdSet.load(tmp_path / "in" / "intake.json")


def test_an_old_or_damaged_file_of_the_right_kind_keeps_its_message(files, tmp_path):
    data = json.loads(files["record"].read_text())
    data["schema_version"] = 99
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(InputFileError, match=r"calibration record schema_version 99 is not supported \(this quantkit reads 1\)"):
        CalibrationRecord.load(tmp_path / "old.json")
    data["schema_version"] = 1
    data["model_digest"] = "edited"
    (tmp_path / "edited.json").write_text(json.dumps(data))
    with pytest.raises(InputFileError, match="fingerprint does not match"):
        CalibrationRecord.load(tmp_path / "edited.json")


def test_describe_names_only_an_unambiguous_kind():
    assert describe({}) is None and describe({"schema_version": 1}) is None
    assert describe({"unrelated": 1, "schema_version": 1}) is None
    assert describe(ThresholdSet().to_dict()).startswith("a threshold set")

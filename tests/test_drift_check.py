"""Change detection: thresholds from calibration variability, flagged shifts, clipping, CLI behaviour."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper
from PIL import Image

from quantkit.calibset.stats import STAT_COLUMNS
from quantkit.cli.main import main
from quantkit.drift import (
    DriftConfig,
    DriftResult,
    check_drift,
    clipping_rates,
    null_effects,
)
from quantkit.errors import CalibrationSetError, ConfigError, InputFileError
from quantkit.note import ExportNote, Preprocessing
from quantkit.artifacts import CalibrationRecord, TensorScale


def _set(root: Path, name: str, n: int, seed: int, *, gain=1.0, noise=1.0, width=64, images=False) -> Path:
    rng = np.random.default_rng(seed)
    d = root / name
    (d / "images").mkdir(parents=True)
    frame = pd.DataFrame({
        "file": [f"images/{i:04d}.png" for i in range(n)],
        "width": width, "height": width,
        "brightness_mean": rng.normal(120, 15, n) * gain,
        "contrast_rms": rng.normal(0.2, 0.03, n) * gain,
        "cast_bg": rng.normal(0.9, 0.04, n),
        "noise_sigma": np.abs(rng.normal(2.0, 0.3, n)) * noise,
    })
    for col in STAT_COLUMNS:  # the rest of the statistics: same distribution in every set
        if col not in frame:
            frame[col] = rng.normal(1.0, 0.1, n)
    frame[["file", *STAT_COLUMNS]].to_csv(d / "stats.csv", index=False)
    entries = []
    for i in range(n):
        if images:
            img = np.clip(rng.normal(120 * gain, 30, (width, width, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(img).save(d / f"images/{i:04d}.png")
        else:  # the statistics come from stats.csv; the file only has to exist (drift refuses missing images)
            (d / f"images/{i:04d}.png").write_bytes(b"")
        entries.append({"file": f"images/{i:04d}.png"})
    (d / "manifest.json").write_text(json.dumps({"name": name, "set_id": f"id-{name}", "camera": "cam1", "lighting": "day", "images": entries}))
    return d


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sets")
    return {
        "calib": _set(root, "calib-day", 64, 1),
        "day": _set(root, "site-day", 32, 2),
        "night": _set(root, "site-night", 32, 3, gain=0.3, noise=2.0),
        "cam2": _set(root, "site-cam2", 32, 4, width=80),
    }


NOCLIP = DriftConfig(clipping=False)


def test_held_out_day_is_not_flagged(sets):
    r = check_drift(sets["day"], sets["calib"], NOCLIP)
    assert not r.recalibrate and r.moved == []
    assert r.reasons[0].startswith("no image statistic moved")


def test_night_flags_lighting_with_plain_reasons(sets):
    r = check_drift(sets["night"], sets["calib"], NOCLIP)
    assert r.recalibrate
    assert {"brightness_mean", "contrast_rms", "noise_sigma"} <= set(r.moved)
    assert "width" not in r.moved and "cast_bg" not in r.moved
    assert re.search(r"^brightness fell 7\d% vs calibration \(calib-day\)", r.reasons[0])
    assert re.search(r"noise rose 2\.\dx", r.reasons[0])
    entry = next(s for s in r.statistics if s.name == "brightness_mean" and s.metric == "wasserstein")
    assert entry.moved and entry.effect > entry.threshold > 0


def test_camera_resolution_change_is_flagged(sets):
    r = check_drift(sets["cam2"], sets["calib"], NOCLIP)
    assert r.recalibrate and set(r.moved) == {"width", "height"}


def test_threshold_is_margin_times_null_maximum(sets):
    cal = pd.read_csv(sets["calib"] / "stats.csv")["brightness_mean"].to_numpy()
    null = null_effects(cal, 32, NOCLIP, "wasserstein")
    assert null.shape == (2 * NOCLIP.repeats,)  # auto chunks: 64 / 32 = 2 per shuffle
    r = check_drift(sets["day"], sets["calib"], NOCLIP)
    entry = next(s for s in r.statistics if s.name == "brightness_mean" and s.metric == "wasserstein")
    assert entry.threshold == pytest.approx(null.max() * NOCLIP.margin)


def test_result_round_trips_and_is_deterministic(sets, tmp_path):
    a = check_drift(sets["night"], sets["calib"], NOCLIP)
    p1, p2 = a.save(tmp_path / "a.json"), check_drift(sets["night"], sets["calib"], NOCLIP).save(tmp_path / "b.json")
    assert p1.read_bytes() == p2.read_bytes()
    b = DriftResult.load(p1)
    assert b.to_dict() == a.to_dict() and "recalibrate=True" in repr(b)


def test_config_validation():
    with pytest.raises(ConfigError, match="drift.min_metrics"):
        DriftConfig(min_metrics=4)
    with pytest.raises(ConfigError, match="unknown option 'margn'"):
        DriftConfig.from_dict({"margn": 2})
    with pytest.raises(ConfigError, match="--quantized or --fp32"):
        check_drift("x", "y", DriftConfig())


def test_small_or_missing_sets_fail_clearly(sets, tmp_path):
    tiny = _set(tmp_path, "tiny", 3, 9)
    with pytest.raises(CalibrationSetError, match="too few to split"):
        check_drift(sets["day"], tiny, NOCLIP)
    with pytest.raises(CalibrationSetError, match="set folder not found"):
        check_drift(tmp_path / "nope", sets["calib"], NOCLIP)
    empty = tmp_path / "empty"
    (empty / "images").mkdir(parents=True)
    with pytest.raises(CalibrationSetError, match="no images and no stats.csv"):
        check_drift(empty, sets["calib"], NOCLIP)


# ------------------------------------------------------------------------------------ clipping


def _tiny_model(root: Path) -> tuple[Path, Path]:
    """FP32 ``x -> Relu -> y`` at 1x3x8x8 with an export note, and a record with y's INT8 range [0, 1]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    note = ExportNote(preprocessing=Preprocessing(input_size=(8, 8), resize_policy="stretch", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)))
    note.embed(model)
    fp32 = root / "intake"
    fp32.mkdir()
    onnx.save(model, fp32 / "model.onnx")
    q = root / "deployed"
    q.mkdir()
    tensors = (TensorScale("y", "activation", "uint8", None, (0.5 / 255,), (0,), 0.0, 0.5, "minmax"),)
    fp = CalibrationRecord.compute_fingerprint(tensors, "m" * 64, "set", "c" * 64)
    CalibrationRecord(fingerprint=fp, model_digest="m" * 64, quantized_model_digest="q" * 64, calibration_set={"set_id": "set"},
                      config={}, config_hash="c" * 64, opset_before=13, opset_after=13, versions={}, tensors=tensors).save(q / "record.json")
    return fp32, q


def test_clipping_rate_counts_values_outside_int8_range(tmp_path):
    fp32, q = _tiny_model(tmp_path)
    dark = _set(tmp_path, "dark", 8, 5, gain=0.2, images=True, width=8)    # pixels ~24/255 < 0.5: no clipping
    bright = _set(tmp_path, "bright", 8, 6, gain=1.8, images=True, width=8)  # pixels ~216/255 > 0.5: clipped
    rates = clipping_rates(fp32, q, sorted((bright / "images").glob("*.png")))
    assert set(rates) == {"y"} and rates["y"] > 0.9
    cfg = DriftConfig(clip_images=4)
    r = check_drift(bright, dark, cfg, quantized=q, fp32=fp32)
    assert r.clipping is not None and r.clipping.moved and r.clipping.baseline < 0.01
    assert r.clipping.images == 4 and r.clipping.worst[0][0] == "y"
    assert any("INT8 activations clip" in s for s in r.reasons)
    (q / "record.json").write_text((q / "record.json").read_text().replace("0.5", "0.6"))  # tampered record
    with pytest.raises(InputFileError, match="fingerprint does not match"):
        clipping_rates(fp32, q, sorted((bright / "images").glob("*.png")))


# ------------------------------------------------------------------------------------------ CLI


def test_cli_writes_json_and_table(sets, tmp_path, capsys):
    out = tmp_path / "drift" / "night.json"
    assert main(["drift", str(sets["night"]), "--calibration-set", str(sets["calib"]), "--no-clipping", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "RECALIBRATE" in text and "brightness" in text
    assert json.loads(out.read_text())["recalibrate"] is True


def test_cli_params_and_bad_input(sets, tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("drift:\n  clipping: false\n  margin: 1.5\n")
    out = tmp_path / "d.json"
    assert main(["drift", str(sets["day"]), "--calibration-set", str(sets["calib"]), "--params", str(params), "--json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["recalibrate"] is False
    params.write_text("drift:\n  margin: 0.5\n")
    bad = tmp_path / "bad.json"
    code = main(["drift", str(sets["day"]), "--calibration-set", str(sets["calib"]), "--params", str(params), "--out", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and f"{params}:drift.margin" in err and len(err.strip().splitlines()) == 1  # names the file passed
    assert not bad.exists()
    params.write_text("drift:\n  margn: 2\n")
    code = main(["drift", str(sets["day"]), "--calibration-set", str(sets["calib"]), "--params", str(params), "--out", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and f"{params}:drift: unknown option 'margn'" in err and "params.yaml" not in err.replace(str(params), "")
    code = main(["drift", str(tmp_path / "missing"), "--calibration-set", str(sets["calib"]), "--no-clipping", "--out", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "set folder not found" in err and not bad.exists()


def test_deleted_images_are_refused_not_read_from_stale_stats(tmp_path, capsys):
    calib = _set(tmp_path, "calib", 16, 1)
    site = _set(tmp_path, "site", 8, 2)
    (site / "images" / "0003.png").unlink()
    (site / "images" / "0005.png").unlink()
    with pytest.raises(CalibrationSetError, match=r"images/0003\.png: image listed in .*manifest\.json is missing \(2 of 8 missing in the site set\)"):
        check_drift(site, calib, NOCLIP)
    (calib / "images" / "0000.png").unlink()
    with pytest.raises(CalibrationSetError, match=r"calib/images/0000\.png: .*in the calibration set"):
        check_drift(_set(tmp_path, "site2", 8, 3), calib, NOCLIP)
    out = tmp_path / "d.json"
    assert main(["drift", str(site), "--calibration-set", str(calib), "--no-clipping", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "0003.png" in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_out_folder_is_refused_in_one_line(sets, tmp_path, capsys):
    folder = tmp_path / "drift"
    folder.mkdir()
    assert main(["drift", str(sets["day"]), "--calibration-set", str(sets["calib"]), "--no-clipping", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and len(err.strip().splitlines()) == 1 and list(folder.iterdir()) == []


def test_changes_the_medians_cannot_describe_are_not_printed():
    from quantkit.drift import StatisticChange, describe_changes

    zero = StatisticChange("clip_bright", 0.0, 0.0, 0.0, 3, True, 0.9)
    undefined = StatisticChange("clip_dark", 0.0, 0.004, 1e9, 3, True, 0.8)
    bright = StatisticChange("brightness_mean", 120.0, 36.0, -0.7, 3, True, 0.5)
    assert describe_changes([zero, undefined, bright]) == ["brightness fell 70%"]
    assert describe_changes([zero]) == ["blown-out pixels shifted"]  # the only move is still named, without numbers
    assert not zero.describable and not undefined.describable and bright.describable

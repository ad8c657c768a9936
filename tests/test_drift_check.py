"""Change detection: thresholds from calibration variability, flagged shifts, clipping, CLI behaviour."""

from __future__ import annotations

import shutil

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper
from PIL import Image

from quantkit.cli.main import main
from quantkit.drift import DriftConfig, DriftResult, check_drift, null_effects
from quantkit._io import sha256_file
from quantkit.drift.clipping import clipping_rates
from quantkit.calibset import CalibrationSet
from quantkit.errors import BindingMismatchError, CalibrationSetError, ConfigError, InputFileError
from quantkit.note import ExportNote, Preprocessing
from quantkit.artifacts import CalibrationRecord, SetRef, TensorScale


def _set(root: Path, name: str, n: int, seed: int, *, gain=1.0, noise=1.0, width=64, images=True) -> Path:
    """A registered set of ``n`` real images: a textured scene per image (brightness ~ N(120, 15) x gain,
    contrast x gain, sensor noise sigma ~ 2 x noise, ``width`` px square). ``images`` is kept for the call sites."""
    from quantkit.calibset import register_set

    rng = np.random.default_rng(seed)
    d = root / name
    (d / "images").mkdir(parents=True)
    yy, xx = np.mgrid[0:width, 0:width] / 64.0  # fixed texture period in pixels: a bigger image is more of the same scene
    for i in range(n):
        base = rng.normal(120, 15) * gain
        texture = (np.sin(2 * np.pi * (3 * xx + rng.uniform())) * np.cos(2 * np.pi * (2 * yy + rng.uniform()))) * 40 * gain
        img = base + texture[..., None] + rng.normal(0, 2.0 * noise, (width, width, 3))
        img[..., 2] *= rng.normal(0.9, 0.02)  # a little blue/green cast spread
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(d / f"images/{i:04d}.png")
    register_set(d, name=name, kind="calibration", camera="cam1", lighting="day")
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
    assert not r.changed and r.moved == []
    assert r.reasons[0].startswith("no image statistic moved")
    assert not r.small_calibration and r.warnings == ()  # 64 calibration images in 2 chunks of 32: thresholds are meaningful


def test_night_flags_lighting_with_plain_reasons(sets):
    r = check_drift(sets["night"], sets["calib"], NOCLIP)
    assert r.changed
    assert {"brightness_mean", "contrast_rms"} <= set(r.moved)
    assert "width" not in r.moved and "cast_bg" not in r.moved
    assert re.search(r"^(shadow |median |highlight )?brightness( \(p\d+\))? fell [67]\d% vs calibration \(calib-day\)", r.reasons[0]), r.reasons
    assert re.search(r"^brightness fell [67]\d%", r.reasons[0])  # of equally separated statistics, brightness is read first
    entry = next(s for s in r.statistics if s.name == "brightness_mean" and s.metric == "wasserstein")
    assert entry.moved and entry.effect > entry.threshold > 0


def test_a_resolution_change_is_reported_and_only_size_is_not_called_a_change(sets):
    from quantkit.drift import StatisticChange
    from quantkit.drift.check import is_changed, reasons

    r = check_drift(sets["cam2"], sets["calib"], NOCLIP)  # a real resolution change also moves sharpness at the model's scale
    assert {"width", "height"} <= set(r.moved) and r.changed
    size_only = [StatisticChange("width", 64.0, 80.0, 0.25, 3, True, 1.0), StatisticChange("height", 64.0, 80.0, 0.25, 3, True, 1.0),
                 StatisticChange("brightness_mean", 120.0, 121.0, 0.01, 0, False, 0.01)]
    assert not is_changed(size_only, None)
    assert any("only the image size changed" in x for x in reasons(size_only, None, "calib"))


def test_threshold_is_margin_times_null_maximum(sets):
    cal = pd.read_csv(sets["calib"] / "stats.csv")["brightness_mean"].to_numpy(dtype=np.float64)
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
    assert b.to_dict() == a.to_dict() and "changed=True" in repr(b)


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
    with pytest.raises(CalibrationSetError, match="no manifest.json; register the folder"):
        check_drift(empty, sets["calib"], NOCLIP)


# ------------------------------------------------------------------------------------ clipping


def _tiny_model(root: Path, set_id: str = "set") -> tuple[Path, Path]:
    """FP32 ``x -> Relu -> y`` at 1x3x8x8 with an export note, and a record (calibrated on ``set_id``) with y's INT8
    range [0, 1]."""
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
    digest = sha256_file(fp32 / "model.onnx")
    fp = CalibrationRecord.compute_fingerprint(tensors, digest, set_id, "c" * 64)
    CalibrationRecord(fingerprint=fp, model_digest=digest, quantized_model_digest="q" * 64, calibration_set=SetRef(set_id=set_id),
                      config={}, config_hash="c" * 64, opset_before=13, opset_after=13, versions={}, tensors=tensors).save(q / "record.json")
    return fp32, q


def test_clipping_rate_counts_values_outside_int8_range(tmp_path):
    dark = _set(tmp_path, "dark", 8, 5, gain=0.2, images=True, width=8)    # pixels ~24/255 < 0.5: no clipping
    bright = _set(tmp_path, "bright", 8, 6, gain=1.8, images=True, width=8)  # pixels ~216/255 > 0.5: clipped
    fp32, q = _tiny_model(tmp_path, CalibrationSet.load(dark).set_id)  # calibrated on the dark set
    rates = clipping_rates(fp32, q, sorted((bright / "images").glob("*.png")))
    assert set(rates) == {"y"} and rates["y"] > 0.9
    cfg = DriftConfig(clip_images=4)
    r = check_drift(bright, dark, cfg, quantized=q, fp32=fp32)
    assert r.clipping is not None and r.clipping.moved and r.clipping.baseline < 0.01
    assert r.clipping.images == 4 and r.clipping.worst[0].tensor == "y" and r.record_fingerprint
    assert any("INT8 activations clip" in s for s in r.reasons)
    with pytest.raises(BindingMismatchError, match="is not the set .* was calibrated on"):  # the record names its calibration set
        check_drift(dark, bright, cfg, quantized=q, fp32=fp32)
    other = tmp_path / "other-intake"
    shutil.copytree(fp32, other)
    onnx.save(onnx.load(fp32 / "model.onnx"), other / "model.onnx", save_as_external_data=False)
    model = onnx.load(other / "model.onnx")
    model.doc_string = "another model"
    onnx.save(model, other / "model.onnx")
    with pytest.raises(InputFileError, match="not the FP32 model .* was quantized from"):  # a mismatched pair
        clipping_rates(other, q, sorted((bright / "images").glob("*.png")))
    (q / "record.json").write_text((q / "record.json").read_text().replace("0.5", "0.6"))  # tampered record
    with pytest.raises(InputFileError, match="fingerprint does not match"):
        clipping_rates(fp32, q, sorted((bright / "images").glob("*.png")))


# ------------------------------------------------------------------------------------------ CLI


def test_cli_writes_json_and_table(sets, tmp_path, capsys):
    out = tmp_path / "drift" / "night.json"
    assert main(["drift", str(sets["night"]), "--calibration-set", str(sets["calib"]), "--no-clipping", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "CHANGED" in text and "brightness" in text
    # the advice table's action, conditional on what only the shift report knows (whether the model still agrees)
    assert ("  what to do while the deployed model still agrees with FP32: watch: the images moved away from the calibration set, but INT8 "
            "still agrees with FP32; keep the camera in the next checks") in text  # the shift report's and the fleet's words
    assert "  if its agreement falls (the shift report says): recalibrate: the lighting changed; " in text
    assert json.loads(out.read_text())["changed"] is True


def test_cli_params_and_bad_input(sets, tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("drift:\n  clipping: false\n  margin: 1.5\n")
    out = tmp_path / "d.json"
    assert main(["drift", str(sets["day"]), "--calibration-set", str(sets["calib"]), "--params", str(params), "--json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False
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


def test_deleted_or_changed_images_are_refused_not_read_from_stale_stats(tmp_path, capsys):
    calib = _set(tmp_path, "calib", 16, 1)
    site = _set(tmp_path, "site", 8, 2)
    (site / "images" / "0003.png").unlink()
    with pytest.raises(CalibrationSetError, match=r"images/0003\.png: listed in .*manifest\.json but missing"):
        check_drift(site, calib, NOCLIP)
    changed = _set(tmp_path, "site2", 8, 3)
    (changed / "images" / "0001.png").write_bytes((calib / "images" / "0000.png").read_bytes())  # content changed after registration
    with pytest.raises(CalibrationSetError, match=r"0001\.png: content changed since registration"):
        check_drift(changed, calib, NOCLIP)
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


def test_a_change_against_a_median_within_the_resolution_of_0_is_not_a_percentage():
    """The trial's clean synthetic images: noise sigma 5.8e-31 luma levels (0 up to rounding) on the calibration set."""
    from quantkit.drift import StatisticChange, describe_changes
    from quantkit.drift.config import RESOLUTION

    cal = pd.DataFrame({"noise_sigma": np.full(16, 5.8478346e-31)})
    same = compare_statistics_frames(cal, pd.DataFrame({"noise_sigma": np.full(12, 2.9239173e-31)}))
    noisy = compare_statistics_frames(cal, pd.DataFrame({"noise_sigma": np.full(12, 2.7914023)}))
    assert RESOLUTION["noise_sigma"] == 0.05 and same.resolution == noisy.resolution == 0.05
    assert not same.describable and not noisy.describable and same.change_text == noisy.change_text == "n/a"
    assert same.relative_change == 0.0 and noisy.relative_change == 1e9  # not 4.8e30, not -50%
    assert same.value_text(same.calibration_median) == "~0" and noisy.value_text(noisy.site_median) == "2.791"
    assert noisy.moved and describe_changes([noisy]) == ["noise changed from ~0 to 2.791"]  # not "rose 4.8e30x"
    assert not same.moved
    bright = StatisticChange("brightness_mean", 120.0, 36.0, -0.7, 3, True, 0.5)
    assert bright.describable and bright.change_text == "-70%" and bright.value_text(36.0) == "36"
    assert StatisticChange("my_stat", 1e-30, 2e-30, 1.0, 0, False).change_text == "+100%"  # no resolution known: any non-0 median


def compare_statistics_frames(cal: pd.DataFrame, site: pd.DataFrame):
    from quantkit.drift import compare_statistics

    return compare_statistics(cal, site, NOCLIP)[1][0]


def test_cli_table_shows_n_a_and_no_tiny_values(tmp_path, capsys, monkeypatch):
    from quantkit.artifacts.drift import StatisticChange
    import quantkit.drift as drift

    changes = (StatisticChange("noise_sigma", 5.8478346e-31, 2.7914023, 1e9, 3, True, 0.9, 1.0, True),
               StatisticChange("brightness_mean", 214.84, 72.53, -0.6624, 3, True, 0.9))
    result = DriftResult(SetRef(name="calib"), SetRef(name="site"), (), changes, None, True, ("why",), {})
    monkeypatch.setattr(drift, "check_drift", lambda *a, **k: result)
    assert main(["drift", str(tmp_path), "--calibration-set", str(tmp_path), "--no-clipping"]) == 0
    lines = capsys.readouterr().out.splitlines()
    noise, bright = (next(line for line in lines if line.lstrip().startswith(word)) for word in ("noise", "brightness"))
    assert re.search(r"noise\s+~0\s+2\.791\s+n/a\s+3/3 MOVED", noise) and "e-31" not in noise and "%" not in noise
    assert re.search(r"brightness\s+214\.8\s+72\.53\s+-66%\s+3/3 MOVED", bright)


def test_shares_of_pixels_read_as_percent():
    from quantkit.drift import StatisticChange

    dark = StatisticChange(name="clip_dark", calibration_median=0.0, site_median=0.02739, relative_change=1e9, metrics_moved=2, separation=0.9, moved=True)
    assert dark.phrase == "crushed-black pixels rose from 0% to 2.7% of the image"  # not "changed from 0 to 0.02739"

"""Drift on small sets (12-16 images, as a new user's PP-OCR sets): no division by a zero calibration spread,
thresholds that cannot exceed what a metric can show, the range check, and a plain small-set warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from quantkit.drift import DriftConfig, DriftResult, check_drift, compare_statistics
from quantkit.drift.config import MIN_EFFECT
from quantkit.drift.statistics import alert_threshold, separation_effect

NOCLIP = DriftConfig(clipping=False)


def _set(root: Path, name: str, means: np.ndarray, seed: int, *, crushed: int = 0) -> Path:
    """A registered set of 48x48 textured images, image ``i`` with mean luma ~``means[i]`` (texture amplitude
    proportional to it); the first ``crushed`` images get a black 3x3 patch (0.4% of the pixels at luma 0)."""
    from quantkit.calibset import register_set

    rng = np.random.default_rng(seed)
    d = root / name
    (d / "images").mkdir(parents=True)
    yy, xx = np.mgrid[0:48, 0:48] / 48.0
    for i, m in enumerate(means):
        texture = np.sin(2 * np.pi * (3 * xx + rng.uniform())) * np.cos(2 * np.pi * (2 * yy + rng.uniform())) * 0.25 * m
        img = m + texture[..., None] + rng.normal(0, 2.0, (48, 48, 3))
        if i < crushed:
            img[10:13, 10:13] = 0
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(d / f"images/{i:04d}.png")
    register_set(d, name=name, kind="calibration", camera="cam1", lighting="day")
    return d


@pytest.fixture(scope="module")
def dark(tmp_path_factory) -> tuple[Path, Path]:
    """16 day images (brightness 123..199, no crushed-black pixel) and 12 site images at x0.35-0.4 brightness,
    three of them with a few crushed-black pixels: the reported case."""
    root = tmp_path_factory.mktemp("small")
    rng = np.random.default_rng(7)
    day = np.linspace(123, 199, 16)
    site = rng.choice(day, 12) * rng.uniform(0.35, 0.4, 12)
    return _set(root, "calib-day", day, 1), _set(root, "site-dark", site, 2, crushed=3)


def test_a_large_lighting_change_on_a_small_calibration_set_is_flagged(dark, caplog):
    calib, site = dark
    with caplog.at_level(logging.WARNING, logger="quantkit.drift"):
        r = check_drift(site, calib, NOCLIP)
    b = next(c for c in r.changes if c.name == "brightness_mean")
    assert r.changed and b.moved and b.median_outside and b.outside_fraction == 1.0
    assert r.reasons[0].startswith(("brightness fell", "shadow brightness", "median brightness", "highlight brightness", "contrast"))
    js = [e for e in r.statistics if e.metric == "js"]
    assert all(e.threshold < 1.0 for e in js)  # JS distance (base 2) is at most 1: a threshold at or above 1 is blind
    assert next(e for e in js if e.name == "brightness_mean").moved  # complete separation exceeds the capped threshold
    # the set is too small for chunk-vs-rest thresholds: said in the result and in the log
    assert r.small_calibration and "only 16 images" in r.warnings[0] and "add calibration images" in r.warnings[0]
    assert any("only 16 images" in m for m in caplog.messages)


def test_a_statistic_constant_on_the_calibration_set_does_not_blow_up(dark):
    calib, site = dark
    r = check_drift(site, calib, NOCLIP)
    crushed = [e for e in r.statistics if e.name == "clip_dark"]
    cal = pd.read_csv(calib / "stats.csv")
    assert (cal["clip_dark"] == 0).all() and (pd.read_csv(site / "stats.csv")["clip_dark"] > 0).sum() == 3
    # 0.4% crushed pixels on 3 of 12 images is below the 1% resolution: finite, small effects; thresholds not 0
    assert all(0 <= e.effect < 1 and e.threshold >= MIN_EFFECT[e.metric] * 0.999 and not e.moved for e in crushed), crushed
    assert "clip_dark" not in r.moved


def test_constant_statistic_with_a_real_change_is_flagged_with_finite_numbers():
    cal = pd.DataFrame({"clip_dark": np.zeros(16)})
    site = pd.DataFrame({"clip_dark": np.full(12, 0.2)})  # a fifth of every site image crushed to black
    effects, changes = compare_statistics(cal, site, NOCLIP)
    assert changes[0].moved and changes[0].median_outside
    w = next(e for e in effects if e.metric == "wasserstein")
    assert w.effect == pytest.approx(0.2 / 0.01) and w.threshold == pytest.approx(MIN_EFFECT["wasserstein"])  # W1 / 1% resolution


def test_small_set_rule():
    from quantkit.drift.statistics import small_calibration

    assert small_calibration(64, 32, NOCLIP) == ""  # the demo: 2 chunks of 32
    assert "only 31 images" in small_calibration(31, 31, NOCLIP)
    few = small_calibration(64, 4, NOCLIP, "cam1-day")  # auto chunks: 10 chunks of 6 to match a 4-image site set
    assert "split into 10 chunks of only ~6 images" in few and "set drift.chunks" in few
    assert small_calibration(64, 4, NOCLIP.replace(chunks=2)) == ""


def test_bounded_thresholds_are_capped_below_the_largest_effect():
    ref = np.linspace(0, 1, 16)
    for metric in ("js", "psi"):
        top = separation_effect(metric, ref, NOCLIP)
        t = alert_threshold(metric, ref, np.array([top]), NOCLIP)  # a null as large as the metric can get, times margin 1.5
        assert t == pytest.approx(NOCLIP.threshold_cap * top) and t < top
    assert separation_effect("js", ref, NOCLIP) <= 1.0
    assert alert_threshold("wasserstein", ref, np.zeros(4), NOCLIP) == pytest.approx(MIN_EFFECT["wasserstein"])  # floored


def test_range_check_moves_a_statistic_the_thresholds_miss():
    cal = pd.DataFrame({"brightness_mean": np.linspace(123, 199, 16)})
    site = pd.DataFrame({"brightness_mean": np.linspace(45, 70, 12)})
    blind = DriftConfig(clipping=False, metrics=("wasserstein",), min_metrics=1, margin=1000.0)
    assert compare_statistics(cal, site, blind)[1][0].moved
    assert not compare_statistics(cal, site, blind.replace(range_check=False))[1][0].moved
    inside = pd.DataFrame({"brightness_mean": np.linspace(125, 197, 12)})
    change = compare_statistics(cal, inside, blind)[1][0]
    assert not change.moved and not change.median_outside and change.outside_fraction == 0.0


def test_schema_2_results_still_load(dark, tmp_path):
    calib, site = dark
    p = check_drift(site, calib, NOCLIP).save(tmp_path / "r.json")
    data = json.loads(p.read_text())
    assert data["schema_version"] == 3
    data["schema_version"] = 2
    for k in ("small_calibration", "warnings"):
        del data[k]
    for c in data["changes"]:
        del c["outside_fraction"], c["median_outside"]
    p.write_text(json.dumps(data))
    old = DriftResult.load(p)
    assert old.changed and not old.small_calibration and old.warnings == () and not any(c.median_outside for c in old.changes)


def test_cli_prints_the_small_set_warning(dark, tmp_path, capsys):
    from quantkit.cli.main import main

    calib, site = dark
    assert main(["drift", str(site), "--calibration-set", str(calib), "--no-clipping", "--out", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "CHANGED" in out and "warning: the calibration set (calib-day) has only 16 images" in out


def test_the_report_repeats_the_small_set_warning(tmp_path):
    from quantkit.report import ModelInputs, ReportConfig, make_report
    from quantkit.report.synthetic import write_inputs

    p = write_inputs(tmp_path / "inputs", images_per_site=5)
    path = p["work"] / "drift" / "cam1-night.json"
    d = DriftResult.load(path)
    d.replace(small_calibration=True, warnings=("the calibration set (cam1-day) has only 16 images",)).save(path)
    make_report([ModelInputs.from_work_dir(p["work"], site_sets=p["site_sets"])], ReportConfig(), tmp_path / "out")
    html = (tmp_path / "out" / "shift_report.html").read_text()
    assert "Caution: the calibration set (cam1-day) has only 16 images." in html
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["ppocr_det"]["cam1-night"]["drift"]["small_calibration"] is True
    assert metrics["ppocr_det"]["cam1-day"]["drift"]["small_calibration"] is False

"""fleet check with few images a window (a new user's trial: 6 label photos a day, 3 reference days): a camera
that goes dark is flagged with the default rule, stable cameras with ordinary day-to-day noise are not, a metric
that cannot flag a change at that size abstains and is named in one warning line, and a statistic whose median
stayed 0 is described by what moved, not as "changed from 0 to 0"."""

from __future__ import annotations

import datetime as _dt
import logging
from pathlib import Path

import numpy as np
import pytest
from fleet_fixtures import make_models

from quantkit.cli.main import main
from quantkit.fleet import FleetCheckConfig, FleetScoreConfig, check_fleet, effects, register_tree, score_fleet
from quantkit.fleet.check import _tail_phrase

SIZE = 48
DAYS, PER_DAY, DARK_FROM = 7, 6, 4  # day index 4 = 2025-03-07
STABLE = ("c1", "c2", "c4", "c5")


def label_image(rng: np.random.Generator, *, gain: float = 1.0, contrast: float = 1.0, noisy: bool = False,
                blown: bool = False) -> np.ndarray:
    """``(SIZE, SIZE, 3) uint8``: a printed label, light card with dark strokes, noise-free unless ``noisy``
    (sensor noise sigma 3; clean renders have a wavelet noise estimate of 0, as the trial's text lines did);
    ``blown``: a saturated glare patch."""
    img = np.full((SIZE, SIZE, 3), rng.uniform(200, 235))
    for _ in range(int(rng.integers(3, 7))):
        y, x = rng.integers(4, SIZE - 10, 2)
        img[y:y + int(rng.integers(2, 5)), x:x + int(rng.integers(5, 12))] = rng.uniform(20, 60)
    if noisy:
        img = img + rng.normal(0, 3, img.shape)
    if blown:
        img[2:14, 2:26] = 255
    img = img.mean() + (img - img.mean()) * contrast
    return np.clip(img * gain, 0, 255).astype(np.uint8)


def make_label_fleet(root: Path) -> Path:
    """``root/site-a/<camera>/<date>/<HHMMSS>.png``: cameras c1..c6, 7 days of 6 images. Exposure varies within
    +-3% from day to day; sensor noise shows on half the images of the 3rd day and on about one image in six
    later (the rest are clean renders, noise estimate 0: most of the reference in one bin, a few far away);
    c3 is darkened (x0.35 brightness, x0.6 contrast) from the 5th day; c6 shows a glare patch on one image of
    its 6th day (nothing else changes)."""
    from PIL import Image

    start = _dt.date(2025, 3, 3)
    for c in range(1, 7):
        cam = f"c{c}"
        for d in range(DAYS):
            folder = root / "site-a" / cam / (start + _dt.timedelta(days=d)).isoformat()
            folder.mkdir(parents=True, exist_ok=True)
            day_gain = np.random.default_rng([c, d]).uniform(0.97, 1.03)
            for i in range(PER_DAY):
                rng = np.random.default_rng([7, c, d, i])
                dark = cam == "c3" and d >= DARK_FROM
                noisy = (d == 2 and i % 2 == 0) or (d > 2 and rng.random() < 1 / 6)
                img = label_image(rng, gain=day_gain * (0.35 if dark else 1.0), contrast=0.6 if dark else 1.0, noisy=noisy,
                                  blown=cam == "c6" and d == 5 and i == 2)
                Image.fromarray(img).save(folder / f"{8 + i:02d}0000.png")
    return root


@pytest.fixture(scope="module")
def labels(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fleetsmall")
    paths = make_models(root / "models")
    register_tree(make_label_fleet(root / "images"), root / "manifest.parquet")
    score_fleet(root / "manifest.parquet", paths["intake"], paths["quantized"], paths["thresholds"], paths["calibration_set"],
                root / "scores", FleetScoreConfig(workers=0, model_every=2))
    return {**paths, "root": root, "scores": root / "scores"}


DEFAULTS = FleetCheckConfig(reference_windows=3)  # the trial's params: only the reference shortened to its 3 days


def test_darkened_camera_is_flagged_with_default_rule(labels, caplog):
    with caplog.at_level(logging.WARNING, logger="quantkit.fleet.check"):
        res = check_fleet(labels["scores"], labels["calibration_set"], DEFAULTS)
    cam = res.camera("c3")
    assert cam.status == "alert" and cam.since.startswith("2025-03-07") and cam.alerting_now
    assert [w.status for w in cam.windows] == ["reference"] * 3 + ["ok"] + ["alert"] * 3
    moved = {m.name for m in cam.windows[-1].moved}
    assert {"brightness_mean", "contrast_rms"} <= moved
    assert any("brightness fell" in r and "contrast fell" in r for r in cam.reasons)
    # W1's threshold is no longer set by the sensor-noise statistic (most reference images at 0, a few far away: in
    # IQR units its W1 reached 150, blinding W1 on every statistic), so the 65% drop is well past it on W1 and KS
    b = next(m for m in cam.windows[-1].moved if m.name == "brightness_mean")
    assert b.thresholds["wasserstein"] < 5 and b.effects["wasserstein"] > 2 * b.thresholds["wasserstein"] and b.effects["ks"] == 1.0
    # with 6 images a window PSI cannot flag even a complete separation: said once, naming the size and the metric
    assert len(res.warnings) == 1 and "windows of 6 images" in res.warnings[0] and "reference 18 images in 3 windows" in res.warnings[0]
    assert "psi" in res.warnings[0] and "fleet.score.window_hours" in res.warnings[0]
    assert [r.getMessage() for r in caplog.records if "too small" in r.getMessage()] == ["fleet check: " + res.warnings[0]]
    # without PSI every metric can flag a complete separation at this size: nothing to warn about, same verdict
    wk = check_fleet(labels["scores"], labels["calibration_set"], FleetCheckConfig(reference_windows=3, metrics=("wasserstein", "ks")))
    assert wk.warnings == () and wk.ranked == ("c3",)


def test_stable_cameras_with_day_to_day_noise_are_not_flagged(labels):
    res = check_fleet(labels["scores"], labels["calibration_set"], DEFAULTS)
    for name in STABLE:
        cam = res.camera(name)
        assert cam.status == "ok" and all(w.status in ("reference", "ok") for w in cam.windows), (name, cam.windows)
    assert res.ranked == ("c3",)  # nor is c6: glare on one image of six is not a change the default rule acts on


def test_a_metric_that_cannot_flag_the_change_abstains(labels):
    # PSI + KS, both needed: PSI cannot exceed its threshold with 6 images a window, so KS decides alone
    res = check_fleet(labels["scores"], labels["calibration_set"], FleetCheckConfig(reference_windows=3, metrics=("psi", "ks"), min_metrics=2))
    assert res.camera("c3").since.startswith("2025-03-07")
    b = next(m for m in res.camera("c3").windows[-1].moved if m.name == "brightness_mean")
    assert b.effects["psi"] <= b.thresholds["psi"] and b.effects["ks"] > b.thresholds["ks"] and b.metrics_moved == 1
    assert all(res.camera(n).status == "ok" for n in STABLE)


def test_median_zero_statistic_is_described_by_what_moved(labels, tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("fleet:\n  check: {reference_windows: 3, min_metrics: 1, quantile: 0.9}\n")  # the trial's sensitive settings
    args = ["fleet", "check", str(labels["scores"]), "--calibration-set", str(labels["calibration_set"]), "--params", str(params)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "from 0 to 0" not in out
    glare = next(line for line in out.splitlines() if " c6 (" in line)
    assert "blown-out pixels above its range in 1 of" in glare


def test_tail_phrase_says_how_many_images_left_the_range():
    ref = np.zeros(256)
    ref[0] = 18  # blown-out pixels on no reference image
    after = np.zeros(256)
    after[[0, 30]] = [11, 1]
    assert _tail_phrase("clip_bright", ref, after) == "blown-out pixels above its range in 1 of 12 images"
    ref[[3, 5]] = [4, 4]
    after = np.zeros(256)
    after[[0, 4, 9]] = [2, 2, 2]
    assert _tail_phrase("clip_dark", ref, after) == "crushed-black pixels above its range in 2 of 6 images"
    after[[0, 4, 9]] = [2, 4, 0]
    assert _tail_phrase("clip_dark", ref, after) == "crushed-black pixels spread changed"


def test_extreme_effects_bound_every_window_moved_that_way():
    """A window with every image in the end bin has the largest effect of any window wholly below the reference:
    KS 1, PSI with every image in the outer group, W1 the whole way to the edge."""
    e = np.linspace(0.0, 255.0, 257)
    rng = np.random.default_rng(3)
    ref = np.bincount(rng.integers(150, 230, 18), minlength=256).astype(float)
    ext = effects.extreme_effects(e, ref, psi_bins=5, spread_floor=0.01)
    assert ext["ks"] == (1.0, 1.0) and ext["wasserstein"][0] > ext["wasserstein"][1] > 0  # more room below than above 230
    below = np.array([np.bincount(rng.integers(0, hi, 6), minlength=256) for hi in rng.integers(1, 150, 300)], float)
    eff = effects.effect_matrix(e, ref, below, psi_bins=5, spread_floor=0.01)
    for m in effects.METRICS:
        assert eff[m].max() <= ext[m][0] * (1 + 1e-12), m
    assert effects.extreme_effects(e, np.zeros(256), psi_bins=5, spread_floor=0.01) == {m: (0.0, 0.0) for m in effects.METRICS}


def test_w1_unit_does_not_collapse_on_a_point_mass_with_a_few_far_values():
    """Sensor noise 0 on most reference images and ~3 on a few (log axis): IQR / 1.349 is a fraction of a bin; the
    unit is held up by the mean deviation, so neither the bootstrap nor a reference day against the others puts
    the W1 threshold (shared by every statistic) out of reach."""
    ax = np.log(np.geomspace(1e-6, 100.0, 257))
    clean, noisy = np.zeros(256), np.zeros(256)
    clean[0], noisy[200] = 6, 3
    days = [clean, clean, clean / 2 + noisy]
    ref = np.sum(days, axis=0)
    assert effects.reference_spread(ax, ref, 0.01) > 20 * (ax[1] - ax[0])  # IQR / 1.349 alone: 2 bins
    thr = effects.camera_thresholds({"noise_sigma": ax}, {"noise_sigma": days}, 6, psi_bins=5, spread_floor=0.01, repeats=2000, quantile=0.999,
                                    margin=1.0, floors={}, seed=[0])
    assert thr["wasserstein"] < 4.0  # 52 in IQR units

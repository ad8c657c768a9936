"""The demo fleet's planted events get the cause -> action table's advice (quantkit.drift.advice) and stay found.

A reduced demo (params.yaml's fleet section and events, one line per site, 128 px images) scored with the tiny test
model calibrated on the demo's own day images, as the real demo calibrates on day images: the refocused camera is
told to check the camera, the night-shift site's cameras to recalibrate where INT8 agreement fell (else to watch), the exposure-drift camera to check the
camera because its exposure keeps drifting; alert precision and recall stay 1.0.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_bundle_fixtures import make_intake, make_quantized, make_thresholds

from quantkit.drift.advice import CAUSES

PARAMS = Path(__file__).parent.parent / "params.yaml"


@pytest.mark.slow
def test_demo_fleet_events_get_their_actions(tmp_path):
    from PIL import Image

    from quantkit.calibset import register_set
    from quantkit.demo.fleet import render_fleet
    from quantkit.fleet import check_fleet, register_tree, score_fleet
    from quantkit.fleet.config import load_fleet_config

    fleet = load_fleet_config(PARAMS)
    render_fleet(dataclasses.replace(fleet.demo, out=str(tmp_path / "images"), truth=str(tmp_path / "truth.json"), lines_per_site=1,
                                     image_size=(128, 128), processes=1))
    register_tree(tmp_path / "images", tmp_path / "manifest.parquet", layout="{site}/{line}/{camera}/{date}")
    cal = tmp_path / "calib"
    (cal / "images").mkdir(parents=True)
    for cam in sorted((tmp_path / "images").glob("site-*/line-1/*")):  # two images of each camera's first two days
        for day in sorted(cam.iterdir())[:2]:
            for img in sorted(day.glob("*.jpg"))[:2]:
                Image.open(img).save(cal / "images" / f"{cam.name}_{day.name}_{img.stem}.png")
    register_set(cal, name="demo_day", kind="calibration", camera="standard", lighting="day")
    quantized = make_quantized(make_intake(tmp_path / "intake"), tmp_path / "quantized", seed=1, images=cal)
    make_thresholds(quantized, tmp_path / "thresholds.json")
    score_fleet(tmp_path / "manifest.parquet", tmp_path / "intake", quantized, tmp_path / "thresholds.json", cal, tmp_path / "scores",
                fleet.score.replace(workers=0))
    res = check_fleet(tmp_path / "scores", cal, fleet.check, truth=tmp_path / "truth.json")
    assert res.truth["precision"] == 1.0 and res.truth["recall"] == 1.0
    actions = {c: res.camera(c).action for c in res.ranked}
    assert actions["a03"] == "check-camera" and res.camera("a03").reasons[-1].startswith("check camera: " + CAUSES["defocus"][0])
    for c in ("b01", "b02", "b03", "b04"):  # the night shift: recalibrate only where INT8 agreement fell, else watch (quantkit.decision)
        fell = any(r.startswith("INT8 agreement with FP32") and " fell below the " in r for r in res.camera(c).reasons)
        assert actions[c] == ("recalibrate" if fell else "watch"), (c, res.camera(c).reasons)
        assert res.camera(c).reasons[-1].startswith("recalibrate: the lighting changed" if fell else "watch: " + CAUSES["covered"][0])
    assert actions["c04"] == "check-camera" and res.camera("c04").reasons[-1].startswith("check camera: " + CAUSES["exposure_drift"][0])
    assert list(res.ranked[:3]) == sorted(res.ranked[:3], key=lambda c: actions[c] != "check-camera")  # camera faults first
    assert res.metrics()["cameras_to_check_camera"] >= 2
    assert res.metrics()["cameras_to_recalibrate"] + res.metrics()["cameras_to_watch"] == 4

"""quantkit fleet check and report: a camera whose images change alerts from that day, the others stay quiet."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fleet_fixtures import make_fleet_tree, make_models

from quantkit.cli.main import main
from quantkit.errors import CalibrationSetError
from quantkit.fleet import FleetCheckConfig, FleetScoreConfig, check_fleet, register_tree, score_fleet, write_fleet_report
from quantkit.fleet.check import FleetCheck
from quantkit.fleet.truth import evaluate

CFG = FleetCheckConfig(reference_windows=3, repeats=500)


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fleetcheck")
    paths = make_models(root / "models")
    tree = make_fleet_tree(root / "images", days=7, per_day=6, dark_camera="b02", dark_from=5)
    register_tree(tree, root / "manifest.parquet")
    score_fleet(root / "manifest.parquet", paths["intake"], paths["quantized"], paths["thresholds"], paths["calibration_set"],
                root / "scores", FleetScoreConfig(workers=0, model_every=3))
    truth = {"events": [{"name": "dark", "kind": "lighting", "cameras": ["b02"], "start_date": "2025-03-08"}], "stable": ["a01", "a02", "b01"]}
    (root / "truth.json").write_text(json.dumps(truth))
    return {**paths, "root": root, "scores": root / "scores", "truth": root / "truth.json"}


def test_changed_camera_alerts_since_its_first_changed_day(scored):
    res = check_fleet(scored["scores"], scored["calibration_set"], CFG)
    assert res.alerting and res.ranked == ("b02",)
    cam = res.camera("b02")
    assert cam.since.startswith("2025-03-08") and cam.alerting_now
    assert [w.status for w in cam.windows] == ["reference"] * 3 + ["ok", "ok", "alert", "alert"]
    moved = {m.name for m in cam.windows[-1].moved}
    assert {"brightness_mean", "brightness_p50"} <= moved
    assert any("brightness fell" in r for r in cam.reasons)
    # less light within the sensor's range, further from the calibration set, but INT8 agreement held: watch, never
    # recalibrate (the shift report's words for a site set whose agreement held; quantkit.decision)
    assert any(r.startswith("INT8 agreement with FP32") and (" held: " in r or "as before" in r) for r in cam.reasons)
    assert any(r.startswith("images moved further from the calibration set") for r in cam.reasons)
    assert cam.action == "watch" and cam.reasons[-1].startswith("watch: the images moved away from the calibration set, but INT8 still agrees with FP32")
    assert all(c.status == "ok" for c in res.cameras if c.camera != "b02")
    assert res.sites["site-b"]["cameras_alerting"] == 1 and res.sites["site-a"]["cameras_alerting"] == 0
    assert res.fleet["images"] == 4 * 7 * 6 and res.fleet["scored"] == 4 * 7 * 2
    assert "1 of 4 cameras changed" in res.verdict and "b02" in res.verdict


def test_truth_scores_alerts(scored):
    res = check_fleet(scored["scores"], scored["calibration_set"], CFG, truth=scored["truth"])
    assert res.truth["precision"] == 1.0 and res.truth["recall"] == 1.0 and res.truth["events"][0]["max_delay_days"] == 0
    other = scored["root"] / "truth2.json"
    other.write_text(json.dumps({"events": [{"name": "x", "kind": "defocus", "cameras": ["a01", "b02"], "start_date": "2025-03-07"}]}))
    t = evaluate(res, other)
    assert t["recall"] == 0.5 and t["events"][0]["missed"] == ["a01"] and t["precision"] == 1.0  # b02 found one day late
    late = scored["root"] / "truth3.json"
    late.write_text(json.dumps({"events": [{"name": "y", "kind": "defocus", "cameras": ["b02"], "start_date": "2025-03-09"}]}))
    t = evaluate(res, late)
    assert t["precision"] == 0.0 and t["false_alerts"] == ["b02"] and t["events"][0]["early"] == ["b02"]


def test_cli_exit_codes_metrics_and_round_trip(scored, tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("fleet:\n  check: {reference_windows: 3, repeats: 500}\n")
    args = ["fleet", "check", str(scored["scores"]), "--calibration-set", str(scored["calibration_set"]), "--params", str(params)]
    assert main([*args, "--out", str(tmp_path / "check.json"), "--metrics", str(tmp_path / "m.json"), "--truth", str(scored["truth"])]) == 1
    out = capsys.readouterr().out
    assert out.startswith("1 of 4 cameras changed: 1 to watch (b02)") and "b02 (site-b) watch since" in out and "precision 1.00" in out
    assert main([*args, "--exit-zero"]) == 0
    params.write_text("fleet:\n  chek: {reference_windows: 3}\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "fleet: unknown option 'chek'" in err and err.count("\n") == 1
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["cameras_alerting"] == 1 and m["alert_precision"] == 1.0 and m["events"]["dark"]["recall"] == 1.0
    loaded = FleetCheck.load(tmp_path / "check.json")
    assert loaded.to_dict() == json.loads((tmp_path / "check.json").read_text())
    assert loaded.camera("b02").windows[-1].moved[0].ratio > 1


def test_wrong_calibration_set_is_refused(scored, tmp_path):
    from fleet_fixtures import blob_image
    from PIL import Image

    from quantkit.calibset import register_set

    other = tmp_path / "other"
    (other / "images").mkdir(parents=True)
    import numpy as np

    Image.fromarray(blob_image(np.random.default_rng(3))).save(other / "images" / "0.png")
    register_set(other, name="other", kind="calibration", camera="c", lighting="day")
    with pytest.raises(CalibrationSetError, match="not the calibration set the scores"):
        check_fleet(scored["scores"], other, CFG)


def test_report_is_self_contained_escaped_and_deterministic(scored, tmp_path):
    res = check_fleet(scored["scores"], scored["calibration_set"], CFG, truth=scored["truth"])
    a = write_fleet_report(res, tmp_path / "a.html")
    write_fleet_report(res, tmp_path / "b.html")
    html = (tmp_path / "a.html").read_text()
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes() and a.alerting == 1
    body = html.split("<body", 1)[1]
    assert "http://" not in body and "https://" not in body and "<script" not in html
    assert body.index("class=\"verdict") < body.index("Camera × day") < body.index("id=\"cam-b02\"")
    assert html.count("<img") >= 2 and "data:image/jpeg;base64," in html
    evil = dataclasses.replace(res, cameras=tuple(dataclasses.replace(c, reasons=("<script>alert(1)</script>",)) if c.camera == "b02" else c
                                                  for c in res.cameras))
    write_fleet_report(evil, tmp_path / "evil.html")
    text = (tmp_path / "evil.html").read_text()
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)" in text


@pytest.mark.browser
def test_report_renders_in_chromium(scored, tmp_path):
    import html as htmllib
    import re
    import shutil
    import subprocess

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless Chromium not installed (apt-get install chromium; .ci/run installs it)")
    from test_report_browser import PROBE

    res = check_fleet(scored["scores"], scored["calibration_set"], CFG, truth=scored["truth"])
    write_fleet_report(res, tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run", "--disable-sync", "--disable-dev-shm-usage", "--virtual-time-budget=5000"]
    dom = subprocess.run([*base, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<pre id="qk-probe">(.*?)</pre>', dom.stdout, re.DOTALL)
    assert m, "probe did not run: " + dom.stdout[-500:]
    result = json.loads(htmllib.unescape(m.group(1)))
    assert result["errors"] == [] and len(result["images"]) == page.count("<img") >= 2
    assert [i["alt"] for i in result["images"] if not (i["complete"] and i["w"] > 0 and i["h"] > 0)] == []
    shot = tmp_path / "index.png"
    snap = subprocess.run([*base, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}", "--window-size=1200,2400",
                           (tmp_path / "index.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert snap.returncode == 0 and shot.stat().st_size > 10_000


def test_a_camera_agreement_falls_by_the_shift_reports_rule():
    """One rule with the shift report (AgreementPolicy, green line 0.9, fleet_drop 0.15): crossing the green line is a
    fall (0.99 -> 0.88, a drop of 0.11 that the old drop-only rule called "within 0.15 of before"); a large drop that
    stays green is not; a camera already below the line that stays there is not a change."""
    from quantkit.decision import AgreementPolicy

    p = AgreementPolicy(green=0.9, fleet_drop=0.15)
    assert p.fell(0.99, 0.88) and p.fell(0.85, 0.65) and p.fell(0.95, 0.70)
    assert not p.fell(0.99, 0.91) and not p.fell(0.86, 0.82) and not p.fell(0.82, 0.92)

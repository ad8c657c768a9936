"""The shift report in a real browser: headless Chromium loads every image and runs no failing script."""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from quantkit.report import ModelInputs, ReportConfig, make_report
from quantkit.report.synthetic import write_inputs, write_verification

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Injected into a COPY of the report: records each <img>'s load state and any script error in the DOM.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { if (e instanceof ErrorEvent) { window.__errors.push(String(e.message)); } }, true);
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var speed = document.getElementById('speed-table');
  var nodes = document.getElementById('node-table');
  var out = {errors: window.__errors, speed_rows: speed ? speed.rows.length : 0, node_rows: nodes ? nodes.rows.length : 0,
    speed_text: speed ? speed.textContent : '', node_text: nodes ? nodes.textContent : '', images: imgs.map(function (i) {
    return {alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}; })};
  var vw = document.documentElement.clientWidth;
  out.viewport = vw; out.inner = window.innerWidth; out.scroll_width = document.documentElement.scrollWidth;
  out.overflow = Array.prototype.slice.call(document.body.querySelectorAll('*')).filter(function (e) {
    var r = e.getBoundingClientRect(), mr = parseFloat(getComputedStyle(e).marginRight) || 0;
    return r.width > 0 && (r.right > vw + 0.5 || r.right + mr > vw + 0.5); }).slice(0, 12).map(function (e) {
    return e.tagName + (e.className ? '.' + e.className : '') + ' right=' + Math.round(e.getBoundingClientRect().right) + ' ' +
      (e.textContent || '').slice(0, 60); });
  var pre = document.createElement('pre'); pre.id = 'qk-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
  if (window.parent !== window) { window.parent.postMessage(JSON.stringify(out), '*'); }
});
</script>"""


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    base = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium; .ci/run installs it)")
def test_report_renders_in_chromium(tmp_path: Path):
    paths = write_inputs(tmp_path / "in", images_per_site=4)
    out = tmp_path / "reports"
    make_report([ModelInputs.from_work_dir(paths["work"], site_sets=paths["site_sets"])], ReportConfig(), out)
    page = (out / "shift_report.html").read_text(encoding="utf-8")
    assert page.count("<img") >= 6  # overview figures, score distributions, thumbnails
    probe = out / "probe.html"  # beside the report, so the machine-measurement sidecar resolves like the report's
    probe.write_text(page.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")

    def load(profile: str) -> dict:
        dom = _chromium(["--dump-dom", probe.as_uri()], tmp_path / profile)
        assert dom.returncode == 0, dom.stderr[-2000:]
        m = re.search(r'<pre id="qk-probe">(.*?)</pre>', dom.stdout, re.DOTALL)
        assert m, "probe did not run: " + dom.stdout[-500:]
        return json.loads(htmllib.unescape(m.group(1)))

    result = load("profile1")  # no measurements beside the report: the page says so, no script error
    assert result["errors"] == [] and result["speed_rows"] == 0
    assert len(result["images"]) == page.count("<img")
    broken = [i["alt"] for i in result["images"] if not (i["complete"] and i["w"] > 0 and i["h"] > 0)]
    assert broken == []
    (out / "machine").mkdir()
    rows = [{"model": "ppocr_det", "variant": v, "runtime": "openvino", "threads": 1, "median_ms": ms, "vs_fp32": 50.0 / ms, "placement": pl}
            for v, ms, pl in (("fp32", 50.0, None), ("deployed", 33.3, "openvino"))]
    nodes = [{"model": "ppocr_det", "variant": "deployed", "runtime": "openvino", "threads": 1, "placement": "openvino", "total_ms": 30.0,
              "integer_kernel_share": 0.9, "conversions": 0, "conversion_ms": 0.0, "slowest_conversions": [],
              "by_kind": [{"type": "Convolution", "precision": "u8", "ms": 27.0}, {"type": "Subgraph", "precision": "f32", "ms": 1.5}]}]
    (out / "machine" / "measurements.js").write_text("window.QUANTKIT_MEASUREMENTS = " + json.dumps(
        {"machine": "test <b>cpu</b>", "latency": rows, "node_time": nodes}) + ";\n")
    result = load("profile3")
    assert result["errors"] == [] and result["speed_rows"] == 3  # header + one row per measurement
    assert "deployed (openvino placement)" in result["speed_text"]
    assert result["node_rows"] == 2 and "90%" in result["node_text"] and "Convolution u8 27.0, Subgraph f32 1.5" in result["node_text"]

    shot = out / "shift_report.png"  # kept as a test artifact next to the report under pytest's tmp dir
    snap = _chromium([f"--screenshot={shot}", "--window-size=1200,2400", (out / "shift_report.html").as_uri()], tmp_path / "profile2")
    assert snap.returncode == 0, snap.stderr[-2000:]
    assert shot.stat().st_size > 10_000


# Chromium will not make a window narrower than 500 px, so a phone's width is an iframe of that width (its own viewport).
FRAME = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:3000px;border:0;display:block"></iframe>
<script>window.addEventListener('message', function (e) {{
  var pre = document.createElement('pre'); pre.id = 'qk-probe'; pre.textContent = e.data; document.body.appendChild(pre); }});</script>
</body></html>"""


def _framed(out: Path, tmp_path: Path, width: int, src: str, args: list[str], profile: str) -> subprocess.CompletedProcess[str]:
    page = out / f"frame-{width}-{Path(src).stem}.html"
    page.write_text(FRAME.format(src=src, width=width), encoding="utf-8")
    return _chromium([f"--window-size={max(width, 500)},3000", "--hide-scrollbars", *args, page.as_uri()], tmp_path / profile)


def _probe(out: Path, tmp_path: Path, width: int, profile: str) -> dict:
    dom = _framed(out, tmp_path, width, "probe.html", ["--dump-dom"], profile)
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<pre id="qk-probe">(.*?)</pre>', dom.stdout, re.DOTALL)
    assert m, "probe did not run: " + dom.stdout[-500:]
    return json.loads(htmllib.unescape(m.group(1)))


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium; .ci/run installs it)")
def test_report_fits_a_desktop_and_a_phone_without_horizontal_scrolling(tmp_path: Path):
    """At 1280 px and 390 px wide no element reaches past the viewport's right edge (tables, commands with copy
    buttons, the glossary); screenshots of both are kept (QUANTKIT_TEST_ARTIFACTS, else pytest's tmp dir)."""
    switch = write_inputs(tmp_path / "a", model="detector_switch", images_per_site=4,
                          quality={s: {"deployed": 0.92, "candidate": 0.97} for s in ("cam1-day", "cam1-night", "cam2-day")})
    review = write_inputs(tmp_path / "b", images_per_site=4)
    write_verification(review["work"], {"onnxruntime": "numbers", "openvino": "failed"})
    out = tmp_path / "reports"
    make_report([ModelInputs.from_work_dir(p["work"], site_sets=p["site_sets"]) for p in (switch, review)], ReportConfig(), out)
    page = (out / "shift_report.html").read_text(encoding="utf-8")
    assert 'class="copy"' in page and 'id="glossary"' in page  # what must fit: commands with copy buttons, the glossary
    (out / "probe.html").write_text(page.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    shots = Path(os.environ.get("QUANTKIT_TEST_ARTIFACTS", tmp_path / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        r = _probe(out, tmp_path, width, f"p{width}")
        assert r["errors"] == [] and r["viewport"] == width, r
        assert r["scroll_width"] <= width and r["overflow"] == [], f"{width} px: {r['overflow']}"
        shot = shots / f"shift_report-{width}px.png"
        snap = _framed(out, tmp_path, width, "shift_report.html", [f"--screenshot={shot}"], f"s{width}")
        assert snap.returncode == 0 and shot.stat().st_size > 10_000, snap.stderr[-2000:]


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium; .ci/run installs it)")
def test_fleet_report_fits_a_desktop_and_a_phone_without_horizontal_scrolling(tmp_path: Path):
    """The fleet report (a camera told to watch, with its reasons, trend, grid and examples) at 1280 px and 390 px: no
    element past the right edge, long reasons wrapped; screenshots kept beside the shift report's."""
    from fleet_fixtures import make_fleet_tree, make_models

    from quantkit.fleet import check_fleet, register_tree, score_fleet, write_fleet_report
    from quantkit.fleet.config import FleetCheckConfig, FleetScoreConfig

    paths = make_models(tmp_path / "models")
    tree = make_fleet_tree(tmp_path / "images", days=7, per_day=6, dark_camera="b02", dark_from=5)
    register_tree(tree, tmp_path / "manifest.parquet")
    score_fleet(tmp_path / "manifest.parquet", paths["intake"], paths["quantized"], paths["thresholds"], paths["calibration_set"],
                tmp_path / "scores", FleetScoreConfig(workers=0, model_every=3))
    check = check_fleet(tmp_path / "scores", paths["calibration_set"], FleetCheckConfig(reference_windows=3, repeats=500))
    assert check.ranked, "the fixture's darkened camera must be in the report"
    out = tmp_path / "fleet"
    out.mkdir()
    write_fleet_report(check, out / "index.html")
    page = (out / "index.html").read_text(encoding="utf-8")
    (out / "probe.html").write_text(page.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    shots = Path(os.environ.get("QUANTKIT_TEST_ARTIFACTS", tmp_path / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        r = _probe(out, tmp_path, width, f"f{width}")
        assert r["errors"] == [] and r["viewport"] == width, r
        assert r["scroll_width"] <= width and r["overflow"] == [], f"{width} px: {r['overflow']}"
        shot = shots / f"fleet_report-{width}px.png"
        snap = _framed(out, tmp_path, width, "index.html", [f"--screenshot={shot}"], f"fs{width}")
        assert snap.returncode == 0 and shot.stat().st_size > 10_000, snap.stderr[-2000:]

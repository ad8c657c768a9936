"""The shift report in a real browser: headless Chromium loads every image and runs no failing script."""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from quantkit.report import ModelInputs, ReportConfig, make_report
from quantkit.report.synthetic import write_inputs

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Injected into a COPY of the report: records each <img>'s load state and any script error in the DOM.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { if (e instanceof ErrorEvent) { window.__errors.push(String(e.message)); } }, true);
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var speed = document.getElementById('speed-table');
  var out = {errors: window.__errors, speed_rows: speed ? speed.rows.length : 0, images: imgs.map(function (i) {
    return {alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}; })};
  var pre = document.createElement('pre'); pre.id = 'qk-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
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
    rows = [{"model": "ppocr_det", "variant": v, "runtime": "onnxruntime", "threads": 1, "median_ms": ms, "vs_fp32": 50.0 / ms}
            for v, ms in (("fp32", 50.0), ("deployed", 33.3))]
    (out / "machine" / "measurements.js").write_text("window.QUANTKIT_MEASUREMENTS = " + json.dumps({"machine": "test <b>cpu</b>", "latency": rows}) + ";\n")
    result = load("profile3")
    assert result["errors"] == [] and result["speed_rows"] == 3  # header + one row per measurement

    shot = out / "shift_report.png"  # kept as a test artifact next to the report under pytest's tmp dir
    snap = _chromium([f"--screenshot={shot}", "--window-size=1200,2400", (out / "shift_report.html").as_uri()], tmp_path / "profile2")
    assert snap.returncode == 0, snap.stderr[-2000:]
    assert shot.stat().st_size > 10_000

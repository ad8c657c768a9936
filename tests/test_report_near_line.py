"""The shift report's "Decisions near the line": wording, warning, plot and DVC metrics from synthetic inputs whose FP32
scores are planted hugging the threshold on one site set (quantkit.report.synthetic, counted by the real counter)."""

from __future__ import annotations

import json

import pytest

from quantkit.report.aggregate import ModelInputs, build_report
from quantkit.report.render import write_report
from quantkit.report.synthetic import write_inputs


def _report(root, **kw):
    p = write_inputs(root, images_per_site=4, write_images=False, **kw)
    return write_report(build_report([ModelInputs.from_work_dir(p["work"], site_sets=p["site_sets"])]), root / "reports")


@pytest.fixture(scope="module")
def hugging(tmp_path_factory):
    return _report(tmp_path_factory.mktemp("hug"), near_line={"cam1-night": 0.4})


def test_planted_threshold_hugging_scores_show_in_metrics(hugging):
    m = json.loads(hugging["metrics"].read_text())["ppocr_det"]
    night, day = m["cam1-night"]["deployed"], m["cam1-day"]["deployed"]
    assert night["near_line.within_1_step"] == pytest.approx(0.4) and night["near_line.baseline_within_1_step"] == pytest.approx(0.03)
    assert night["near_line.change_within_1_step"] == pytest.approx(0.37) and night["near_line.fragile"] is True
    assert night["near_line.k"] == 3 and night["near_line.decisions"] == 160 and "near_line.within_k_steps" in night
    assert day["near_line.fragile"] is False and day["near_line.within_1_step"] == pytest.approx(0.03, abs=0.01)
    assert m["cam1-night"]["candidate"]["near_line.fragile"] is True
    assert "near_line" not in json.dumps(m["cam1-night"].get("fp32", {}))  # FP32 is the reference, no line of its own
    rows = (hugging["plots"] / "near_line.csv").read_text().splitlines()
    assert rows[0] == "model_site_role,within_1_step,within_k_steps,k,baseline_within_1_step,decisions"
    assert "ppocr_det/cam1-night/deployed,0.4,0.4,3,0.03,160" in rows


def test_planted_threshold_hugging_scores_warn_in_plain_words(hugging):
    html = hugging["html"].read_text()
    assert html.count('class="alert near-line-warning"') == 2  # deployed and candidate on cam1-night, under the verdict
    assert "Warning: Decisions near the line on cam1-night: 40% of the deployed model&#39;s decisions sit within one INT8 step" in html
    assert "Deployed model: 40% of decisions now sit within one INT8 step of the line, up from 3% when calibrated" in html
    assert 'alt="ppocr_det: share of decisions within one INT8 step of the line per site set"' in html
    assert "score distribution\"" not in html  # the log-scale histograms (alt "<site> score distribution") are gone
    assert "decisions near the line</dt>" in html  # glossary
    md = hugging["markdown"].read_text()
    assert "- Warning: Decisions near the line on cam1-night" in md


def test_scores_far_from_the_line_raise_no_warning(tmp_path):
    out = _report(tmp_path)
    html = out["html"].read_text()
    assert "near-line-warning" not in html and "now sit within" not in html
    assert html.count("no sign of fragile decisions") == 6  # 3 site sets x 2 roles
    m = json.loads(out["metrics"].read_text())["ppocr_det"]
    assert not any(m[s][r]["near_line.fragile"] for s in ("cam1-day", "cam1-night", "cam2-day") for r in ("deployed", "candidate"))

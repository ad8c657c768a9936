"""Decisions near the line: FP32's decisions within one (and k) integer steps of a bound threshold, counted through the
task adapter's values and the threshold set's integer step, against the reference-set baseline (quantkit.thresholds.near_line)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from quantkit.artifacts.evaluation import NearLine
from quantkit.artifacts.thresholds import NEAR_LINE_STEPS, Binding, NearLineCounts, ThresholdSet
from quantkit.errors import ConfigError, InputFileError
from quantkit.report.config import ReportConfig
from quantkit.report.model import is_fragile, near_line_metrics
from quantkit.report.near_line import sentence
from quantkit.tasks.classify import ClassifierAdapter
from quantkit.thresholds.config import ThresholdsConfig
from quantkit.thresholds.integer_domain import integer_threshold
from quantkit.thresholds.near_line import NearLineCounter, near_line, near_line_counts

STEP = 1 / 255
TASK = ClassifierAdapter(cls_thresh=0.9)  # probabilities output: the threshold compares the top-1 probability itself
BOUND = {"cls_thresh": integer_threshold(0.9, tensor="probs", scale=STEP, zero_point=0, dtype="uint8")}


def _outputs(top: np.ndarray) -> list[dict[str, np.ndarray]]:
    """One [1, 2] probability output per image with top-1 probability ``top[i]``."""
    return [{"probs": np.array([[p, 1.0 - p]], np.float32)} for p in top]


def _far(rng: np.random.Generator, n: int) -> np.ndarray:
    """Top-1 probabilities far from 0.9: confident (~0.99) or clearly unsure (~0.65), never within 8 steps."""
    return np.where(rng.random(n) < 0.7, rng.uniform(0.97, 1.0, n), rng.uniform(0.55, 0.75, n))


def test_threshold_hugging_scores_raise_the_share_and_warn():
    rng = np.random.default_rng(0)
    line = BOUND["cls_thresh"].float_value
    baseline = near_line_counts(TASK, _outputs(_far(rng, 200)), BOUND)
    # planted: 60 of 100 site images hug the threshold, within half an integer step of it, the rest far away
    hugging = np.concatenate([line + rng.uniform(-0.5, 0.5, 60) * STEP, _far(rng, 40)])
    site = near_line_counts(TASK, _outputs(hugging), BOUND)
    assert baseline is not None and site is not None
    assert (baseline.decisions, baseline.within[0]) == (200, 0)
    assert (site.threshold, site.decisions, site.within[0]) == ("cls_thresh", 100, 60)
    assert site.step == pytest.approx(STEP) and site.line == pytest.approx(0.9)
    result = near_line(site, baseline, ThresholdsConfig().near_line_steps, "cam1-day")
    assert (result.share_1, result.baseline_1, result.change_1, result.k) == (pytest.approx(0.6), 0.0, pytest.approx(0.6), 3)
    cfg = ReportConfig()
    assert is_fragile(result, cfg)
    text = sentence(result, "deployed", cfg)
    assert text.startswith("Deployed model: 60% of decisions now sit within one INT8 step of the line, up from 0% when calibrated")
    assert "can flip" in text
    keys = near_line_metrics(result, cfg)
    assert keys["near_line.fragile"] is True and keys["near_line.within_1_step"] == 0.6 and keys["near_line.change_within_1_step"] == 0.6
    json.dumps(keys)  # numbers and bools only: a DVC metric


def test_scores_far_from_the_line_do_not_warn():
    rng = np.random.default_rng(1)
    baseline = near_line_counts(TASK, _outputs(_far(rng, 200)), BOUND)
    site = near_line_counts(TASK, _outputs(_far(rng, 100)), BOUND)
    result = near_line(site, baseline, 3)
    assert result.share_1 == 0.0 and result.share_k == 0.0 and result.change_1 == 0.0
    assert not is_fragile(result, ReportConfig())
    assert "no sign of fragile decisions" in sentence(result, "candidate", ReportConfig())
    assert near_line_metrics(result, ReportConfig())["near_line.fragile"] is False


def test_bands_count_whole_steps_and_k_widens_them():
    c = NearLineCounter("cls_thresh", BOUND["cls_thresh"])
    line = BOUND["cls_thresh"].float_value
    c.add(np.array([line, line + STEP, line - 2 * STEP, line + 2.5 * STEP, line + 9 * STEP, np.nan, -np.inf]))
    got = c.result()
    assert got.decisions == 7 and len(got.within) == NEAR_LINE_STEPS
    assert got.within[:4] == (2, 3, 4, 4) and got.within[-1] == 4  # exactly one code away counts as within one step
    assert near_line(got, None, 3).share_k == pytest.approx(4 / 7)
    assert near_line(got, None, 3).change_1 is None  # no baseline: no change, no warning
    with pytest.raises(ConfigError, match="near_line.k"):
        NearLine(got, NEAR_LINE_STEPS + 1)


def test_no_integer_form_means_no_count():
    assert near_line_counts(TASK, _outputs(np.array([0.9])), {}) is None
    assert near_line_counts(ClassifierAdapter(softmax=True), _outputs(np.array([0.9])), BOUND) is None  # logits: no single value
    with pytest.raises(ConfigError, match="near_line_steps"):
        ThresholdsConfig(near_line_steps=0)


def test_a_baseline_for_another_line_is_not_compared():
    site = NearLineCounts("cls_thresh", STEP, 0.9, 10, (5,) * NEAR_LINE_STEPS)
    other = dataclasses.replace(site, line=0.8, within=(0,) * NEAR_LINE_STEPS)
    assert near_line(site, other, 3).baseline is None


def test_threshold_set_carries_the_baseline_and_older_sets_keep_their_fingerprint(tmp_path):
    base = NearLineCounts("cls_thresh", STEP, 0.9, 10, (1, 2, 3, 4, 5, 6, 7, 8))
    ts = ThresholdSet(adapter="classifier", values={"cls_thresh": 0.9}, fp32_values={"cls_thresh": 0.9}, integer_domain=BOUND,
                      binding=Binding(model_digest="ab" * 32), near_line=base)
    path = ts.save(tmp_path / "t.json")
    assert ThresholdSet.load(path).near_line == base
    # a file bound before quantkit counted the baseline (no near_line key) loads with the fingerprint it was sealed with,
    # so the evaluations, verifications and bundle manifests that name it still match
    from quantkit._io import fingerprint

    old = {k: v for k, v in ts.to_dict().items() if k not in ("near_line", "fingerprint")}
    old["fingerprint"] = fingerprint(old)
    (tmp_path / "before.json").write_text(json.dumps(old))
    loaded = ThresholdSet.load(tmp_path / "before.json")
    assert loaded.near_line is None and loaded.fingerprint == old["fingerprint"] == loaded.content_fingerprint()
    assert ThresholdSet.load(path).fingerprint != loaded.fingerprint  # the baseline is sealed in when present
    old["values"] = {"cls_thresh": 0.8}
    (tmp_path / "edited.json").write_text(json.dumps(old))
    with pytest.raises(InputFileError, match="fingerprint"):
        ThresholdSet.load(tmp_path / "edited.json")

"""Confidence intervals of pooled metrics at small sample sizes (quantkit.thresholds.stats)."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.thresholds.stats import bootstrap_ratio, is_proportion

KW = dict(resamples=1000, seed=0, confidence=0.95)


def test_all_agreeing_images_get_the_exact_interval_not_zero_width():
    e = bootstrap_ratio(np.ones(12), np.ones(12), **KW)  # top-1 agreement 12/12
    assert e.value == 1.0 and e.n == 12
    assert e.ci[0] == pytest.approx(0.025 ** (1 / 12), abs=1e-6)  # Clopper-Pearson lower bound for 12/12: (alpha/2)^(1/n) = 0.7354
    assert e.ci[1] == 1.0


def test_seven_of_twelve_matches_clopper_pearson():
    e = bootstrap_ratio([1] * 7 + [0] * 5, np.ones(12), **KW)
    assert e.value == pytest.approx(7 / 12, abs=1e-6)
    # published exact interval for 7/12 at 95%: 0.2767-0.8483 (the percentile bootstrap gave 0.333-0.917)
    assert e.ci == pytest.approx((0.276664, 0.848334), abs=2e-5)


def test_images_without_a_trial_do_not_count_and_factor_scales():
    e = bootstrap_ratio([1, 1, 0, 0], [1, 1, 1, 0], factor=100.0, **KW)
    assert e.value == pytest.approx(200 / 3, abs=1e-4) and 0 < e.ci[0] < e.value < e.ci[1] <= 100.0
    assert bootstrap_ratio([0, 0], [0, 0], empty=1.0, **KW).ci == (1.0, 1.0)  # nothing to agree on: the empty value


def test_ratio_of_pixel_counts_uses_a_seeded_bootstrap_that_contains_the_value():
    rng = np.random.default_rng(1)
    inter, union = rng.integers(500, 1000, 12), np.full(12, 1000)
    assert not is_proportion(inter.astype(float), union.astype(float))
    a, b = bootstrap_ratio(inter, union, **KW), bootstrap_ratio(inter, union, **KW)
    assert a == b  # deterministic
    assert a.ci[0] < a.value < a.ci[1] and a.ci[1] - a.ci[0] > 0.05


def test_identical_pixel_ratios_are_widened_not_zero_width():
    iou = bootstrap_ratio(np.full(12, 400.0), np.full(12, 400.0), **KW)  # every image's pixel IoU is 1
    cer = bootstrap_ratio(np.zeros(12), np.full(12, 30.0), **KW)  # no character differs on any image
    d = 1 - 0.025 ** (1 / 12)
    assert iou.value == 1.0 and iou.ci == pytest.approx((1 - d, 1.0), abs=1e-6)
    assert cer.value == 0.0 and cer.ci == pytest.approx((0.0, d), abs=1e-6)

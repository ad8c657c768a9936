"""Distribution distances: known values, symmetry of zero, histogram forms agree with sample forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from quantkit import metrics as m


def test_identical_samples_have_zero_distance():
    a = np.random.default_rng(0).normal(size=300)
    d = m.compare_samples(a, a)
    assert (d.psi, d.ks, d.wasserstein, d.js) == (0.0, 0.0, 0.0, 0.0)
    assert d.ks_pvalue == pytest.approx(1.0)
    assert d.psi_level == "none"


def test_mean_shift_of_one_sigma_matches_theory():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 20000), rng.normal(1, 1, 20000)
    d = m.compare_samples(a, b)
    assert d.wasserstein == pytest.approx(1.0, abs=0.03)  # W1 of a pure location shift is the shift
    assert d.ks == pytest.approx(2 * norm.cdf(0.5) - 1, abs=0.02)  # sup |Phi(x) - Phi(x-1)| at x=0.5
    assert m.normalized_wasserstein(a, b, kind="iqr") == pytest.approx(1.0, abs=0.05)
    assert d.psi_level == "significant" and d.psi > 0.25
    assert 0 < d.js < 1


def test_psi_by_hand_from_counts():
    e, a = [50, 30, 20], [30, 30, 40]
    fe, fa = np.array(e) / 100, np.array(a) / 100
    assert m.psi_from_counts(e, a) == pytest.approx(float(np.sum((fa - fe) * np.log(fa / fe))))
    assert m.psi_from_counts([10, 0], [0, 10]) > 1  # empty bins are floored, result stays finite
    assert math.isfinite(m.psi_from_counts([10, 0], [0, 10]))


def test_histogram_forms_agree_with_samples():
    rng = np.random.default_rng(2)
    a, b = rng.uniform(0, 1, 5000), rng.beta(2, 2, 5000)
    edges = np.linspace(0, 1, 101)
    ca, cb = np.histogram(a, edges)[0], np.histogram(b, edges)[0]
    h = m.compare_histograms(edges, ca, cb)
    assert h.ks == pytest.approx(m.ks(a, b)[0], abs=0.01)
    assert h.wasserstein == pytest.approx(m.wasserstein(a, b), abs=0.005)
    assert h.to_dict()["ks_pvalue"] is None  # NaN -> None keeps JSON valid
    assert "Distances(psi=" in repr(h)


def test_constant_reference_detects_any_change():
    assert m.psi([640] * 20, [640] * 10) == 0.0
    assert m.psi([640] * 20, [800] * 10) > 5
    assert m.jensen_shannon([640] * 20, [800] * 10) == pytest.approx(1.0)


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="no finite values"):
        m.ks([], [1.0])
    with pytest.raises(ValueError, match="same bin edges"):
        m.psi_from_counts([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="bins \\+ 1 edges"):
        m.wasserstein_from_counts([0, 1], [1, 2], [2, 1])

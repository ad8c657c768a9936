"""Mergeable shard summaries: merged histograms give exactly the all-rows PSI/KS/W1; the bootstrap twin matches quantkit.metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from quantkit import metrics
from quantkit.calibset.stats import STAT_COLUMNS
from quantkit.fleet import effects
from quantkit.fleet.decisions import COLUMNS as DECISION_COLUMNS
from quantkit.fleet.summaries import Edges, Summary, merge_all


def _rows(rng: np.random.Generator, n: int, shift: float = 0.0) -> pd.DataFrame:
    d = {c: rng.normal(100 + shift, 10, n) for c in STAT_COLUMNS}
    d.update(sharpness_lapvar=rng.lognormal(5 + shift / 50, 0.5, n), noise_sigma=rng.lognormal(0, 0.3, n),
             contrast_rms=rng.uniform(0.05, 0.3, n), clip_dark=rng.uniform(0, 0.05, n), clip_bright=rng.uniform(0, 0.05, n),
             saturation_mean=rng.uniform(0.1, 0.6, n), brightness_p5=rng.uniform(0, 80, n))
    frame = pd.DataFrame(d)
    frame["error"] = None
    frame["scored"] = rng.random(n) < 0.5
    for c, t in DECISION_COLUMNS:
        frame[c] = rng.integers(0, 9, n) if t == "int64" else rng.random(n)
    frame["clip_rate"] = np.where(rng.random(n) < 0.2, rng.random(n) * 0.01, np.nan)
    return frame


@pytest.fixture(scope="module")
def edges() -> Edges:
    return Edges.from_calibration(_rows(np.random.default_rng(1), 64), 128, {"name": "calib"})


def test_psi_from_merged_histograms_equals_psi_from_all_rows(edges: Edges):
    rng = np.random.default_rng(2)
    shards = [_rows(rng, int(n), shift=s) for n, s in zip(rng.integers(3, 40, 9), np.linspace(0, 30, 9))]
    merged = merge_all(Summary.from_rows(s, edges, 200) for s in shards)
    everything = pd.concat(shards, ignore_index=True)
    calib = _rows(np.random.default_rng(3), 200)
    for name in ("brightness_mean", "sharpness_lapvar", "contrast_rms"):
        e = edges.edges[name]
        direct = edges.bin_counts(name, everything[name].to_numpy())[0]
        assert np.array_equal(merged.hist[name], direct)
        ref = edges.bin_counts(name, calib[name].to_numpy())[0]
        assert merged.hist[name].sum() == len(everything)
        # PSI on the reference's quantile groups, from merged counts vs from all rows: identical
        g = effects.psi_groups(ref, 5)
        a = metrics.psi_from_counts(effects.grouped(ref, g, 5), effects.grouped(merged.hist[name], g, 5))
        b = metrics.psi_from_counts(effects.grouped(ref, g, 5), effects.grouped(np.histogram(np.clip(everything[name], e[0], e[-1]), e)[0], g, 5))
        assert a == b and a > 0
    assert merged.images == len(everything) and merged.scored == int(everything["scored"].sum())
    assert merged.sums["agree_num"] == pytest.approx(everything.loc[everything["scored"], "agree_num"].sum())


def test_kll_merge_is_exact_below_capacity_and_round_trips(edges: Edges):
    rng = np.random.default_rng(4)
    parts = [_rows(rng, 20) for _ in range(4)]
    merged = merge_all(Summary.from_rows(p, edges, 200) for p in parts)
    allv = pd.concat(parts)["brightness_mean"].to_numpy()
    whole = Summary.from_rows(pd.concat(parts, ignore_index=True), edges, 200)
    assert not merged.sketch("brightness_mean").is_estimation_mode()
    for q in (0.05, 0.5, 0.95):  # exact mode: the merged sketch is the all-rows sketch, values of the data
        assert merged.quantile("brightness_mean", q) == whole.quantile("brightness_mean", q) == np.sort(allv)[int(q * allv.size)]
    back = Summary.from_dict(merged.to_dict(), edges)
    assert back.to_dict() == merged.to_dict()
    # estimation mode: within the sketch's documented rank error
    bigs = [_rows(rng, 400) for _ in range(5)]
    sk = merge_all(Summary.from_rows(b, edges, 200) for b in bigs).sketch("noise_sigma")
    values = pd.concat(bigs)["noise_sigma"].to_numpy()
    assert sk.is_estimation_mode() and sk.normalized_rank_error(False) < 0.02
    for q in (0.1, 0.5, 0.9):
        assert abs(np.mean(values <= sk.get_quantile(q)) - q) <= sk.normalized_rank_error(False)


def test_effect_matrix_matches_quantkit_metrics(edges: Edges):
    rng = np.random.default_rng(5)
    e = edges.edges["brightness_mean"]
    ref = np.bincount(rng.integers(40, 90, 300), minlength=e.size - 1)
    samples = rng.multinomial(12, ref / ref.sum(), size=6)
    samples[0] = np.bincount(rng.integers(60, 120, 12), minlength=e.size - 1)
    full = effects.effects(e, ref, samples[0], psi_bins=5, spread_floor=0.01)  # cut to the support inside; same as on all bins:
    g = effects.psi_groups(ref, 5)
    assert full["ks"] == metrics.ks_from_counts(ref, samples[0])
    assert full["psi"] == pytest.approx(metrics.psi_from_counts(effects.grouped(ref, g, 5), effects.grouped(samples[0], g, 5)), rel=1e-12)
    assert full["wasserstein"] == pytest.approx(metrics.wasserstein_from_counts(e, ref, samples[0]) / effects.reference_spread(e, ref, 0.01), rel=1e-9)
    mat = effects.effect_matrix(e, ref, samples, psi_bins=5, spread_floor=0.01)
    for i, row in enumerate(samples):
        one = effects.effects(e, ref, row, psi_bins=5, spread_floor=0.01)
        for m in effects.METRICS:
            assert mat[m][i] == pytest.approx(one[m], rel=1e-9, abs=1e-12)


def test_camera_thresholds_are_family_wise_and_seeded(edges: Edges):
    rng = np.random.default_rng(6)
    names = ["brightness_mean", "contrast_rms"]
    axes = {n: effects.axis(n, edges.edges[n]) for n in names}
    wins = {n: [edges.bin_counts(n, _rows(rng, 8)[n].to_numpy())[0] for _ in range(4)] for n in names}
    kw = dict(psi_bins=5, spread_floor=0.01, repeats=300, quantile=0.99, margin=1.0, floors={})
    a = effects.camera_thresholds(axes, wins, 8, seed=[0, 1], **kw)
    assert a == effects.camera_thresholds(axes, wins, 8, seed=[0, 1], **kw)
    one = effects.camera_thresholds({"brightness_mean": axes["brightness_mean"]}, {"brightness_mean": wins["brightness_mean"]}, 8, seed=[0, 1], **kw)
    assert all(a[m] >= one[m] * 0.8 for m in effects.METRICS)  # the max over two statistics is not below one's (up to resampling)
    assert effects.camera_thresholds(axes, wins, 8, seed=[0, 1], **{**kw, "floors": {"psi": 99.0}})["psi"] == 99.0

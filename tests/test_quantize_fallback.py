"""Precision fallback on a tiny model: the search reaches the target, reports each round, reuses ranges."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from test_quantize_fixtures import make_set, make_tiny_intake

from quantkit.artifacts import CalibrationRecord
from quantkit.errors import ConfigError, ModelError
from quantkit.quantize import StaticQuantConfig, quantize
from quantkit.quantize.fallback import FallbackConfig, FallbackResult, pixel_iou, precision_fallback


def _rel_err_score(ref, got):
    a = np.concatenate([next(iter(r.values())).ravel() for r in ref]).astype(np.float64)
    b = np.concatenate([next(iter(g.values())).ravel() for g in got]).astype(np.float64)
    return float(1 - np.abs(a - b).mean() / (np.abs(a).mean() + 1e-12))


FAST = {"latency": {"threads": [1], "repeats": 3, "warmup": 0}}


def _cfg(**kw):
    return FallbackConfig.from_dict({**FAST, **kw})


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("fallback")
    intake, cset = make_tiny_intake(root / "intake", size=16), make_set(root / "set", 4, size=24)
    quantize(intake, StaticQuantConfig(per_channel=False), out=root / "base", calibration_set=cset)  # per-tensor: below the targets
    return root, intake, cset


# int16 only lifts activations (weights stay int8, which bounds this tiny model at ~0.989); float lifts both
@pytest.mark.parametrize("strategy, target", [("int16", 0.988), ("float", 0.999)])
def test_sqnr_search_reaches_target_and_reports(env, tmp_path, strategy, target):
    root, intake, cset = env
    # holdout 0: no split, the figures are the search's own (4 images); labelled in-sample
    r = precision_fallback(intake, _cfg(target=target, strategy=strategy, search="sqnr", step=1, max_kept=4, holdout=0), reference_sets=[cset],
                           out=tmp_path / "fb", base=root / "base", metric=_rel_err_score)
    assert r.metric_before < target <= r.metric_after and r.met and r.met_on_search
    assert r.heldout_images == 0 and [(f.search_images, f.heldout, f.ci) for f in r.figures] == [(4, None, None)]  # no counts: no interval
    assert 1 <= len(r.kept) <= 4 and [x.kept for x in r.rounds] == list(range(len(r.kept) + 1))
    assert [row.threads for row in r.latency] == [1] and r.latency[0].fp32_ms > 0 and r.latency[0].candidate_ms > 0
    rec = CalibrationRecord.load(tmp_path / "fb")
    assert rec.fingerprint == r.record_fingerprint and FallbackResult.load(tmp_path / "fb") == r
    assert rec.calibration["ranges_from"] == CalibrationRecord.load(root / "base").fingerprint  # no second calibration
    if strategy == "int16":
        assert {rec.tensor(k.name).dtype for k in r.kept} == {"uint16"}
    else:
        assert set(rec.config["nodes_to_exclude"])


@pytest.mark.parametrize("strategy, target", [("int16", 0.988), ("float", 0.999)])
def test_bisect_keeps_a_window_that_meets_the_worst_reference_set(env, tmp_path, strategy, target):
    root, intake, cset = env
    other = make_set(root / f"set2-{strategy}", 3, size=24, name="other", seed=1)
    r = precision_fallback(intake, _cfg(target=target, strategy=strategy), reference_sets=[cset, other], out=tmp_path / "fb",
                           base=root / "base", metric=_rel_err_score)
    # the search met the target on its images (2 + 1); the written figure is the held-out one (2 + 2 images: halves round up)
    assert r.search == "bisect" and r.met_on_search and r.rounds[0].metric < target <= min(f.search for f in r.figures)
    assert [(f.search_images, f.heldout_images) for f in r.figures] == [(2, 2), (1, 2)] and r.met == (r.metric_after >= target)
    assert set(r.metric_after_per_set) == {"test-set", "other"} and r.metric_after == min(r.metric_after_per_set.values())
    assert r.metric_before == min(r.metric_before_per_set.values())
    nodes = [n.name for n in onnx.load(str(intake / "model.onnx")).graph.node]
    j, k = r.window
    assert 1 <= len(r.kept) <= k - j <= len(nodes)
    assert list(r.kept_names) == [n for n in nodes[j:k] if n in r.kept_names] and all(x.reason for x in r.kept)
    assert [x.index for x in r.kept] == sorted(nodes.index(x.name) for x in r.kept)
    assert all(a < b for a, b in r.islands) and sum(b - a for a, b in r.islands) == len(r.kept)
    assert all(x.met == (x.complete and x.metric >= target) for x in r.rounds)
    if strategy == "float":  # everything in float is FP32 itself: measured only when it is the answer
        full = [x for x in r.rounds if x.window == (0, len(nodes)) and not x.pruned]
        assert not full or (full == [r.rounds[-1]] and len(r.kept) == len(nodes))
        assert set(CalibrationRecord.load(tmp_path / "fb").config["nodes_to_exclude"]) == set(r.kept_names)
    saved = json.loads((tmp_path / "fb" / "fallback.json").read_text())
    assert saved["window"] == [j, k] and saved["metric_after_per_set"] == r.metric_after_per_set and saved["schema_version"] == 3


def test_prune_zero_keeps_the_window_whole(env, tmp_path):
    root, intake, cset = env
    r = precision_fallback(intake, _cfg(target=0.999, prune=0), reference_sets=[cset], out=tmp_path / "fb", base=root / "base",
                           metric=_rel_err_score)
    nodes = [n.name for n in onnx.load(str(intake / "model.onnx")).graph.node]
    assert r.met and list(r.kept_names) == nodes[r.window[0]:r.window[1]] and not any(x.pruned for x in r.rounds)


def test_unreachable_target_keeps_the_best_candidate(env, tmp_path):
    root, intake, cset = env
    # int16 activations cannot lift the int8 weights' error: 0.9999 is out of reach on this model
    r = precision_fallback(intake, _cfg(target=0.9999, strategy="int16"), reference_sets=[cset], out=tmp_path / "fb",
                           base=root / "base", metric=_rel_err_score)
    assert not r.met and not r.met_on_search  # no candidate met it on the search images, nor on the held-out ones
    assert min(f.search for f in r.figures) == pytest.approx(max(x.metric for x in r.rounds if x.complete), abs=1e-6)
    assert CalibrationRecord.load(tmp_path / "fb").fingerprint == r.record_fingerprint


def test_quantizes_first_without_a_base(env, tmp_path):
    root, intake, cset = env
    r = precision_fallback(intake, _cfg(target=0.999), reference_sets=[cset], out=tmp_path / "fb", quantize_config=StaticQuantConfig(),
                           calibration_set=cset, metric=_rel_err_score)
    assert r.met and r.base_record_fingerprint != r.record_fingerprint


def test_early_stop_reads_fewer_images_and_never_passes_a_miss(env, tmp_path):
    root, intake, cset = env
    other = make_set(root / "set-es", 8, size=24, name="eight", seed=3)
    kw = dict(reference_sets=[cset, other], base=root / "base", metric=pixel_iou(0.5))
    fast = precision_fallback(intake, _cfg(target=0.999, early_stop=True), out=tmp_path / "a", **kw)
    slow = precision_fallback(intake, _cfg(target=0.999, early_stop=False), out=tmp_path / "b", **kw)
    assert [x.met for x in fast.rounds] == [x.met for x in slow.rounds] and fast.kept == slow.kept
    searched = sum(f.search_images for f in slow.figures)  # 2 of 4 and 4 of 8: the held-out images are never searched on
    assert searched == 6 and sum(x.images for x in fast.rounds) < sum(x.images for x in slow.rounds) == len(slow.rounds) * searched
    for f, s in zip(fast.rounds, slow.rounds):  # a stopped round's bound is never below the true worst metric
        assert f.complete or f.metric >= s.metric - 1e-12


def test_config_errors_name_the_field(env, tmp_path):
    root, intake, cset = env
    with pytest.raises(ConfigError, match=r"fallback.target: 95.0 must lie in"):  # an int in a float field is read as a float, as from params
        FallbackConfig(target=95)
    with pytest.raises(ConfigError, match="'greedy' is not one of"):
        FallbackConfig.from_dict({"search": "greedy"})
    with pytest.raises(ConfigError, match="repeats: 1 must be >= 3"):
        FallbackConfig.from_dict({"latency": {"repeats": 1}})
    with pytest.raises(ConfigError, match="names must differ"):
        precision_fallback(intake, _cfg(), reference_sets=[cset, cset], out=tmp_path / "x", base=root / "base")
    with pytest.raises(ConfigError, match="fallback metric returned nan"):
        precision_fallback(intake, _cfg(), reference_sets=[cset], out=tmp_path / "x", base=root / "base", metric=lambda a, b: float("nan"))
    other = make_tiny_intake(root / "other-intake", size=16)
    m = onnx.load(str(other / "model.onnx"))
    m.graph.initializer[0].float_data[:] = []
    m.graph.initializer[0].raw_data = np.ones((4, 3, 3, 3), np.float32).tobytes()
    onnx.save(m, str(other / "model.onnx"))
    with pytest.raises(ModelError, match="quantized from a float model with digest"):
        precision_fallback(other, _cfg(), reference_sets=[cset], out=tmp_path / "x", base=root / "base")
    assert not (tmp_path / "x").exists()


def test_config_round_trip():
    c = FallbackConfig.from_dict({"target": 0.96, "recovery": {"fold_affine": True}, "latency": {"threads": [1, 2]}})
    assert FallbackConfig.from_dict(c.to_dict()) == c and c.to_dict()["latency"]["threads"] == [1, 2]


def test_pixel_iou_and_its_bound():
    a = [{"y": np.array([[0.1, 0.5], [0.9, 0.2]])}]
    assert pixel_iou(0.3)(a, [{"y": np.array([[0.4, 0.5], [0.1, 0.0]])}]) == pytest.approx(1 / 3)
    assert pixel_iou(0.3)([{"y": np.zeros((2, 2))}], [{"y": np.zeros((2, 2))}]) == 1.0
    rng = np.random.default_rng(0)
    ref = [{"y": rng.random((8, 8))} for _ in range(6)]
    got = [{"y": np.clip(r["y"] + rng.normal(0, 0.3, (8, 8)), 0, 1)} for r in ref]
    m = pixel_iou(0.5)
    for k in range(7):  # the bound after k images is never below the final value, and equals it at the end
        assert m.upper_bound(ref, got[:k]) >= m(ref, got) - 1e-12
    assert m.upper_bound(ref, got) == pytest.approx(m(ref, got))
    with pytest.raises(ConfigError, match="must lie in"):
        pixel_iou(2.0)

"""Precision fallback: promoting the most sensitive activations reaches a metric target (tiny model)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from test_quantize_fixtures import make_set, make_tiny_intake

from quantkit.errors import ConfigError
from quantkit.artifacts import CalibrationRecord
from quantkit.quantize import StaticQuantConfig
from quantkit.quantize.fallback import pixel_iou, precision_fallback


def _rel_err_score(ref, got):
    a = np.concatenate([r.ravel() for r in ref]).astype(np.float64)
    b = np.concatenate([g.ravel() for g in got]).astype(np.float64)
    return float(1 - np.abs(a - b).mean() / (np.abs(a).mean() + 1e-12))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("fallback")
    return root, make_tiny_intake(root / "intake", size=16), make_set(root / "set", 4, size=24)


# int16 only lifts activations (weights stay int8, which bounds this tiny model at ~0.989); float lifts both
@pytest.mark.parametrize("strategy, target", [("int16", 0.988), ("float", 0.999)])
def test_fallback_reaches_target_and_reports(env, tmp_path, strategy, target):
    root, intake, cset = env
    cfg = StaticQuantConfig(activation_type="uint8", weight_type="int8")
    r = precision_fallback(intake, cfg, calibration_set=cset, reference_set=cset, out=tmp_path / "fb", metric=_rel_err_score,
                           target=target, strategy=strategy, search="sqnr", step=1, max_kept=4)
    assert r.metric_before < target <= r.metric_after and r.met
    assert 1 <= len(r.kept) <= 4 and [s["kept"] for s in r.steps] == list(range(len(r.kept) + 1))
    assert r.fp32_ms > 0 and r.int8_ms_after > 0
    rec = CalibrationRecord.load(tmp_path / "fb")
    assert rec.fingerprint == r.record_fingerprint and json.loads((tmp_path / "fb" / "fallback.json").read_text())["met"] is True
    q = onnx.load(str(tmp_path / "fb" / "model_int8.onnx"))
    if strategy == "int16":
        assert {rec.tensor(t).dtype for t in r.kept} == {"uint16"}
        assert set(rec.config["tensor_overrides"]) == set(r.kept)
    else:
        assert set(rec.config["nodes_to_exclude"])
        assert any(n.op_type == "Conv" and not n.input[1].endswith("_DequantizeLinear_Output") for n in q.graph.node)


@pytest.mark.parametrize("strategy, target", [("int16", 0.988), ("float", 0.999)])
def test_bisect_keeps_a_window_that_meets_the_worst_reference_set(env, tmp_path, strategy, target):
    root, intake, cset = env
    other = make_set(root / f"set2-{strategy}", 3, size=24, name="other", seed=1)
    cfg = StaticQuantConfig(activation_type="uint8", weight_type="int8")
    r = precision_fallback(intake, cfg, calibration_set=cset, reference_set=[cset, other], out=tmp_path / "fb",
                           metric=_rel_err_score, target=target, strategy=strategy)
    assert r.search == "bisect" and r.met and r.metric_before < target <= r.metric_after
    assert set(r.metric_after_per_set) == {"test-set", "other"} and r.metric_after == min(r.metric_after_per_set.values())
    assert r.metric_before == min(r.metric_before_per_set.values())
    nodes = [n.name for n in onnx.load(str(intake / "model.onnx")).graph.node]
    j, k = r.window
    assert 1 <= len(r.kept) <= k - j <= len(nodes)
    assert list(r.kept) == [n for n in nodes[j:k] if n in r.kept]  # a subset of the window, in graph order
    pruned = [st for st in r.steps if "pruned" in st]
    assert all(st["window"] == [j, k] for st in pruned)
    assert len(r.kept) == (k - j) - sum(st["pruned"][1] - st["pruned"][0] for st in pruned if st["metric"] >= target)
    # every round that met the target is at least as long as the answer (bisection keeps the shortest it saw)
    assert all(s["window"][1] - s["window"][0] >= k - j for s in r.steps[1:] if s["metric"] >= target)
    assert r.steps[1]["window"] == [0, len(nodes)]  # first round: everything promoted (the upper bound)
    rec = CalibrationRecord.load(tmp_path / "fb")
    if strategy == "float":
        assert set(rec.config["nodes_to_exclude"]) == set(r.kept)
    else:
        quantized = {t.name for t in rec.tensors}  # (a Conv output feeding a Relu is fused, not quantized)
        assert {rec.tensor(t).dtype for t in rec.config["tensor_overrides"] if t in quantized} == {"uint16"}
    saved = json.loads((tmp_path / "fb" / "fallback.json").read_text())
    assert saved["window"] == [j, k] and saved["metric_after_per_set"] == r.metric_after_per_set


def test_prune_zero_keeps_the_window_whole(env, tmp_path):
    root, intake, cset = env
    r = precision_fallback(intake, StaticQuantConfig(), calibration_set=cset, reference_set=cset, out=tmp_path / "fb",
                           metric=_rel_err_score, target=0.999, strategy="float", prune=0)
    nodes = [n.name for n in onnx.load(str(intake / "model.onnx")).graph.node]
    assert r.met and list(r.kept) == nodes[r.window[0]:r.window[1]] and not any("pruned" in st for st in r.steps)


def test_unreachable_target_keeps_the_best_candidate(env, tmp_path):
    root, intake, cset = env
    # int16 activations cannot lift the int8 weights' error: 0.9999 is out of reach on this model
    r = precision_fallback(intake, StaticQuantConfig(), calibration_set=cset, reference_set=cset, out=tmp_path / "fb",
                           metric=_rel_err_score, target=0.9999, strategy="int16")
    assert not r.met and r.metric_after == max(s["metric"] for s in r.steps)
    assert CalibrationRecord.load(tmp_path / "fb").fingerprint == r.record_fingerprint


def test_fallback_option_errors(env, tmp_path):
    root, intake, cset = env
    with pytest.raises(ConfigError, match="fallback search: 'greedy' must be 'bisect' or 'sqnr'"):
        precision_fallback(intake, StaticQuantConfig(), calibration_set=cset, reference_set=cset, out=tmp_path / "x", search="greedy")
    with pytest.raises(ConfigError, match="names must differ"):
        precision_fallback(intake, StaticQuantConfig(), calibration_set=cset, reference_set=[cset, cset], out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_fallback_bad_metric_is_one_line_error(env, tmp_path):
    root, intake, cset = env
    with pytest.raises(ConfigError, match="fallback metric returned nan"):
        precision_fallback(intake, StaticQuantConfig(), calibration_set=cset, reference_set=cset, out=tmp_path / "x",
                           metric=lambda a, b: float("nan"))
    assert not (tmp_path / "x").exists()


def test_pixel_iou():
    a = [np.array([[0.1, 0.5], [0.9, 0.2]])]
    assert pixel_iou(0.3)(a, [np.array([[0.4, 0.5], [0.1, 0.0]])]) == pytest.approx(1 / 3)
    assert pixel_iou(0.3)([np.zeros((2, 2))], [np.zeros((2, 2))]) == 1.0

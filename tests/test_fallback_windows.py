"""Fallback windows (prefix, suffix = the head, island) and the held-out figure: a tiny detector whose head alone
breaks under INT8, the split the search never sees, the interval, the artifact round trip, the latency pick."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_quantize_fixtures import _write_intake, make_set

from quantkit.artifacts import FallbackResult
from quantkit.artifacts.fallback import Round
from quantkit.calibset import CalibrationSet, CalibrationSetReader
from quantkit.errors import ConfigError
from quantkit.note import ExportNote
from quantkit.quantize import StaticQuantConfig, quantize
from quantkit.quantize.fallback import FallbackConfig, agreement_metric, precision_fallback
from quantkit.quantize.fallback.holdout import split_indices
from quantkit.quantize.fallback.search import window_search
from quantkit.runner import OrtRunner
from quantkit.tasks.boxes import BoxDetectorAdapter

SIZE = 16
BODY = 6  # Conv + Relu pairs before the head: a prefix that reaches the head is long, the head itself is short
FAST = {"latency": {"threads": [1], "repeats": 3, "warmup": 0}}


def make_head_detector(folder):
    """``x -> (Conv -> Relu) x BODY`` (well served by 8 bits), then the head: boxes ``Sigmoid(Conv) * 470`` (pixels)
    and scores ``Sigmoid(Conv)`` concatenated into one ``[1, 256, 5]`` output. One 8-bit scale for 0..470 and 0..1
    leaves the scores a single step: only the head's Concat (and what reads its output) breaks under INT8."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.6, (8, 3, 3, 3)).astype(np.float32), "w0")]
    nodes, x = [], "x"
    for i in range(BODY):
        if i:
            inits.append(numpy_helper.from_array((np.eye(8)[:, :, None, None] + rng.normal(0, 0.1, (8, 8, 1, 1))).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"body_conv{i}", **({"pads": [1, 1, 1, 1]} if i == 0 else {})),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"body_relu{i}")]
        x = f"r{i}"
    inits += [numpy_helper.from_array(rng.normal(0, 0.4, (4, 8, 1, 1)).astype(np.float32), "wb"),
              numpy_helper.from_array(rng.normal(0, 0.8, (1, 8, 1, 1)).astype(np.float32), "ws"),
              numpy_helper.from_array(np.array([0.5], np.float32), "bs"), numpy_helper.from_array(np.array(470.0, np.float32), "pix"),
              numpy_helper.from_array(np.array([1, 5, SIZE * SIZE], np.int64), "shape")]
    nodes += [helper.make_node("Conv", [x, "wb"], ["b0"], name="box_conv"), helper.make_node("Sigmoid", ["b0"], ["b1"], name="box_sigmoid"),
              helper.make_node("Mul", ["b1", "pix"], ["boxes"], name="box_pixels"),
              helper.make_node("Conv", [x, "ws", "bs"], ["s0"], name="score_conv"),
              helper.make_node("Sigmoid", ["s0"], ["scores"], name="score_sigmoid"),
              helper.make_node("Concat", ["boxes", "scores"], ["cat"], name="head_concat", axis=1),
              helper.make_node("Reshape", ["cat", "shape"], ["flat"], name="head_reshape"),
              helper.make_node("Transpose", ["flat"], ["y"], name="head_transpose", perm=[0, 2, 1])]
    g = helper.make_graph(nodes, "head-detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SIZE * SIZE, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return _write_intake(onnx.shape_inference.infer_shapes(m), folder, SIZE)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    root = tmp_path_factory.mktemp("head")
    intake, cset = make_head_detector(root / "intake"), make_set(root / "set", 8, size=SIZE)
    quantize(intake, StaticQuantConfig(), out=root / "base", calibration_set=cset)
    return root, intake, cset


def _metric():
    return agreement_metric(BoxDetectorAdapter(objectness=False, score_thresh=0.5, iou_thresh=0.45))  # box F1 vs FP32


def test_the_head_stays_in_float_not_a_prefix_up_to_it(head, tmp_path):
    root, intake, cset = head
    r = precision_fallback(intake, FallbackConfig.from_dict({**FAST, "target": 0.9}), reference_sets=[cset], out=tmp_path / "fb",
                           base=root / "base", metric=_metric())
    names = [n.name for n in onnx.load(str(intake / "model.onnx")).graph.node]
    head_start = 2 * BODY  # the first node after the body
    assert r.rounds[0].metric < 0.5 and r.met_on_search  # collapsed scores, recovered on the search images
    prefixes = [x for x in r.rounds if x.family == "prefix" and x.met]
    assert prefixes and min(x.kept for x in prefixes) > names.index("head_concat")  # a prefix must run past the Concat
    suffixes = [x for x in r.rounds if x.family == "suffix" and x.met and x.window[1] == len(names)]
    assert suffixes and max(x.window[0] for x in suffixes) >= head_start  # the head alone, up to the outputs, meets
    assert r.window_kind in ("suffix", "island") and r.window[0] >= head_start  # what was written lies in the head
    assert "head_concat" in r.kept_names and not [n for n in r.kept_names if n.startswith("body_")]
    assert len(r.kept) < min(x.kept for x in prefixes)
    assert all(k.index >= head_start and k.reason for k in r.kept)
    q = onnx.load(str(tmp_path / "fb" / "model_int8.onnx"))
    assert any(n.name == "head_concat" and n.op_type == "Concat" for n in q.graph.node)  # the Concat runs in float


def test_the_figure_is_measured_on_images_the_search_never_saw(head, tmp_path):
    root, intake, cset = head
    other = make_set(root / "night", 5, size=SIZE, name="night", seed=4)
    metric = _metric()
    r = precision_fallback(intake, FallbackConfig.from_dict({**FAST, "target": 0.9, "holdout": 0.4, "seed": 3}), reference_sets=[cset, other],
                           out=tmp_path / "fb", base=root / "base", metric=metric)
    figs = {f.name: f for f in r.figures}
    assert {n: (f.search_images, f.heldout_images) for n, f in figs.items()} == {"test-set": (5, 3), "night": (3, 2)}  # round(0.4 n), halves up
    for s in (cset, other):
        cs = CalibrationSet.load(s)
        _, held = split_indices([e.sha256 for e in cs.entries], 0.4, 3, cs.name)
        assert figs[cs.name].heldout_files == tuple(cs.entries[i].file for i in held)
    # every round, round 0 included, read search images only: a complete round reads exactly the search part
    assert {x.images for x in r.rounds if x.complete} == {5 + 3}
    # the written figure is the metric of the written model on the held-out images, recomputed here from scratch
    note = ExportNote.load(intake / "export_note.json")
    for s in (cset, other):
        cs = CalibrationSet.load(s)
        want = set(figs[cs.name].heldout_files)
        reader = CalibrationSetReader(cs, note.preprocessing)
        xs = [x for e, x in reader.iter_batches() if e[0].file in want]
        with OrtRunner(intake / "model.onnx") as fp, OrtRunner(tmp_path / "fb" / "model_int8.onnx") as q:
            ref, got = [fp.infer({"x": x}) for x in xs], [q.infer({"x": x}) for x in xs]
        assert r.metric_after_per_set[cs.name] == pytest.approx(metric(ref, got), abs=1e-12)
        lo, hi = figs[cs.name].ci
        assert lo <= r.metric_after_per_set[cs.name] <= hi and hi - lo > 0  # a few images prove little: the interval is wide
    worst = min(r.metric_after_per_set, key=r.metric_after_per_set.get)
    assert r.metric_after == r.metric_after_per_set[worst] and r.metric_after_ci == figs[worst].ci
    assert r.met == (r.metric_after >= 0.9) and r.holdout == 0.4 and r.seed == 3


def test_split_is_seeded_by_content_and_keeps_both_parts():
    shas = [f"{i:064x}" for i in range(12)]
    search, held = split_indices(shas, 0.5, 0, "s")
    assert len(held) == 6 and sorted(search + held) == list(range(12)) and not set(search) & set(held)
    assert split_indices(shas, 0.5, 0, "s") == (search, held)  # deterministic
    assert split_indices(shas, 0.5, 1, "s")[1] != held  # the seed moves it
    rev = shas[::-1]  # reordering the manifest does not move an image across the split
    assert {rev[i] for i in split_indices(rev, 0.5, 0, "s")[1]} == {shas[i] for i in held}
    assert [len(split_indices(shas[:n], 0.5, 0, "s")[1]) for n in (2, 3, 5)] == [1, 2, 3]  # round(0.5 n), halves up
    assert split_indices(shas[:4], 0.9, 0, "s")[0] and split_indices(shas[:4], 0.01, 0, "s")[1]  # never an empty part
    assert split_indices(shas[:1], 0.0, 0, "s") == ([0], [])
    with pytest.raises(ConfigError, match="reference set s: 1 image; fallback.holdout needs at least 2"):
        split_indices(shas[:1], 0.5, 0, "s")


def _oracle(needed, n):
    names = [f"n{i}" for i in range(n)]
    calls = []

    def probe(kept, info):
        calls.append(dict(info))
        met = set(needed) <= set(kept)
        return Round(index=len(calls), kept=len(kept), metric=1.0 if met else 0.5, worst_set="s", met=met)

    return names, probe, calls


@pytest.mark.parametrize("needed, n, want", [
    ({"n37", "n38", "n39"}, 40, [(37, 40), (0, 40)]),  # the head: a suffix of 3 (the prefix is the whole graph)
    ({"n2", "n3"}, 40, [(2, 4), (0, 4), (2, 40)]),  # early nodes: a short prefix, and the island inside it
    ({"n20", "n23"}, 40, [(20, 24), (20, 40), (0, 24)]),  # the middle: the island between the prefix and the suffix
])
def test_window_search_finds_prefix_suffix_and_island(needed, n, want):
    names, probe, calls = _oracle(needed, n)
    found = window_search(names, probe, limit=n, full_meets=True, narrow=False, cost=len)
    assert found == want and found[0] == min(found, key=lambda w: w[1] - w[0])
    assert all(c["family"] in ("prefix", "suffix", "island") for c in calls) and len(calls) <= 2 * 6 + 1  # 2 log2(40) + 1
    assert all(c["window"] != [0, n] for c in calls)  # everything promoted is known to meet: never measured


def test_window_search_narrows_when_the_island_misses():
    """Two ways to fix it (either the start or the end in float): no island between them; prune 0 narrows the
    cheaper window from its free end."""
    names = [f"n{i}" for i in range(32)]

    def probe(kept, info):
        s = set(kept)
        met = {"n3", "n4"} <= s or {"n30"} <= s
        return Round(index=0, kept=len(kept), metric=1.0 if met else 0.5, worst_set="s", met=met)

    assert window_search(names, probe, limit=32, full_meets=True, narrow=True, cost=len) == [(30, 31), (30, 32), (0, 5)]


def test_artifact_round_trips_and_reads_schema_2(head, tmp_path):
    root, intake, cset = head
    r = precision_fallback(intake, FallbackConfig.from_dict({**FAST, "target": 0.9, "timings": False}), reference_sets=[cset],
                           out=tmp_path / "fb", base=root / "base", metric=_metric())
    assert FallbackResult.load(tmp_path / "fb") == r and FallbackResult.from_dict(r.to_dict()) == r
    saved = json.loads((tmp_path / "fb" / "fallback.json").read_text())
    assert saved["schema_version"] == 3 and saved["figures"][0]["heldout_images"] == 4 and saved["latency"] == []
    assert all(x["latency_vs_fp32"] is None and x["seconds"] == 0.0 for x in saved["rounds"])  # timings false: same bytes every run
    precision_fallback(intake, FallbackConfig.from_dict({**FAST, "target": 0.9, "timings": False}), reference_sets=[cset],
                       out=tmp_path / "again", base=root / "base", metric=_metric())
    assert (tmp_path / "again" / "fallback.json").read_bytes() == (tmp_path / "fb" / "fallback.json").read_bytes()  # split, bootstrap seeded
    old = {k: v for k, v in saved.items() if k not in ("holdout", "seed", "confidence", "metric_after_ci", "met_on_search", "figures",
                                                       "window_kind")}
    old["schema_version"] = 2
    old["rounds"] = [{k: v for k, v in x.items() if k not in ("family", "latency_vs_fp32")} for x in saved["rounds"]]
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "fallback.json").write_text(json.dumps(old))
    v2 = FallbackResult.load(tmp_path / "v2")
    assert v2.holdout == 0.0 and v2.heldout_images == 0 and v2.met_on_search == v2.met == r.met and v2.kept == r.kept


def test_pick_latency_times_the_candidates_and_keeps_the_fastest(head, tmp_path):
    root, intake, cset = head
    cfg = FallbackConfig.from_dict({**FAST, "target": 0.95, "pick": "latency", "prune": 0})
    r = precision_fallback(intake, cfg, reference_sets=[cset], out=tmp_path / "fb", base=root / "base", metric=_metric())
    timed = [x for x in r.rounds if x.latency_vs_fp32 is not None]
    assert len(timed) >= 2 and all(x.met for x in timed)
    best = min(timed, key=lambda x: x.latency_vs_fp32)
    assert len(r.kept) == best.kept and r.window == best.window
    with pytest.raises(ConfigError, match="fallback.pick: latency times every candidate; set fallback.timings: true"):
        FallbackConfig.from_dict({"pick": "latency", "timings": False})
    with pytest.raises(ConfigError, match=r"fallback.holdout: 1.0 must lie in \[0, 1\)"):
        FallbackConfig.from_dict({"holdout": 1.0})

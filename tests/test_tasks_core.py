"""Task adapter interface and the DB text adapter: decisions, layout refusal, agreement counts, registry."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

from quantkit.errors import ConfigError, ModelError
from quantkit.tasks import ADAPTERS, MetricSpec, TaskAdapter, ThresholdSpec, empty_decision, make_adapter, register_adapter
from quantkit.tasks.maps import DBTextAdapter
from quantkit.tasks.matching import match_count


def _prob_map() -> np.ndarray:
    p = np.full((1, 1, 64, 96), 0.05, np.float32)
    p[0, 0, 10:20, 10:60] = 0.9   # a strong text line
    p[0, 0, 40:48, 20:50] = 0.42  # a weak one: binarized at 0.3, box score ~0.37 (border pixels count)
    return p


def test_db_thresholds_split_pixels_and_boxes():
    out = {"sigmoid": _prob_map()}
    d = DBTextAdapter().decide(out)  # thresh 0.3, box_thresh 0.5
    assert len(d) == 1 and 0.7 < d.scores[0] < 0.9
    assert d.mask.sum() == 10 * 50 + 8 * 30
    xs, ys = d.polygons[0][:, 0], d.polygons[0][:, 1]
    assert xs.min() <= 10 and xs.max() >= 59 and ys.min() <= 10 and ys.max() >= 19  # unclipped outward
    assert len(DBTextAdapter(box_thresh=0.3).decide(out)) == 2
    assert len(DBTextAdapter(thresh=0.5, box_thresh=0.3).decide(out)) == 1  # weak line not binarized
    cand = DBTextAdapter().candidates(out)
    assert len(cand) == 2 and DBTextAdapter().keep(cand.scores, 0.5).sum() == 1


def test_db_agreement_counts_pool_into_pixel_iou_and_box_f1():
    task = DBTextAdapter()
    out = {"sigmoid": _prob_map()}
    ref = task.decide(out)
    shifted = _prob_map()
    shifted[0, 0, 10:20, 10:60] = 0.05
    shifted[0, 0, 10:20, 40:90] = 0.9  # the strong line moved right by 30 px: pixel IoU and box IoU drop
    got = task.decide({"sigmoid": shifted})
    c = task.agreement(ref, got)
    inter = 20 * 10 + 8 * 30
    union = 80 * 10 + 8 * 30
    assert (c["pixel_inter"], c["pixel_union"]) == (inter, union)
    assert task.primary_metric().value(c) == pytest.approx(inter / union)
    same = task.agreement(ref, ref)
    assert task.metric("box_f1").value(same) == 1.0 and task.metric("pixel_iou").value(same) == 1.0
    f1 = task.metric("box_f1").value(c)
    assert f1 == 0.0  # the moved box overlaps the old one at IoU < 0.5: one fp and one fn
    assert task.metric("box_f1").value({}) == 1.0  # nothing to agree on counts as agreement


def test_db_checks_the_declared_layout_against_real_shapes():
    task = DBTextAdapter()
    task.check_outputs({"sigmoid_0.tmp_0": [1, 1, 640, 640]})
    task.check_outputs({"y": ["N", 1, "H", "W"]})
    with pytest.raises(ModelError, match=r"output 'y' has shape \[1x3x8x8\] but the declared layout is db_text") as e:
        task.check_outputs({"y": [1, 3, 8, 8]})
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match=r"\[1, 1, H, W\]"):
        task.decide({"y": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(ConfigError, match="task.options.thresh"):
        DBTextAdapter(thresh=1.5)
    with pytest.raises(ConfigError, match="unknown option 'treshold'"):
        make_adapter("db_text", {"treshold": 0.3})


def test_db_map_sweep_equals_deciding_at_each_value():
    task = DBTextAdapter()
    refs = [task.decide({"m": _prob_map()})]
    other = _prob_map() * np.float32(0.8)
    grid = np.array([0.2, 0.3, 0.4, 0.6])
    fast = task.sweep("thresh", grid, refs, [{"m": other}])
    for j, t in enumerate(grid):
        c = task.agreement(refs[0], task.with_thresholds({"thresh": float(t)}).decide({"m": other}))
        assert (fast["pixel_inter"][0, j], fast["pixel_union"][0, j]) == (c["pixel_inter"], c["pixel_union"])


def test_matching_is_one_to_one_and_label_aware():
    sq = np.array([[[0, 0], [10, 0], [10, 10], [0, 10]]], np.float32)
    two = np.concatenate([sq, sq + 1])
    assert match_count(two, sq) == 1
    assert match_count(sq, sq, pred_labels=[0], truth_labels=[1]) == 0
    assert match_count(sq, sq + 8) == 0


def test_users_can_register_their_own_adapter():
    @register_adapter
    @dataclasses.dataclass(frozen=True, repr=False)
    class HeatmapAdapter(TaskAdapter):
        name: ClassVar[str] = "test_heatmap"
        THRESHOLDS: ClassVar[tuple] = (ThresholdSpec("peak", True, ">", "none", objective="hit"),)
        PRIMARY: ClassVar[str] = "peak"
        AGREEMENT: ClassVar[tuple] = (MetricSpec("hit", "peak agreement", "same", "images"),)
        peak: float = 0.5

        def _decide(self, outputs):
            return empty_decision()

        def agreement(self, ref, got):
            return {"same": float(len(ref) == len(got)), "images": 1.0}

    try:
        a = make_adapter("test_heatmap", {"peak": 0.7})
        assert a.thresholds() == {"peak": 0.7} and a.with_thresholds({"peak": 0.2}).peak == 0.2
        assert a.primary_metric().name == "hit"
    finally:
        ADAPTERS.pop("test_heatmap")
    with pytest.raises(ConfigError, match="not registered"):
        make_adapter("test_heatmap")

"""Binary segmentation adapter: mask, connected regions as items, pixel IoU, threshold sweeps, layouts."""

from __future__ import annotations

import numpy as np
import pytest
from models import const_model, run, shapes

from quantkit.errors import ConfigError, ModelError
from quantkit.note import Transform
from quantkit.tasks import Decision, make_adapter
from quantkit.tasks.segmentation import SegmentationAdapter


def _map() -> np.ndarray:
    p = np.full((32, 48), 0.05, np.float32)
    p[2:10, 3:13] = 0.9            # A: 80 px, mean 0.9
    p[20:26, 30:35] = 0.6          # B: 60 px, mean 0.7
    p[20:26, 35:40] = 0.8
    p[15, 20] = 0.95               # C: 1 px, below min_area
    p[12:17, 30:41] = 0.45         # D: only above thresh 0.4, mean 0.45
    return p


def _xyxy(d: Decision) -> np.ndarray:
    return np.concatenate([d.polygons.min(1), d.polygons.max(1)], axis=1)


@pytest.mark.parametrize("shape", [(1, 1, 32, 48), (1, 32, 48)])
def test_regions_are_components_with_mean_probability(shape):
    m = const_model({"map": _map().reshape(shape)})
    a = make_adapter("segmentation", {})
    a.check_outputs(shapes(m))
    d = a.decide(run(m))
    np.testing.assert_array_equal(_xyxy(d), [[3, 2, 13, 10], [30, 20, 40, 26]])
    np.testing.assert_allclose(d.scores, [0.9, 0.7], atol=1e-6)
    assert d.mask.sum() == 80 + 60 + 1  # the tiny component is in the mask, not an item
    low = a.with_thresholds({"thresh": 0.4}).decide(run(m))
    assert len(low) == 2 and low.mask.sum() == 141 + 55  # D is binarized, but its mean 0.45 < score_thresh
    assert len(a.with_thresholds({"thresh": 0.4, "score_thresh": 0.4}).decide(run(m))) == 3
    assert len(a.replace(min_area=1).decide(run(m))) == 3


def test_logits_with_sigmoid_decide_the_same():
    p = _map()
    m = const_model({"logits": np.log(p / (1 - p))[None, None]})
    a = make_adapter("segmentation", {"sigmoid": True})
    d = a.decide(run(m))
    np.testing.assert_array_equal(_xyxy(d), [[3, 2, 13, 10], [30, 20, 40, 26]])
    assert a.tensor_value(a.spec("thresh"), 0.5) == pytest.approx(0.0)
    assert a.tensor_value(a.spec("score_thresh"), 0.5) is None  # a mean of probabilities has no logit form
    assert a.decision_tensors(shapes(m))[0].lo < 0


def test_multi_channel_map_is_refused_in_one_line():
    with pytest.raises(ModelError) as e:
        make_adapter("segmentation", {}).check_outputs({"seg": [1, 3, 32, 48]})
    msg = str(e.value)
    assert "\n" not in msg and "'seg'" in msg and "[1x3x32x48]" in msg and "segmentation [N, 1, H, W]" in msg
    with pytest.raises(ModelError, match=r"\[1, 2, 8, 8\]"):
        make_adapter("segmentation", {}).decide({"seg": np.zeros((1, 2, 8, 8), np.float32)})
    with pytest.raises(ConfigError, match="min_area"):
        make_adapter("segmentation", {"min_area": 0})


def test_pixel_iou_and_region_counts_by_hand():
    a = SegmentationAdapter()
    ref_mask = np.zeros((4, 4), bool)
    ref_mask[0, :] = ref_mask[1, :2] = ref_mask[3, :4] = True  # 10 px
    got_mask = np.zeros((4, 4), bool)
    got_mask[0, :] = got_mask[2, :2] = True                      # 6 px, 4 shared
    box = np.array([[[0, 0], [4, 0], [4, 1], [0, 1]]], np.float32)
    ref = Decision(np.concatenate([box, box + [0, 3]]), np.ones(2, np.float32), np.zeros(2, np.int64), ref_mask)
    got = Decision(box, np.ones(1, np.float32), np.zeros(1, np.int64), got_mask)
    c = a.agreement(ref, got)
    assert (c["pixel_inter"], c["pixel_union"]) == (4, 12)
    assert a.primary_metric().name == "pixel_iou" and a.primary_metric().value(c) == pytest.approx(1 / 3)
    assert a.metric("box_f1").value(c) == pytest.approx(2 / 3)  # 2*1 / (2*1 + 0 + 1)


def test_thresh_sweep_equals_deciding_at_each_value():
    rng = np.random.default_rng(0)
    fp32 = {"map": _map()[None, None]}
    noisy = [{"map": np.clip(_map() + rng.normal(0, 0.08, _map().shape), 0, 1).astype(np.float32)[None, None]} for _ in range(2)]
    a = SegmentationAdapter()
    refs = [a.decide(fp32)] * 2
    grid = np.array([0.3, 0.5, 0.7])
    sw = a.sweep("thresh", grid, refs, noisy)
    for j, t in enumerate(grid):
        counts = [a.agreement(r, a.with_thresholds({"thresh": float(t)}).decide(o)) for r, o in zip(refs, noisy)]
        assert sw["pixel_inter"][:, j].tolist() == [c["pixel_inter"] for c in counts]
        assert sw["pixel_union"][:, j].tolist() == [c["pixel_union"] for c in counts]


def test_ground_truth_boxes():
    a = SegmentationAdapter()
    t = a.truth({"boxes": [[6, 4, 26, 20, 3]]}, Transform(scale_y=0.5, scale_x=0.5))
    np.testing.assert_array_equal(_xyxy(t), [[3, 2, 13, 10]])
    d = a.decide({"map": _map()[None, None]})
    assert a.metric("recall").value(a.accuracy(t, d)) == 1.0 and a.metric("precision").value(a.accuracy(t, d)) == 0.5

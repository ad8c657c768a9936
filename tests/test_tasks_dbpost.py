"""quantkit.tasks.dbpost, the port of rapidocr's DBPostProcess: the same boxes and scores as rapidocr's own (the
demo extra, which the test extra installs), and the db_text adapter decides without rapidocr importable."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from quantkit.tasks.dbpost import db_boxes


def _maps() -> list[np.ndarray]:
    """Probability maps with text-like blobs: smoothed noise, plus rectangles and a rotated bar."""
    import cv2

    rng = np.random.default_rng(7)
    out = []
    for i in range(6):
        m = cv2.GaussianBlur(rng.random((96, 128)).astype(np.float32), (0, 0), 2.0 + i)
        m = (m - m.min()) / (m.max() - m.min() + 1e-9)
        out.append(m.astype(np.float32))
    bars = np.zeros((120, 160), np.float32)
    cv2.rectangle(bars, (10, 10), (70, 24), 0.9, -1)
    cv2.rectangle(bars, (90, 40), (150, 50), 0.45, -1)
    cv2.fillPoly(bars, [np.array([[20, 90], [120, 60], [124, 72], [24, 102]], np.int32)], 0.8)
    bars[0:3, 0:3] = 0.99  # under MIN_SIZE: dropped
    out.append(bars)
    return out


@pytest.mark.parametrize("score_mode", ["fast", "slow"])
@pytest.mark.parametrize("use_dilation", [True, False])
def test_db_boxes_match_rapidocr(score_mode: str, use_dilation: bool) -> None:
    utils = pytest.importorskip("rapidocr_onnxruntime.ch_ppocr_det.utils")
    opts = dict(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6, score_mode=score_mode,
                use_dilation=use_dilation)
    theirs = utils.DBPostProcess(**opts)
    found = 0
    for prob in _maps():
        boxes, scores = db_boxes(prob, **opts)
        ref_boxes, ref_scores = theirs(prob[None, None], prob.shape)
        assert boxes.dtype == np.int32
        np.testing.assert_array_equal(boxes, ref_boxes)
        assert scores == ref_scores
        found += len(scores)
    assert found > 0


def test_db_text_decides_without_rapidocr(monkeypatch: pytest.MonkeyPatch) -> None:
    from quantkit.tasks.maps import DBTextAdapter

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # import raises ImportError
    prob = _maps()[-1]
    decision = DBTextAdapter()._decide({"map": prob[None, None]})
    assert len(decision) == 3

"""The fallback's metric is the task adapter's primary agreement metric; fallback.json is a typed artifact the
report reads (float nodes and why, latency vs FP32 and deployed, deploy commands)."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import numpy as np
import pytest

from quantkit.artifacts import FallbackResult, KeptNode, LatencyRow
from quantkit.artifacts.record import SetRef
from quantkit.errors import InputFileError
from quantkit.quantize.fallback import agreement_metric, pixel_iou
from quantkit.report import candidate
from quantkit.tasks import TaskConfig


def _rows(boxes_scores: list[tuple[float, float, float, float, float]]) -> dict[str, np.ndarray]:
    """One image of a ``rows`` box head [1, N, 5]: cx, cy, w, h, score."""
    return {"y": np.asarray([boxes_scores], np.float32)}


def test_box_detector_metric_is_box_f1_vs_fp32_as_the_adapter_counts_it():
    task = TaskConfig(adapter="box_detector", options={"objectness": False, "score_thresh": 0.5, "iou_thresh": 0.45}).make()
    metric = agreement_metric(task)
    assert metric.description == "box_f1(box_detector)" and task.primary_metric().name == "box_f1"
    ref = [_rows([(10, 10, 8, 8, 0.9), (40, 40, 8, 8, 0.8)]), _rows([(20, 20, 6, 6, 0.9)])]
    same = metric(ref, ref)
    lost = metric(ref, [_rows([(10, 10, 8, 8, 0.9), (40, 40, 8, 8, 0.1)]), _rows([(20, 20, 6, 6, 0.9)])])  # one box below threshold
    moved = metric(ref, [_rows([(10, 10, 8, 8, 0.9), (60, 60, 8, 8, 0.8)]), _rows([(20, 20, 6, 6, 0.9)])])  # one box elsewhere
    assert same == 1.0
    assert lost == pytest.approx(2 * 2 / (2 * 2 + 0 + 1))  # tp 2, fp 0, fn 1 pooled over the two images
    assert moved == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))


def test_db_text_metric_is_pixel_iou_at_the_tasks_thresh_with_its_bound():
    metric = agreement_metric(TaskConfig(adapter="db_text", options={"thresh": 0.4}).make())
    assert metric.description == pixel_iou(0.4).description and hasattr(metric, "upper_bound")
    a, b = {"y": np.array([[[[0.5, 0.5], [0.0, 0.0]]]])}, {"y": np.array([[[[0.5, 0.3], [0.0, 0.0]]]])}
    assert metric([a], [b]) == pytest.approx(0.5)


def _result(**kw) -> FallbackResult:
    base = dict(met=True, target=0.96, metric="pixel_iou(thresh=0.3)", strategy="float", search="bisect", metric_before=0.93, metric_after=0.97,
                metric_before_per_set={"cam1-day": 0.95, "cam1-night": 0.93}, metric_after_per_set={"cam1-day": 0.98, "cam1-night": 0.97},
                reference_sets=(SetRef(path="reference_sets/cam1-day", name="cam1-day"), SetRef(path="reference_sets/cam1-night", name="cam1-night")),
                kept=tuple(KeptNode(f"Conv_{i}", i, "Conv", "bisection window") for i in range(30)), islands=((0, 30),), transitions=2,
                rounds=(), latency=(LatencyRow("onnxruntime", 1, 5, 140.0, 90.0, 70.0, 91.0, 2.0, 1.3),), record_fingerprint="r" * 64,
                base_record_fingerprint="b" * 64, model_digest="m" * 64)
    return FallbackResult(**{**base, **kw})


def test_fallback_result_is_a_versioned_artifact(tmp_path: Path):
    r = _result()
    r.save(tmp_path)
    assert FallbackResult.load(tmp_path) == r
    data = json.loads((tmp_path / "fallback.json").read_text())
    assert data["schema_version"] == FallbackResult.SCHEMA_VERSION
    (tmp_path / "fallback.json").write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(InputFileError, match="schema_version 99"):
        FallbackResult.load(tmp_path)


def test_report_section_names_float_nodes_latency_and_deploy_commands():
    fb = _result()
    work = Path("work/ppocr_det")
    deploy = candidate.deploy_commands("ppocr_det", work / "quantize/candidate", work / "thresholds/candidate.json", fb,
                                       ["sites/line-3 north", "sites/dock"])
    m = types.SimpleNamespace(fallback=fb, deploy=tuple(deploy), choice=types.SimpleNamespace(deploys=True))
    md = "\n".join(candidate.markdown(m))
    kept = types.SimpleNamespace(fallback=fb, deploy=tuple(deploy), choice=types.SimpleNamespace(deploys=False))
    assert "quantkit bundle" not in "\n".join(candidate.markdown(kept)) and "To deploy it" not in str(candidate.html(kept))
    assert "30 nodes kept in float (1 island, 2 float/8-bit conversions)" in md and "cam1-night 0.930 → 0.970" in md
    assert re.search(r"\d+ nodes, same reason: bisection window \(Conv_0 \(Conv\), ", md) and "6 nodes not named here" in md
    assert "FP32 140.0 ms, candidate 70.0 ms (2.00× FP32); deployed 91.0 ms, candidate 1.30× the deployed speed" in md
    assert "quantkit bundle work/ppocr_det/quantize/candidate --thresholds work/ppocr_det/thresholds/candidate.json" in md
    assert "--golden reference_sets/cam1-day" in md and "--out dist/ppocr_det-candidate" in md
    assert "--site-set 'sites/line-3 north' --site-set sites/dock --params" in md and "cam2-day" not in deploy[1]  # the report's sites
    hidden = "\n".join(candidate.markdown(m, show_latency=False))
    assert "140.0" not in hidden and "report.candidate_latency: false" in hidden
    slow = _result(slower_than_fp32=("onnxruntime@1",))
    assert any("not faster than FP32 on onnxruntime@1" in x for x in candidate.latency_lines(slow))
    assert "<pre>quantkit bundle" in str(candidate.html(m))

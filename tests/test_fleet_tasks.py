"""The fleet is task-generic: a box detector (``box_detector`` adapter, box F1 vs FP32) scores, checks and reports
like the text-map head, with the adapter's own agreement counts per image, pooled as ratios of sums."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fleet_fixtures import make_box_models, make_fleet_tree

from quantkit.errors import ConfigError
from quantkit.fleet import FleetCheckConfig, FleetScoreConfig, check_fleet, register_tree, score_fleet, write_fleet_report
from quantkit.fleet.store import ScoreStore


@pytest.fixture(scope="module")
def boxes(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fleetboxes")
    paths = make_box_models(root / "models")
    tree = make_fleet_tree(root / "images", sites=1, cameras=2, days=4, per_day=2)
    register_tree(tree, root / "manifest.parquet")
    score_fleet(root / "manifest.parquet", paths["intake"], paths["quantized"], paths["thresholds"], paths["calibration_set"],
                root / "scores", FleetScoreConfig(workers=0, model_every=1, clip_fraction=0.0), task="box_detector")
    return {**paths, "root": root, "tree": tree, "scores": root / "scores", "manifest": root / "manifest.parquet"}


def _rows(scores: Path) -> pd.DataFrame:
    store = ScoreStore(scores)
    return pd.concat([store.camera_rows(c) for c in sorted(store.cameras)], ignore_index=True)


def test_rows_hold_the_adapters_own_box_agreement(boxes):
    """Each scored row's counts are the box adapter's agreement counts for that image, recomputed here directly."""
    from quantkit.artifacts import ThresholdSet
    from quantkit.note import ExportNote
    from quantkit.runner import OrtRunner
    from quantkit.tasks import make_adapter

    store = ScoreStore(boxes["scores"])
    assert store.primary["task"] == "box_detector" and store.primary["name"] == "box_f1"
    rows = _rows(boxes["scores"])
    assert len(rows) == 16 and rows["scored"].all() and rows["n_det_fp32"].sum() > 0
    ts = ThresholdSet.load(boxes["thresholds"])
    fp32, int8 = make_adapter(ts.adapter, ts.adapter_options(fp32=True)), make_adapter(ts.adapter, ts.adapter_options())
    metric = int8.primary_metric()
    pre = ExportNote.load(boxes["intake"] / "export_note.json").preprocessing
    with OrtRunner(boxes["intake"] / "model.onnx") as rf, OrtRunner(boxes["quantized"] / "model_int8.onnx") as rq:
        for row in rows.head(4).itertuples():
            x, _ = pre.load(store.manifest_root / row.uri)
            ref, got = fp32.decide(rf.infer({"x": x})), int8.decide(rq.infer({"x": x}))
            counts = int8.agreement(ref, got)
            assert (row.n_det_fp32, row.n_det_int8) == (len(ref), len(got))
            assert (row.agree_num, row.agree_den) == (counts[metric.num], counts[metric.den])
            assert row.agreement == pytest.approx(metric.value(counts), abs=1e-6)


def test_check_pools_box_f1_as_a_ratio_of_sums_and_reports_it(boxes, tmp_path):
    rows = _rows(boxes["scores"])
    res = check_fleet(boxes["scores"], boxes["calibration_set"], FleetCheckConfig(reference_windows=2, repeats=200))
    den = rows["agree_den"].sum()
    assert res.fleet["agreement"] == pytest.approx(rows["agree_num"].sum() / den if den else 1.0)
    assert np.isfinite(res.fleet["agreement"]) and res.primary["label"] == "box F1 vs FP32"
    write_fleet_report(res, tmp_path / "index.html")
    html = (tmp_path / "index.html").read_text()
    assert "box F1 vs FP32" in html and "pixel IoU" not in html


def test_thresholds_of_another_task_are_refused(boxes, tmp_path):
    with pytest.raises(ConfigError, match=r"task 'box_detector' differs from the scored model's task.adapter 'db_text'"):
        score_fleet(boxes["manifest"], boxes["intake"], boxes["quantized"], boxes["thresholds"], boxes["calibration_set"],
                    tmp_path / "s", FleetScoreConfig(workers=0), task="db_text")
    assert not (tmp_path / "s").exists()


def test_fleet_model_must_be_one_of_models(tmp_path, run_cli):
    from quantkit.fleet.config import load_fleet_config

    params = tmp_path / "params.yaml"
    params.write_text("models:\n  ppocr_det: {file: a.onnx}\n  ddddocr_det: {file: b.onnx}\nfleet:\n  model: yolo\n")
    with pytest.raises(ConfigError, match=r"params.yaml:fleet.model: 'yolo' is not under 'models'; use one of ddddocr_det, ppocr_det"):
        load_fleet_config(params)
    code, out, err = run_cli(["fleet", "score", str(tmp_path / "m.parquet"), "--calibration-set", str(tmp_path), "--params", str(params),
                              "--out", str(tmp_path / "s")])
    assert code == 2 and "fleet.model: 'yolo' is not under 'models'" in err and "Traceback" not in err
    params.write_text(params.read_text().replace("model: yolo", "model: ddddocr_det"))
    assert load_fleet_config(params).model == "ddddocr_det"

"""quantkit fleet score: same results with 0 and 2 workers, failed images and killed workers reported, resumable."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_fixtures import make_fleet_tree, make_models

from quantkit.fleet import FleetScoreConfig, register_tree, score_fleet
from quantkit.fleet.store import ScoreStore


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fleet")
    paths = make_models(root / "models")
    tree = make_fleet_tree(root / "images")
    bad = tree / "site-a" / "a01" / "2025-03-04" / "120000.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n broken")  # passes registration only with --verify none
    register_tree(tree, root / "manifest.parquet", verify="none")
    return {**paths, "manifest": root / "manifest.parquet", "root": root, "bad": bad}


def _score(fleet: dict[str, Path], out: Path, workers: int, **kw) -> object:
    cfg = FleetScoreConfig(workers=workers, model_every=2, clip_fraction=0.3, **kw)
    return score_fleet(fleet["manifest"], fleet["intake"], fleet["quantized"], fleet["thresholds"], fleet["calibration_set"], out, cfg)


def _rows(out: Path):
    store = ScoreStore(out)
    import pandas as pd

    return pd.concat([store.camera_rows(c).assign(camera=c) for c in sorted(store.cameras)], ignore_index=True).drop(columns=["date"])


def test_zero_and_two_workers_give_identical_rows_and_summaries(fleet, tmp_path):
    a = _score(fleet, tmp_path / "w0", workers=0)
    b = _score(fleet, tmp_path / "w2", workers=2)
    assert a.shards == b.shards == 12 and a.images == b.images == 37
    assert a.scored == b.scored > 0
    ra, rb = _rows(tmp_path / "w0"), _rows(tmp_path / "w2")
    assert ra.equals(rb)
    assert ra["scored"].sum() == a.scored and ra["clip_rate"].notna().sum() > 0
    assert (tmp_path / "w0" / "summary.json").read_bytes() == (tmp_path / "w2" / "summary.json").read_bytes()
    for f in sorted((tmp_path / "w0" / "shards").glob("*.json")):
        assert f.read_bytes() == (tmp_path / "w2" / "shards" / f.name).read_bytes()


def test_unreadable_image_is_an_error_row_and_counted(fleet, tmp_path):
    res = _score(fleet, tmp_path / "out", workers=0)
    assert res.errors == 1 and res.images == 37
    rows = _rows(tmp_path / "out")
    bad = rows[rows["error"].notna()]
    assert list(bad["uri"].str.endswith("a01/2025-03-04/120000.png")) == [True]
    assert "corrupt or truncated" in bad["error"].iloc[0] or "not an image" in bad["error"].iloc[0]
    store = ScoreStore(tmp_path / "out")
    assert store.summary["errors"]["count"] == 1 and store.summary["errors"]["examples"][0]["uri"].endswith("120000.png")
    assert store.group("camera", "a01").errors == 1 and store.group("fleet", "").errors == 1


def test_rerun_skips_done_shards_and_rescores_a_changed_one(fleet, tmp_path):
    out = tmp_path / "out"
    first = _score(fleet, out, workers=0)
    assert first.shards_run == 12
    again = _score(fleet, out, workers=0)
    assert (again.shards_run, again.shards_skipped) == (0, 12)
    # another option (model_every) changes every shard's key: all re-run, the old files are pruned
    other = _score(fleet, out, workers=0, window_hours=12)
    assert other.shards_run == 12 and len(list((out / "shards").glob("*.json"))) == 12
    assert len(list((out / "rows").rglob("*.parquet"))) == 12


def test_killed_worker_is_retried_and_reported(fleet, tmp_path):
    import cloudpickle
    from distributed import Client, LocalCluster

    import killer_plugin

    cloudpickle.register_pickle_by_value(killer_plugin)
    marker = tmp_path / "killed"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(killer_plugin.KillOnce(str(marker)), name="kill-once")
        cfg = FleetScoreConfig(model_every=2, ort_threads=1)
        res = score_fleet(fleet["manifest"], fleet["intake"], fleet["quantized"], fleet["thresholds"], fleet["calibration_set"],
                          tmp_path / "out", cfg, scheduler=cluster.scheduler_address)
    assert marker.exists()  # a worker really died mid-task
    assert res.shards_run == 12 and res.images == 37 and res.errors == 1
    assert len(res.workers_lost) == 1
    assert _rows(tmp_path / "out").shape[0] == 37


def test_cli_score_json_and_bad_scheduler(fleet, tmp_path, capsys):
    from quantkit.cli.main import main

    args = ["fleet", "score", str(fleet["manifest"]), "--fp32", str(fleet["intake"]), "--quantized", str(fleet["quantized"]),
            "--thresholds", str(fleet["thresholds"]), "--calibration-set", str(fleet["calibration_set"])]
    assert main([*args, "--workers", "0", "--out", str(tmp_path / "o"), "--json"]) == 0
    assert '"shards": 12' in capsys.readouterr().out
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        assert main([*args, "--scheduler", "tcp://127.0.0.1:9", "--out", str(tmp_path / "p")]) == 2
    assert "no Dask scheduler answers" in capsys.readouterr().err


def test_a_shard_interrupted_by_closing_sessions_is_not_saved_and_a_rerun_scores_it(fleet, tmp_path, monkeypatch):
    """Ctrl-C tears the worker's sessions down while a shard is scored: its images must not be saved as failures."""
    from quantkit.fleet.scorer import Scorer

    real = Scorer.score_image

    def closing(self, path, **kw):
        row = real(self, path, **kw)
        self.closed = True  # what close() does when the worker shuts down mid-shard
        return row

    monkeypatch.setattr(Scorer, "score_image", closing)
    out = tmp_path / "scores"
    with pytest.raises(Exception, match="closed its sessions while scoring"):
        _score(fleet, out, 0)
    assert not list(out.glob("rows/**/*.parquet")) if out.exists() else True
    monkeypatch.setattr(Scorer, "score_image", real)
    _score(fleet, out, 0)
    clean = tmp_path / "clean"
    _score(fleet, clean, 0)
    assert _rows(out).equals(_rows(clean))


def test_run_info_outside_the_scores_keeps_them_the_same_bytes(fleet, tmp_path):
    """Timings go to --run-info: two runs into fresh folders give byte-identical score folders (a DVC output)."""
    import hashlib

    def digest(folder: Path) -> dict[str, str]:
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}

    cfg = FleetScoreConfig(workers=0, model_every=2, clip_fraction=0.3, kll_k=8)  # shards exact, site/fleet rollups not
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        score_fleet(fleet["manifest"], fleet["intake"], fleet["quantized"], fleet["thresholds"], fleet["calibration_set"], out, cfg,
                    run_info=tmp_path / "machine" / f"{out.name}.json")
    assert not (a / "run.json").exists() and (tmp_path / "machine" / "a.json").is_file()
    assert digest(a) == digest(b)
    store = ScoreStore(a)
    fleet_summary = store.group("fleet", "")
    assert fleet_summary.images > 8 and "brightness_mean" in fleet_summary.kll  # merged again from the cameras
    assert 0 < fleet_summary.quantile("brightness_mean", 0.5) < 255


def test_scores_are_the_same_bytes_wherever_the_project_is_cloned(fleet, tmp_path, monkeypatch):
    """summary.json names the image root relative to the scores folder: two clones at paths of different length
    give the same bytes (an absolute root made every clone's dvc.lock differ), and the store still finds the images."""
    import shutil

    from quantkit.fleet.manifest import resolve_uri

    outs = []
    for clone in (tmp_path / "c1", tmp_path / "a-longer-clone-path"):
        shutil.copytree(fleet["root"] / "images", clone / "fleet" / "images")
        shutil.copy(fleet["manifest"], clone / "fleet" / "manifest.parquet")
        monkeypatch.chdir(clone)  # as `dvc repro` runs it: relative paths from the project folder
        score_fleet("fleet/manifest.parquet", fleet["intake"], fleet["quantized"], fleet["thresholds"], fleet["calibration_set"],
                    "work/scores", FleetScoreConfig(workers=0, model_every=2, clip_fraction=0.3), run_info=clone / "run.json")
        out = clone / "work" / "scores"
        outs.append(out)
        store = ScoreStore(out)
        uri = store.camera_rows("a01")["uri"].iloc[0]
        assert Path(resolve_uri(str(uri), store.manifest_root)).resolve().is_relative_to(clone.resolve())
        assert Path(resolve_uri(str(uri), store.manifest_root)).is_file()
    files = [sorted(p.relative_to(o).as_posix() for p in o.rglob("*") if p.is_file()) for o in outs]
    assert files[0] == files[1] and "summary.json" in files[0]
    for name in files[0]:  # every file of the DVC output, rows with the error message included
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    errors = ScoreStore(outs[0]).summary["errors"]["examples"]  # the broken image, named by its URI
    assert errors and str(tmp_path) not in errors[0]["error"] and errors[0]["uri"] in errors[0]["error"]


def test_a_calibration_set_other_than_the_records_is_refused(fleet, tmp_path):
    """The image statistics' baseline is the deployed model's own calibration set: another set is refused, naming both."""
    import shutil

    from PIL import Image

    from quantkit.calibset import register_set
    from quantkit.errors import BindingMismatchError

    other = tmp_path / "other"
    shutil.copytree(fleet["calibration_set"] / "images", other / "images")
    Image.new("RGB", (32, 32), (200, 10, 10)).save(other / "images" / "0000.png")
    register_set(other, name="other", kind="calibration", camera="cam1", lighting="day")
    with pytest.raises(BindingMismatchError, match="set other .* is not the set .* was calibrated on .calib"):
        score_fleet(fleet["manifest"], fleet["intake"], fleet["quantized"], fleet["thresholds"], other, tmp_path / "scores", FleetScoreConfig())
    assert not (tmp_path / "scores").exists()

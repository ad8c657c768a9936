"""End to end: the real `dvc repro` pipeline on a reduced demo (fewer, smaller images).

Runs the same dvc.yaml as the README's quickstart in a scratch git repository, then checks what the
issue promises: the report exists, a second `dvc repro` does nothing, and changing the calibration
method invalidates calibration and what depends on it, but not the data or the intake.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(args, cwd=cwd, env=env, text=True, capture_output=True, timeout=1500)


def reduced_params() -> dict:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    size = [160, 160]
    params["demo"]["input_size"] = size
    params["models"]["ppocr_det"]["intake"]["input_size"] = size  # the YOLOX detector's input is fixed at 416 by its export
    params["thresholds"]["min_agreement"] = 0.1  # 160 px images are far below the detectors' working size: agreement is low
    counts = {"calibration": 8, "reference": 6, "site": 6}
    for spec in params["demo"]["sets"].values():
        spec["count"] = counts[spec["kind"]]
    fleet = params["fleet"]
    fleet["demo"].update(sites=2, lines_per_site=1, cameras_per_site=2, days=4, images_per_day=3, image_size=[64, 64],
                         events=[{"name": "refocus", "kind": "defocus", "camera": "a02", "start_day": 3, "defocus_px": 3.0}])
    fleet["score"].update(model_every=3, clip_fraction=0.0)
    fleet["check"].update(reference_windows=2, repeats=200)
    params["candidate"]["images_per_set"] = 4
    params["candidate"]["reference_union"] = {"from": params["candidate"]["reference_sets"]}  # every image: the reduced sets have 6
    params["fallback"].update(prune=0, max_reference_images=3, latency={"runtimes": ["onnxruntime"], "threads": [1], "repeats": 3})
    params["measure"].update(runtimes=["onnxruntime"], threads=[1], repeats=3, images=1)
    # CI time: the settings below only change how much each stage samples, not what it does
    params["verify"].update(max_images=2)
    params["bundle"].update(golden_count=2)
    params["drift"].update(repeats=5, clip_images=2)
    params["thresholds"]["operating_point"].update(bootstrap_resamples=200)
    params["report"].update(examples_per_site=1)
    return params


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / ".dvc", repo / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache"))
    (repo / "params.yaml").write_text(yaml.safe_dump(reduced_params(), sort_keys=False))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "-c", "user.email=ci@quantkit", "-c", "user.name=ci", "commit", "-qm", "init"]):
        assert _run(cmd, repo).returncode == 0
    result = _run(["dvc", "repro"], repo)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return repo


def test_repro_writes_report_and_metrics_for_both_models(pipeline: Path):
    html = (pipeline / "reports" / "shift_report.html").read_text()
    assert "<img" in html and "http://" not in html.split("<body", 1)[1].split("</body>")[0].replace("http://www.w3.org", "")
    assert "Model ppocr_det" in html and "Model ddddocr_det" in html and "object detection (boxes)" in html
    metrics = json.loads((pipeline / "reports" / "metrics.json").read_text())
    assert set(metrics) == {"ppocr_det", "ddddocr_det"}
    assert set(metrics["ppocr_det"]) >= {"cam1-day", "cam1-night", "cam2-day"}
    assert "agreement.pixel_iou" in metrics["ppocr_det"]["cam1-day"]["deployed"]
    assert "agreement.box_f1" in metrics["ddddocr_det"]["cam1-day"]["deployed"]
    assert "agreement.pixel_iou" not in metrics["ddddocr_det"]["cam1-day"]["deployed"]
    for model in ("ppocr_det", "ddddocr_det"):
        record = json.loads((pipeline / "work" / model / "quantize" / "deployed" / "record.json").read_text())
        assert record["tensors"] and record["calibration_set"]["name"] == "cam1-day"
        thresholds = json.loads((pipeline / "work" / model / "thresholds" / "deployed.json").read_text())
        assert thresholds["binding"]["record_fingerprint"] == record["fingerprint"]
    box = json.loads((pipeline / "work" / "ddddocr_det" / "thresholds" / "deployed.json").read_text())
    assert box["adapter"] == "box_detector" and "score_thresh" in box["integer_domain"]
    fleet = json.loads((pipeline / "reports" / "fleet" / "metrics.json").read_text())
    assert fleet["cameras"] == 4 and fleet["images"] == 2 * 2 * 4 * 3 and "alert_recall" in fleet
    assert "Camera × day" in (pipeline / "reports" / "fleet" / "index.html").read_text()


def test_second_repro_does_nothing(pipeline: Path):
    status = _run(["dvc", "status", "--json"], pipeline)
    assert status.returncode == 0 and json.loads(status.stdout) == {}


def test_changing_method_reruns_only_calibration_and_downstream(pipeline: Path):
    params_path = pipeline / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    params["quantize"]["method"] = "percentile"
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        status = json.loads(_run(["dvc", "status", "--json"], pipeline).stdout)
    finally:
        params_path.write_text(original)
    changed = {name.split("@")[0] for name in status}
    assert "quantize" in changed
    assert not changed & {"demo_model", "demo_set", "intake"}


def test_candidate_is_the_recommended_recalibration_and_its_target_reruns_only_the_fallback(pipeline: Path):
    for model in ("ppocr_det", "ddddocr_det"):
        work = pipeline / "work" / model
        composed = json.loads((work / "calibsets" / "candidate" / "manifest.json").read_text())
        names = [c["name"] for c in composed["generator"]["composition"]]
        assert names[0] == "cam1-day" and set(names) <= {"cam1-day", "cam1-night"}  # the deployed set + the flagged conditions' sets
        fb = json.loads((work / "quantize" / "candidate" / "fallback.json").read_text())
        record = json.loads((work / "quantize" / "candidate" / "record.json").read_text())
        thresholds = json.loads((work / "thresholds" / "candidate.json").read_text())
        assert fb["record_fingerprint"] == record["fingerprint"] == thresholds["binding"]["record_fingerprint"]
        assert {s["name"] for s in fb["reference_sets"]} == {"cam1-day", "cam1-night"}
        assert fb["latency"] == [] and fb["seconds"] == {} and {r["seconds"] for r in fb["rounds"]} == {0.0}  # timings: false
        assert fb["metric"].startswith("pixel_iou" if model == "ppocr_det" else "box_f1")  # the task adapter's primary metric
    speed = json.loads((pipeline / "reports" / "machine" / "measurements.json").read_text())  # the measure stage, beside the report
    timed = {(r["model"], r["variant"]) for r in speed["latency"]}
    assert timed == {(m, v) for m in ("ppocr_det", "ddddocr_det") for v in ("fp32", "deployed", "candidate")}
    params_path = pipeline / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    params["fallback"]["target"] = 0.5
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        dry = _run(["dvc", "repro", "--dry"], pipeline)
    finally:
        params_path.write_text(original)
    ran = {line.split("'")[1].split("@")[0] for line in dry.stdout.splitlines() if line.startswith("Running stage")}
    assert "fallback" in ran and not ran & {"compose_candidate", "quantize_candidate", "quantize", "intake", "demo_set", "drift"}


def test_a_forced_rerun_changes_no_committed_file(pipeline: Path):
    """Every output is deterministic (no timings, no git revision): re-running the whole pipeline from scratch
    rewrites the same bytes, so the quickstart leaves `git status` clean."""
    git = ["git", "-c", "user.email=ci@quantkit", "-c", "user.name=ci"]
    assert _run([*git, "add", "-A"], pipeline).returncode == 0
    assert _run([*git, "commit", "-qm", "results"], pipeline).returncode in (0, 1)
    forced = _run(["dvc", "repro", "--force", "report"], pipeline)
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    assert _run(["git", "status", "--porcelain"], pipeline).stdout == ""


def test_dvc_exp_run_over_calibration_methods(pipeline: Path):
    """`dvc exp run -S quantize.method=...` re-runs calibration in a temporary copy and records its metrics."""
    assert _run(["git", "-c", "user.email=ci@quantkit", "-c", "user.name=ci", "commit", "-qam", "lock"], pipeline).returncode in (0, 1)
    run = _run(["dvc", "exp", "run", "--temp", "-S", "quantize.method=percentile", "-n", "percentile", "report"], pipeline)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    shown = _run(["dvc", "exp", "show", "--json"], pipeline)
    assert shown.returncode == 0 and '"percentile"' in shown.stdout and "reports/metrics.json" in shown.stdout
    status = _run(["dvc", "status", "--json"], pipeline)
    assert json.loads(status.stdout) == {}  # the workspace is untouched
    assert _run(["git", "status", "--porcelain"], pipeline).stdout == ""  # params.yaml and the threshold history too


def test_dvc_push_pull_round_trip(pipeline: Path):
    """The demo's local remote holds every output: delete them and the cache, pull, and nothing changed."""
    assert _run(["dvc", "push", "-q"], pipeline).returncode == 0
    shutil.rmtree(pipeline / ".dvc" / "cache")
    for out in ("calibration_sets/cam1-day", "work/ppocr_det/quantize/deployed", "models"):
        shutil.rmtree(pipeline / out)
    pulled = _run(["dvc", "pull", "-q"], pipeline)
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    assert (pipeline / "calibration_sets" / "cam1-day" / "manifest.json").is_file()
    status = _run(["dvc", "status", "--json"], pipeline)
    assert json.loads(status.stdout) == {}


def test_recalibration_refuses_old_thresholds_and_shows_in_metrics_diff(pipeline: Path):
    """The recalibration story: point the deployed calibration at cam1-night, commit, `dvc repro`."""
    git = ["git", "-c", "user.email=ci@quantkit", "-c", "user.name=ci"]
    assert _run([*git, "add", "-A"], pipeline).returncode == 0
    assert _run([*git, "commit", "-qm", "deployed on cam1-day"], pipeline).returncode == 0
    old_thresholds = pipeline / "old-deployed-thresholds.json"
    shutil.copy(pipeline / "work" / "ppocr_det" / "thresholds" / "deployed.json", old_thresholds)

    params = yaml.safe_load((pipeline / "params.yaml").read_text())
    params["calibrations"]["deployed"] = {"calibration_set": "calibration_sets/cam1-night", "reference_set": "reference_sets/cam1-night"}
    (pipeline / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = _run(["dvc", "repro", "report"], pipeline)  # the report and what it reads (not bundle, verify, fleet)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Running stage 'demo_set" not in result.stdout and "Running stage 'intake" not in result.stdout

    record = json.loads((pipeline / "work" / "ppocr_det" / "quantize" / "deployed" / "record.json").read_text())
    assert record["calibration_set"]["name"] == "cam1-night"

    refused = _run(
        ["quantkit", "evaluate", "site_sets/cam1-night", "--fp32", "work/ppocr_det/intake", "--deployed", "work/ppocr_det/quantize/deployed",
         "--deployed-thresholds", str(old_thresholds), "--params", "params.yaml", "--model", "ppocr_det", "--out", "work/refused"],
        pipeline,
    )
    assert refused.returncode == 3
    assert "cam1-day" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not (pipeline / "work" / "refused").exists()

    history = (pipeline / "thresholds" / "history-ppocr_det-deployed.jsonl").read_text().splitlines()
    assert len(history) >= 2
    assert "cam1-day" in history[0] and "cam1-night" in history[-1]

    diff = _run(["dvc", "metrics", "diff", "HEAD", "--json"], pipeline)
    assert diff.returncode == 0, diff.stderr
    changed = json.loads(diff.stdout)["reports/metrics.json"]
    assert any(key.startswith("ppocr_det.cam1-night.") for key in changed)

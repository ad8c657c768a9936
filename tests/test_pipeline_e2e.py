"""End to end: the real `dvc repro` pipeline on a reduced demo (fewer, smaller images).

Runs the same dvc.yaml as the README's quickstart in a scratch git repository, with a user's own model beside the
two demo models (a small classifier built here, with its own labelled calibration, reference and site sets, added to
params.yaml `models` and nothing else), then checks what the issues promise: the report exists with every model, the
user's model is calibrated on its own set and judged only on its own site sets, the user's file is untouched, a second
`dvc repro` does nothing, editing the user's site set re-runs only its stages, changing the calibration method
invalidates calibration and what depends on it but not the data or the intake, and removing the model from params
removes it from the report and leaves the demo's metrics as they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import hashlib

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
USER_MODEL = "tiny_cls"
USER_FILE = f"models/{USER_MODEL}.onnx"
SEG_MODEL = "red_seg"  # a second user model: another task, another input size, its own sets
SEG_FILE = f"models/{SEG_MODEL}.onnx"
DEMO_MODELS = ("ppocr_det", "ddddocr_det")


USER_SIZE = (48, 192)  # a text-line classifier's input, unlike the demo detectors' and the segmentation model's


def user_model(size: tuple[int, int] = USER_SIZE) -> bytes:
    """A user's own classifier, x [1,3,H,W] (RGB in [0, 1]; 48x192 here) -> probs [1,3]: which colour channel dominates the
    image (Conv 1x1 -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax), so FP32 fires on the demo images."""
    mix = (np.eye(3) * 1.2 - 0.1).astype(np.float32).reshape(3, 3, 1, 1)
    logits = (30.0 * (np.eye(3) * 1.5 - 0.5)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="mix"), helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"], name="gap"), helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["z"], name="fc", transB=1), helper.make_node("Softmax", ["z"], ["probs"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "tiny_cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *size])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 3])],
                              [numpy_helper.from_array(mix, "w1"), numpy_helper.from_array(logits, "w2"),
                               numpy_helper.from_array(np.zeros(3, np.float32), "b2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="a user")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def user_sets(repo: Path) -> None:
    """The user's own registered sets, made for the classifier (RGB patches, each dominated by one channel, labelled
    with that class), under data/<model>/<kind>/{day,night}: night is darker and noisier."""
    from PIL import Image

    rng = np.random.default_rng(5)
    for kind, n in (("calibration", 6), ("reference", 6), ("site", 6)):
        for cond, level in (("day", 190), ("night", 70)):
            folder = repo / "data" / USER_MODEL / kind / cond
            (folder / "images").mkdir(parents=True)
            labels = {}
            for i in range(n):
                img = rng.normal(level * 0.3, 8 if cond == "day" else 20, (48, 48, 3))
                img[..., i % 3] += level
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / "images" / f"{i:02d}.png")
                labels[f"images/{i:02d}.png"] = {"class": i % 3}
            (repo / f"labels-{kind}-{cond}.json").write_text(json.dumps(labels))
            r = _run(["quantkit", "calibset", "register", str(folder), "--name", cond, "--kind", kind, "--lighting", cond,
                      "--camera", "line1", "--labels", str(repo / f"labels-{kind}-{cond}.json")], repo)
            assert r.returncode == 0, r.stderr
            (repo / f"labels-{kind}-{cond}.json").unlink()


def seg_model() -> bytes:
    """A user's segmentation model, x [1,3,96,128] (RGB in [0, 1]) -> mask [1,1,96,128]: the probability that a pixel
    is red (Conv 1x1 -> Sigmoid), so FP32 finds the red marks painted on the user's images."""
    w = np.array([8.0, -4.0, -4.0], np.float32).reshape(1, 3, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["z"], name="redness"), helper.make_node("Sigmoid", ["z"], ["mask"], name="prob")]
    graph = helper.make_graph(nodes, "red_seg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 96, 128])],
                              [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 96, 128])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([-1.6], np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="a user")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def seg_sets(repo: Path) -> None:
    """The segmentation model's own sets: grey scenes with 1-3 red marks (labelled as boxes), day and dusk."""
    from PIL import Image

    rng = np.random.default_rng(9)
    for kind in ("calibration", "reference", "site"):
        for cond, level in (("day", 170), ("dusk", 90)):
            folder = repo / "data" / SEG_MODEL / kind / cond
            (folder / "images").mkdir(parents=True)
            labels = {}
            for i in range(5):
                img = np.clip(rng.normal(level, 12, (120, 160, 3)), 0, 255)
                boxes = []
                for _ in range(1 + i % 3):
                    x0, y0 = int(rng.integers(5, 120)), int(rng.integers(5, 85))
                    img[y0:y0 + 24, x0:x0 + 30] = (min(255, level + 80), level * 0.2, level * 0.2)
                    boxes.append([x0, y0, x0 + 30, y0 + 24, 0])
                Image.fromarray(img.astype(np.uint8)).save(folder / "images" / f"{i:02d}.png")
                labels[f"images/{i:02d}.png"] = {"boxes": boxes}
            (repo / "labels.json").write_text(json.dumps(labels))
            r = _run(["quantkit", "calibset", "register", str(folder), "--name", cond, "--kind", kind, "--lighting", cond,
                      "--camera", "line2", "--labels", str(repo / "labels.json")], repo)
            assert r.returncode == 0, r.stderr
            (repo / "labels.json").unlink()


def models_add(repo: Path) -> None:
    """The two user models declared as the README says: `quantkit models add ... --calibration-set ... --reference-set
    ... --site-set ...`, each with its own sets."""
    def own(model: str, conds: tuple[str, str]) -> list[str]:
        return [a for kind, flag in (("calibration", "--calibration-set"), ("reference", "--reference-set"), ("site", "--site-set"))
                for c in conds for a in (flag, f"data/{model}/{kind}/{c}")]

    norm = ["--scale", "1/255", "--mean", "0", "--std", "1", "--resize-policy", "stretch", "--params", "params.yaml"]
    for args in (["quantkit", "models", "add", USER_MODEL, USER_FILE, "--adapter", "classifier", "--option", "cls_thresh=0.5",
                  *norm, *own(USER_MODEL, ("day", "night"))],
                 ["quantkit", "models", "add", SEG_MODEL, SEG_FILE, "--adapter", "segmentation", *norm, *own(SEG_MODEL, ("day", "dusk"))]):
        r = _run(args, repo)
        assert r.returncode == 0, r.stdout + r.stderr


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    params["candidate"].update(images_per_set=4, reference_images_per_set=6)  # every image: the reduced sets have 6
    params["fallback"].update(prune=0, max_reference_images=3, latency={"runtimes": ["onnxruntime"], "threads": [1], "repeats": 3})
    params["measure"].update(runtimes=["onnxruntime"], threads=[1], repeats=3, images=1)
    # CI time: the settings below only change how much each stage samples, not what it does
    params["verify"].update(max_images=2)
    # one target runtime, with a placement other than the record's, so place/bind_target/bundle/verify run once per model
    # and re-place the ranges; verified on ONNX Runtime for CI's time (OpenVINO's verification: tests/test_bundle_*)
    params["targets"] = {"onnxruntime": {"placement": "openvino"}}
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
    (repo / "models").mkdir()
    (repo / USER_FILE).write_bytes(user_model())  # the user's own files, committed to git (or `dvc add`ed) by the user
    (repo / SEG_FILE).write_bytes(seg_model())
    user_sets(repo)  # and the user's own image sets, likewise
    seg_sets(repo)
    models_add(repo)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "-c", "user.email=ci@quantkit", "-c", "user.name=ci", "commit", "-qm", "init"]):
        assert _run(cmd, repo).returncode == 0
    result = _run(["dvc", "repro"], repo)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return repo


def test_users_model_runs_through_every_stage_and_its_file_is_untouched(pipeline: Path):
    assert sha256(pipeline / USER_FILE) == hashlib.sha256(user_model()).hexdigest()  # byte-identical after `dvc repro`
    assert _run(["git", "status", "--porcelain", USER_FILE], pipeline).stdout == ""
    lock = yaml.safe_load((pipeline / "dvc.lock").read_text())["stages"]
    per_model = {name.split("@")[0] for name in lock if "@" in name and not name.startswith(("demo_", "fleet"))}
    for model in (USER_MODEL, SEG_MODEL):
        ran_for_user = {name.split("@")[0] for name in lock if f"@{model}" in name}
        assert ran_for_user == per_model, per_model - ran_for_user
    assert not any(USER_FILE in str(out) for stage in lock.values() for out in stage.get("outs", []))  # a dependency, never an output
    html = (pipeline / "reports" / "shift_report.html").read_text()
    assert f"Model {USER_MODEL}" in html and "classification" in html
    metrics = json.loads((pipeline / "reports" / "metrics.json").read_text())
    assert "agreement.top1" in metrics[USER_MODEL]["day"]["deployed"] and "night" in metrics[USER_MODEL]
    assert not {"cam1-day", "cam1-night", "cam2-day"} & set(metrics[USER_MODEL])  # judged only on its own site sets
    record = json.loads((pipeline / "work" / "models" / USER_MODEL / "quantize" / "deployed" / "record.json").read_text())
    assert record["calibration_set"]["path"] == f"data/{USER_MODEL}/calibration/day"  # calibrated on its own set
    seg = json.loads((pipeline / "work" / "models" / SEG_MODEL / "quantize" / "deployed" / "record.json").read_text())
    assert seg["calibration_set"]["path"] == f"data/{SEG_MODEL}/calibration/day" and set(metrics[SEG_MODEL]) >= {"day", "dusk"}
    assert "agreement.pixel_iou" in metrics[SEG_MODEL]["dusk"]["deployed"] and "cam1-day" not in metrics[SEG_MODEL]
    for stage, entry in lock.items():  # each model's stages read its own sets only
        deps = {d["path"] for d in entry.get("deps", [])}
        owner = next((m for m in (USER_MODEL, SEG_MODEL) if f"@{m}" in stage), None)
        data = {d for d in deps if d.startswith(("data/", "calibration_sets", "reference_sets", "site_sets"))}
        assert all(d.startswith(f"data/{owner}/") for d in data) if owner else not any(d.startswith("data/") for d in data), stage
    speed = json.loads((pipeline / "reports" / "machine" / USER_MODEL / "measurements.json").read_text())
    assert {r["variant"] for r in speed["latency"]} == {"fp32", "deployed", "candidate"}


def test_repro_writes_report_and_metrics_for_every_model(pipeline: Path):
    html = (pipeline / "reports" / "shift_report.html").read_text()
    assert "<img" in html and "http://" not in html.split("<body", 1)[1].split("</body>")[0].replace("http://www.w3.org", "")
    assert "Model ppocr_det" in html and "Model ddddocr_det" in html and "object detection (boxes)" in html
    metrics = json.loads((pipeline / "reports" / "metrics.json").read_text())
    assert set(metrics) == {*DEMO_MODELS, USER_MODEL, SEG_MODEL}
    assert set(metrics["ppocr_det"]) >= {"cam1-day", "cam1-night", "cam2-day"}
    assert "agreement.pixel_iou" in metrics["ppocr_det"]["cam1-day"]["deployed"]
    assert "agreement.box_f1" in metrics["ddddocr_det"]["cam1-day"]["deployed"]
    assert "agreement.pixel_iou" not in metrics["ddddocr_det"]["cam1-day"]["deployed"]
    for model in ("ppocr_det", "ddddocr_det"):
        record = json.loads((pipeline / "work" / "models" / model / "quantize" / "deployed" / "record.json").read_text())
        assert record["tensors"] and record["calibration_set"]["name"] == "cam1-day"
        thresholds = json.loads((pipeline / "work" / "models" / model / "thresholds" / "deployed.json").read_text())
        assert thresholds["binding"]["record_fingerprint"] == record["fingerprint"]
        # the target runtime's own file: the deployed record's ranges, OpenVINO's placement, its own thresholds and bundle
        target = pipeline / "work" / "models" / model / "targets" / "onnxruntime"
        placed = json.loads((target / "quantize" / "record.json").read_text())
        assert placed["config"]["placement"] == "openvino" and placed["calibration"]["ranges_from"] == record["fingerprint"]
        assert json.loads((target / "thresholds.json").read_text())["binding"]["record_fingerprint"] == placed["fingerprint"]
        verification = json.loads((target / "verify.json").read_text())
        assert verification["record_fingerprint"] == placed["fingerprint"] and [r["runtime"] for r in verification["runtimes"]] == ["onnxruntime"]
        assert (pipeline / "dist" / model / "onnxruntime" / "bundle.json").is_file()
    assert "bundle for onnxruntime" in html and "not verified" not in html  # one target: its own bundle, verified
    box = json.loads((pipeline / "work" / "models" / "ddddocr_det" / "thresholds" / "deployed.json").read_text())
    assert box["adapter"] == "box_detector" and "score_thresh" in box["integer_domain"]
    fleet = json.loads((pipeline / "reports" / "fleet" / "metrics.json").read_text())
    assert fleet["cameras"] == 4 and fleet["images"] == 2 * 2 * 4 * 3 and "alert_recall" in fleet
    assert "Camera × day" in (pipeline / "reports" / "fleet" / "index.html").read_text()


def test_second_repro_does_nothing(pipeline: Path):
    status = _run(["dvc", "status", "--json"], pipeline)
    assert status.returncode == 0 and json.loads(status.stdout) == {}


def test_editing_the_users_site_set_reruns_only_its_stages(pipeline: Path):
    """A new site set in the user's folder (a registered manifest is never rewritten: a changed set is a new version):
    only the user's model's stages and the report re-run."""
    night = pipeline / "data" / USER_MODEL / "site" / "night"
    dusk = night.parent / "dusk"
    (dusk / "images").mkdir(parents=True)
    for f in (night / "images").iterdir():
        shutil.copy(f, dusk / "images" / f.name)
    shutil.copy(night / "images" / "00.png", dusk / "images" / "99.png")
    try:
        assert _run(["quantkit", "calibset", "register", str(dusk), "--name", "dusk", "--kind", "site"], pipeline).returncode == 0
        status = json.loads(_run(["dvc", "status", "--json"], pipeline).stdout)
    finally:
        shutil.rmtree(dusk)
    changed = set(status)
    assert changed and all(USER_MODEL in name or name == "report" for name in changed), changed
    assert {f"evaluate@{USER_MODEL}", f"drift@{USER_MODEL}"} <= changed
    assert json.loads(_run(["dvc", "status", "--json"], pipeline).stdout) == {}


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
        work = pipeline / "work" / "models" / model
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
    for model in DEMO_MODELS:  # the measure stage, beside the report, one folder per model
        speed = json.loads((pipeline / "reports" / "machine" / model / "measurements.json").read_text())
        assert {(r["model"], r["variant"]) for r in speed["latency"]} == {(model, v) for v in ("fp32", "deployed", "candidate")}
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
    for out in ("calibration_sets/cam1-day", "work/models/ppocr_det/quantize/deployed", "models/demo"):
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
    shutil.copy(pipeline / "work" / "models" / "ppocr_det" / "thresholds" / "deployed.json", old_thresholds)

    params = yaml.safe_load((pipeline / "params.yaml").read_text())
    params["models"]["ppocr_det"]["sets"]["deployed"] = {"calibration": "cam1-night", "reference": "cam1-night"}
    (pipeline / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = _run(["dvc", "repro", "report"], pipeline)  # the report and what it reads (not bundle, verify, fleet)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Running stage 'demo_set" not in result.stdout and "Running stage 'intake" not in result.stdout

    record = json.loads((pipeline / "work" / "models" / "ppocr_det" / "quantize" / "deployed" / "record.json").read_text())
    assert record["calibration_set"]["name"] == "cam1-night"

    refused = _run(
        ["quantkit", "evaluate", "site_sets/cam1-night", "--fp32", "work/models/ppocr_det/intake", "--deployed", "work/models/ppocr_det/quantize/deployed",
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


def test_removing_a_model_from_params_removes_it_from_the_report(pipeline: Path):
    """Last in this file (it changes the scratch repository): the model list is params.yaml's, nothing else; the demo's
    metrics are the same bytes with or without the user's model (no demo stage re-runs)."""
    before = json.loads((pipeline / "reports" / "metrics.json").read_text())
    params = yaml.safe_load((pipeline / "params.yaml").read_text())
    del params["models"][USER_MODEL]
    (pipeline / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = _run(["dvc", "repro", "report"], pipeline)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Running stage 'report'" in result.stdout
    assert [line for line in result.stdout.splitlines() if line.startswith("Running stage")] == ["Running stage 'report':"]
    after = json.loads((pipeline / "reports" / "metrics.json").read_text())
    assert USER_MODEL not in after and {m: after[m] for m in DEMO_MODELS} == {m: before[m] for m in DEMO_MODELS}
    assert f"Model {USER_MODEL}" not in (pipeline / "reports" / "shift_report.html").read_text()
    assert sha256(pipeline / USER_FILE) == hashlib.sha256(user_model()).hexdigest()

"""bind + evaluate on the real PP-OCR detector at 128x128 (stand-in quantized folders built with ORT)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from quantkit._io import sha256_file
from quantkit.cli.main import main
from quantkit.errors import AgreementError, BindingMismatchError, CalibrationSetError
from quantkit.note import ExportNote, Preprocessing

SIZE = 128
WORDS = ["LOT 4521", "SN 88A", "EXP 2031", "A7-33", "B 902", "QC OK"]


def _draw(path: Path, seed: int, dark: bool = False) -> list:
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    bg = tuple(int(v) for v in rng.integers(150, 230, 3))
    im = Image.new("RGB", (SIZE, SIZE), bg)
    d = ImageDraw.Draw(im)
    boxes = []
    for k in range(2):
        x, y = int(rng.integers(4, 30)), 14 + 56 * k + int(rng.integers(0, 10))
        text = WORDS[(seed + k) % len(WORDS)]
        l, t, r, b = d.textbbox((x, y), text, font_size=18)
        d.text((x, y), text, fill=(10, 10, 10), font_size=18)
        boxes.append([[l, t], [r, t], [r, b], [l, b]])
    arr = np.asarray(im).astype(np.float32)
    if dark:
        arr = arr * 0.3 + rng.normal(0, 4, arr.shape)
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(path)
    return boxes


def _make_set(root: Path, name: str, seeds: list[int], dark: bool = False, kind: str = "site", labelled: bool = True):
    from quantkit.calibset import register_set

    (root / "images").mkdir(parents=True)
    labels = {}
    for s in seeds:
        rel = f"images/{s:04d}.png"
        boxes = _draw(root / rel, s, dark)
        labels[rel] = boxes
    return register_set(root, name=name, kind=kind, camera="cam1", lighting="night" if dark else "day",
                        labels=labels if labelled else None).set


def _quantize(src: Path, sset_dir: Path, out: Path, note: ExportNote) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from quantkit.calibset import CalibrationSet
    from quantkit.calibset.reader import CalibrationSetReader

    cset = CalibrationSet.load(sset_dir)
    out.mkdir(parents=True)
    quantize_static(str(src), str(out / "model_int8.onnx"), CalibrationSetReader(cset, note.preprocessing),
                    quant_format=QuantFormat.QDQ, per_channel=False, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    import onnx

    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize.scales import extract_scales

    tensors = extract_scales(onnx.load(str(out / "model_int8.onnx")), onnx.load(str(src)), calibrator="minmax")
    from quantkit.artifacts import SetRef

    cs = SetRef(path=str(sset_dir), set_id=cset.set_id, name=cset.name, camera=cset.camera, lighting=cset.lighting, count=cset.count)
    digest = sha256_file(src)
    CalibrationRecord(fingerprint=CalibrationRecord.compute_fingerprint(tensors, digest, cset.set_id, "test"), model_digest=digest,
                      quantized_model_digest=sha256_file(out / "model_int8.onnx"), calibration_set=cs, config={}, config_hash="test",
                      opset_before=12, opset_after=12, versions={}, tensors=tensors).save(out / "record.json")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from quantkit.demo import packaged_model_path

    root = tmp_path_factory.mktemp("pipe")
    intake = root / "intake"
    intake.mkdir()
    shutil.copy(packaged_model_path(), intake / "model.onnx")
    note = ExportNote(preprocessing=Preprocessing(input_size=(SIZE, SIZE), resize_policy="stretch"))
    note.save(intake / "export_note.json")
    _make_set(root / "calib-day", "calib-day", [1, 2], kind="calibration")
    _make_set(root / "calib-night", "calib-night", [3, 4], dark=True, kind="calibration")
    _make_set(root / "ref-day", "ref-day", [5, 6, 7], kind="reference")
    _make_set(root / "site-night", "site-night", [8, 9], dark=True)
    _quantize(intake / "model.onnx", root / "calib-day", root / "q" / "deployed", note)
    _quantize(intake / "model.onnx", root / "calib-night", root / "q" / "candidate", note)
    params = root / "params.yaml"
    params.write_text("task:\n  adapter: db_text\n  options: {thresh: 0.3, box_thresh: 0.5, unclip_ratio: 1.6}\n"
                      "thresholds:\n  operating_point: {mode: keep_fp32, grid_step: 0.02, bootstrap_resamples: 200}\n")
    return root


def _bind(w: Path, role: str, ref: str = "ref-day", *extra: str) -> int:
    return main(["bind", str(w / "q" / role), "--fp32", str(w / "intake"), "--reference", str(w / ref), "--params", str(w / "params.yaml"),
                 "--history", str(w / f"hist-{role}.jsonl"), "--out", str(w / "th" / f"{role}.json"), *extra])


def _eval_args(w: Path, out: Path, dep_th: str = "deployed", site: str = "site-night") -> list[str]:
    return ["evaluate", str(w / site), "--fp32", str(w / "intake"), "--deployed", str(w / "q/deployed"),
            "--deployed-thresholds", str(w / "th" / f"{dep_th}.json"), "--candidate", str(w / "q/candidate"),
            "--candidate-thresholds", str(w / "th/candidate.json"), "--params", str(w / "params.yaml"), "--out", str(out)]


@pytest.mark.slow
def test_bind_writes_bound_thresholds_with_integer_domain_and_history(work, capsys):
    from quantkit.artifacts import CalibrationRecord
    from quantkit.thresholds import ThresholdSet

    assert _bind(work, "deployed") == 0 and _bind(work, "candidate") == 0
    ts = ThresholdSet.load(work / "th/deployed.json")
    rec = CalibrationRecord.load(work / "q/deployed")
    assert ts.binding.record_fingerprint == rec.fingerprint and ts.binding.calibration_set_name == "calib-day"
    assert set(ts.values) == {"thresh", "box_thresh"} and ts.fp32_values == {"thresh": 0.3, "box_thresh": 0.5}
    sig = rec.tensor("sigmoid_0.tmp_0")
    for name, cmp in [("thresh", ">"), ("box_thresh", ">=")]:
        it = ts.integer(name)
        assert (it.tensor, it.dtype, it.comparison) == ("sigmoid_0.tmp_0", "uint8", cmp)
        assert it.scale == pytest.approx(sig.scale[0]) and it.zero_point == sig.zero_point[0]
    op = ts.operating_point
    assert op.mode == "keep_fp32" and op.reference_set.name == "ref-day" and op.primary_metric == "pixel_iou"
    assert {"chosen", "fp32_thresholds"} <= set(op.agreement) and {"pixel_iou", "box_f1"} <= set(op.agreement["chosen"])
    pix = op.agreement["chosen"]["pixel_iou"]
    assert pix.ci[0] <= pix.value <= pix.ci[1]
    assert pix.value >= op.agreement["fp32_thresholds"]["pixel_iou"].value  # the search includes the FP32 value
    assert op.accuracy["chosen"]["recall"].value > 0.5  # the reference set is labelled: accuracy vs ground truth too
    # deterministic bytes; a re-run appends nothing to the history
    before = (work / "th/deployed.json").read_bytes()
    assert _bind(work, "deployed") == 0 and (work / "th/deployed.json").read_bytes() == before
    lines = (work / "hist-deployed.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["reason"] == "first binding"


@pytest.mark.slow
def test_history_records_a_recalibration_and_old_set_is_refused(work, capsys):
    from quantkit.thresholds import ThresholdSet

    assert _bind(work, "deployed") == 0
    # "recalibrate" the deployed role: its folder now holds the night calibration
    recal = work / "q" / "recal"
    shutil.copytree(work / "q" / "candidate", recal)
    hist = work / "hist-deployed.jsonl"
    first = hist.read_text()
    rc = main(["bind", str(recal), "--fp32", str(work / "intake"), "--reference", str(work / "ref-day"), "--params",
               str(work / "params.yaml"), "--history", str(hist), "--out", str(work / "th" / "recal.json")])
    assert rc == 0
    text = hist.read_text()
    assert text.startswith(first)  # earlier lines untouched
    last = json.loads(text.splitlines()[-1])
    assert "calibration set changed: calib-day" in last["reason"] and "calib-night" in last["reason"]
    assert "previous_thresholds" in ThresholdSet.load(work / "th" / "recal.json").operating_point.thresholds
    with pytest.raises(BindingMismatchError, match=r"derived for calibration 'calib-day'.*quantkit bind"):
        ThresholdSet.load_bound(work / "th/deployed.json", recal)


@pytest.mark.slow
def test_evaluate_writes_the_contract_folder(work, capsys):
    assert _bind(work, "deployed") == 0 and _bind(work, "candidate") == 0
    out = work / "eval" / "site-night"
    assert main(_eval_args(work, out)) == 0
    assert sorted(p.name for p in out.iterdir()) == [".quantkit-output", "detections.json", "per_image.csv", "score_hist.json", "summary.json"]
    from quantkit.artifacts import EvalSummary

    rows = list(csv.DictReader((out / "per_image.csv").open()))
    variants = ["fp32", "deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds"]
    assert [r["variant"] for r in rows[:5]] == variants and len(rows) == 2 * 5
    assert list(rows[0])[:4] == ["image", "variant", "n_detections", "pixel_iou"] and "latency_ms" not in rows[0]
    assert {"pixel_inter", "pixel_union", "agree_tp", "agree_f1_num", "gt_tp", "gt_fn"} <= set(rows[0])
    summary = EvalSummary.load(out)
    assert set(summary.variants) == set(variants) and summary.labelled and summary.primary_metric == "pixel_iou"
    s = summary.variants["deployed"]
    inter = sum(float(r["pixel_inter"]) for r in rows if r["variant"] == "deployed")
    union = sum(float(r["pixel_union"]) for r in rows if r["variant"] == "deployed")
    assert s.agreement["pixel_iou"] == pytest.approx(inter / union, abs=1e-6)
    assert summary.variants["fp32"].accuracy["recall"] > 0.5  # the detector finds the rendered text
    assert summary.models["deployed"].record_fingerprint == json.loads((work / "q/deployed/record.json").read_text())["fingerprint"]
    again = work / "eval" / "again"
    assert main(_eval_args(work, again)) == 0  # deterministic: no timings, same bytes
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in again.iterdir()}
    hist = json.loads((out / "score_hist.json").read_text())
    assert len(hist["bin_edges"]) == 1001 and set(hist["counts"]) == {"fp32", "deployed", "candidate"}
    assert sum(hist["counts"]["fp32"]) == 2 * SIZE * SIZE
    det = json.loads((out / "detections.json").read_text())
    poly = det["images"]["images/0008.png"]["fp32"]["polygons"]
    assert poly and all(isinstance(v, int) for v in np.ravel(poly).tolist())
    # decisions near the line: FP32's text regions counted against each role's bound box_thresh, in steps of the map's
    # scale, beside the baseline bind counted on the reference set
    from quantkit.artifacts import ThresholdSet

    for role in ("deployed", "candidate"):
        ts = ThresholdSet.load(work / "th" / f"{role}.json")
        nl = summary.near_line[role]
        assert ts.near_line is not None and ts.near_line.decisions > 0 and nl.baseline == ts.near_line
        assert nl.site.threshold == "box_thresh" and nl.site.step == ts.integer_domain["box_thresh"].scale and nl.k == 3
        assert nl.site.line == ts.integer_domain["box_thresh"].float_value and nl.reference_set == "ref-day"
        assert 0 < nl.decisions and 0.0 <= nl.share_1 <= nl.share_k <= 1.0


@pytest.mark.slow
def test_evaluate_refuses_mismatched_thresholds_and_bad_sets_without_output(work, capsys, tmp_path):
    assert _bind(work, "deployed") == 0 and _bind(work, "candidate") == 0
    out = tmp_path / "eval"
    # candidate thresholds passed as the deployed ones: refused before inference, exit 3, nothing written
    assert main(_eval_args(work, out, dep_th="candidate")) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "calib-night" in err and "quantkit bind" in err
    assert not out.exists()
    empty = tmp_path / "empty-site"
    (empty / "images").mkdir(parents=True)
    args = _eval_args(work, out)
    args[1] = str(empty)
    assert main(args) == 2
    assert "manifest.json" in capsys.readouterr().err and not out.exists()
    # a site set with a missing image: named, one line, and no hint at an option evaluate does not have
    holed = tmp_path / "holed-site"
    shutil.copytree(work / "site-night", holed)
    victim = min((holed / "images").iterdir())
    victim.unlink()
    args[1] = str(holed)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and victim.name in err and "on_error" not in err and not out.exists()


@pytest.mark.slow
def test_label_modes_guard_their_inputs(work, tmp_path):
    from quantkit.config import load_params
    from quantkit.tasks import TaskConfig
    from quantkit.thresholds import ThresholdsConfig, bind

    cfg = ThresholdsConfig.from_dict(load_params(work / "params.yaml", "thresholds"))
    task = TaskConfig.from_dict(load_params(work / "params.yaml", "task")).make()
    neg = tmp_path / "neg"
    (neg / "images").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (SIZE, SIZE), (120, 130, 140)).save(neg / "images" / "0.png")
    from quantkit.calibset import register_set

    register_set(neg, name="neg", kind="reference", labels={"images/0.png": []})
    far = cfg.replace(operating_point=cfg.operating_point.replace(mode="fixed_far", target_far=0.1))
    with pytest.raises(CalibrationSetError, match="needs >= 10 negative images, the set has 1"):
        bind(work / "q/deployed", work / "intake", neg, task, far, tmp_path / "t.json")
    f1 = cfg.replace(operating_point=cfg.operating_point.replace(mode="best_f1"))
    with pytest.raises(CalibrationSetError, match="no positive items"):
        bind(work / "q/deployed", work / "intake", neg, task, f1, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
    r = bind(work / "q/deployed", work / "intake", work / "ref-day", task, f1, tmp_path / "t.json")
    gt = r.threshold_set.operating_point.accuracy["chosen"]
    assert gt["recall"].value > 0.5 and gt["f1"].ci[0] <= gt["f1"].value <= gt["f1"].ci[1]
    strict = cfg.replace(min_agreement=1.0)  # bind refuses a model below the agreement floor, exit 6, nothing written
    with pytest.raises(AgreementError, match="below thresholds.min_agreement 1") as e:
        bind(work / "q/deployed", work / "intake", work / "ref-day", task, strict, tmp_path / "strict.json")
    assert "\n" not in str(e.value) and "quantkit fallback" in str(e.value) and not (tmp_path / "strict.json").exists()

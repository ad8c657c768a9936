"""Shift report: verdict first, task-agnostic metrics, DVC metrics, self-contained deterministic HTML, artifacts that
must belong together, atomic output, CLI errors."""

from __future__ import annotations

import dataclasses

import json
import re
import shutil
from pathlib import Path

import pytest

from quantkit.artifacts import CalibrationRecord, EvalSummary
from quantkit.artifacts.drift import DriftResult, StatisticChange
from quantkit.artifacts.evaluation import MetricInfo
from quantkit.cli.main import main
from quantkit.errors import BindingMismatchError, ConfigError, InputFileError
from quantkit.report import ModelInputs, ReportConfig, build_report, make_report
from quantkit.report.aggregate import scale_moves
from quantkit.report.model import ShiftMetrics, SiteReport
from quantkit.report.synthetic import write_inputs
from quantkit.report.verdict import cause, drift_label, fp32_fails, verdict


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("inputs"), images_per_site=5)


def _inputs(p: dict[str, Path], work: Path | None = None) -> list[ModelInputs]:
    return [ModelInputs.from_work_dir(work or p["work"], site_sets=p["site_sets"])]


def _copy(p: dict[str, Path], tmp_path: Path) -> Path:
    work = tmp_path / "work" / "ppocr_det"
    shutil.copytree(p["work"], work)
    return work


def _args(p: dict[str, Path], out: Path, work: Path | None = None) -> list[str]:
    return ["report", "--work-dir", str(work or p["work"]), "--site-sets", str(p["site_sets"]), "--out", str(out)]


def test_verdict_tells_the_lighting_story_with_sample_sizes(paths):
    r = build_report(_inputs(paths))
    m = r.models[0]
    assert r.decision == m.decision == "needs review" and m.task == "db_text" and m.primary.name == "pixel_iou"
    assert m.choice.rule == "candidate-worse-where-deployed-disagrees"
    assert re.match(r"The deployed model disagrees with FP32 on cam1-night \(pixel IoU 0\.[78]\d\) and cam2-day", m.verdict[0])
    assert re.match(r"The candidate \(calibrated on cam1-night\) is significantly worse on cam1-day \(-0\.\d+, interval .*\) and cam2-day .* "
                    r"though it improves cam1-night: compose a calibration set that covers every condition\.", m.verdict[1])
    night = next(v for v in m.verdict if v.startswith("On cam1-night"))
    assert "calibrated on cam1-day" in night and "the lighting changed" in night and "brightness fell 68%" in night
    assert re.search(r"pixel IoU 0\.[78]\d \(95% CI 0\.\d\d-0\.\d\d, 5 images\)", night)  # sample size and CI for a quality lead
    assert re.search(r"^The candidate \(calibrated on cam1-night\), against the deployed model: cam1-day pixel IoU 0\.9\d → 0\.[67]\d \(green → (amber|red)\); "
                     r"cam1-night pixel IoU 0\.\d\d → 0\.\d\d \((amber|red) → (green|amber)\)",
                     next(v for v in m.verdict if v.startswith("The candidate (calibrated on cam1-night), against")))
    rule = ReportConfig().rule(m.primary.label, m.item)
    assert "0.90" in rule and "params.yaml: report" in rule and "unquantized (FP32)" in rule and "pixel IoU vs FP32" in rule
    assert m.site("cam1-night").variant("deployed").status in ("amber", "red")


def test_fp32_threshold_columns_collapse_when_thresholds_did_not_move(paths):
    m = build_report(_inputs(paths)).models[0]
    variants = {x.variant for x in m.site("cam1-day").metrics}
    assert "candidate@fp32-thresholds" in variants  # the candidate's thresholds moved (0.27 vs 0.3)
    assert "deployed@fp32-thresholds" not in variants  # the deployed one's did not: the column would repeat "deployed"


def test_metrics_are_numbers_per_model_site_and_variant(paths):
    metrics = build_report(_inputs(paths)).metrics_dict()
    assert set(metrics) == {"ppocr_det"}
    m = metrics["ppocr_det"]
    assert set(m) == {"cam1-day", "cam1-night", "cam2-day", "verdict"}
    dep = m["cam1-night"]["deployed"]
    for key in ("agreement.pixel_iou", "agreement.box_f1", "detections_per_image", "accuracy.precision", "accuracy.recall", "accuracy.f1",
                "score_psi", "score_ks", "score_wasserstein", "status_code"):
        assert isinstance(dep[key], (int, float)) and not isinstance(dep[key], bool), key
    assert m["cam1-night"]["drift"]["changed"] is True and m["cam1-day"]["drift"]["changed"] is False
    assert "score_psi" not in m["cam1-day"]["fp32"]  # FP32 is the reference
    assert m["verdict"] == {"candidate_acceptable": False, "needs_review": True, "watch": False}
    assert "latency" not in json.dumps(metrics)  # machine-dependent: dvc metrics diff must show only real changes


def test_scale_moves_rank_tensors_by_relative_change():
    from quantkit.artifacts import SetRef, TensorScale

    def rec(*tensors: TensorScale) -> CalibrationRecord:
        return CalibrationRecord("", "m", "q", SetRef(), {}, "c", 13, 13, {}, tensors)

    def t(name: str, *scale: float) -> TensorScale:
        return TensorScale(name, "activation", "uint8", None if len(scale) == 1 else 1, scale, (0,) * len(scale))

    a = rec(t("t1", 0.1), t("t2", 0.1, 0.2), t("t3", 0.1), t("only_a", 0.1))
    b = rec(t("t1", 0.1), t("t2", 0.4, 0.8), t("t3", 0.05))
    rows = scale_moves(a, b, top=2)
    assert [r["tensor"] for r in rows] == ["t2", "t3"]
    assert rows[0]["ratio"] == pytest.approx(4.0) and rows[0]["rel_change"] == pytest.approx(3.0) and rows[1]["log2_ratio"] == pytest.approx(-1.0)


def test_files_are_written_self_contained_and_byte_identical(paths, tmp_path):
    out = tmp_path / "reports"
    make_report(_inputs(paths), ReportConfig(), out)
    html = (out / "shift_report.html").read_text(encoding="utf-8")
    body = html.split("<body>", 1)[1]
    assert body.lower().index("needs review") < body.index("At a glance")  # verdict first
    # nothing external but the optional machine-measurement sidecar beside the report
    assert {x for x in re.findall(r"""(?:src|href)=["'](?!data:|#)([^"']+)""", html)} <= {"machine/measurements.js", "machine/ppocr_det/measurements.js"}
    assert "http" not in body
    # agreement, drift, decisions near the line (one per model, in place of the per-site score histograms)
    assert html.count('src="data:image/png;base64,') >= 3 and html.count('src="data:image/jpeg;base64,') == 9
    assert "<b>no change</b>" in html and "Details for engineers" in html
    md = (out / "shift_report.md").read_text()
    assert md.startswith("# Quantization shift report\n\n## ppocr_det: **NEEDS REVIEW**") and "| cam1-night | deployed |" in md
    plots = sorted(p.name for p in (out / "plots").iterdir())
    assert "agreement.csv" in plots and "score_cdf-ppocr_det-cam1-night-deployed.csv" in plots
    cdf = (out / "plots" / "score_cdf-ppocr_det-cam1-night-deployed.csv").read_text().splitlines()
    assert cdf[0] == "score,cdf" and cdf[-1].endswith(",1")
    first = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    make_report(_inputs(paths), ReportConfig(), out)
    assert first == {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}  # the HTML too: byte-identical


def test_html_escapes_what_it_shows(paths, tmp_path):
    work = _copy(paths, tmp_path)
    p = work / "drift" / "cam1-day.json"
    d = DriftResult.load(p)
    DriftResult.from_dict({**d.to_dict(), "reasons": ["<script>alert(1)</script> & more"]}).save(p)
    out = tmp_path / "reports"
    make_report(_inputs(paths, work), ReportConfig(), out)
    html = (out / "shift_report.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html


def test_failure_leaves_previous_report_intact(paths, tmp_path):
    out = tmp_path / "reports"
    make_report(_inputs(paths), ReportConfig(), out)
    before = (out / "metrics.json").read_bytes()
    work = _copy(paths, tmp_path)
    (work / "eval" / "cam1-day" / "per_image.csv").write_text("image,variant\n")
    with pytest.raises(InputFileError, match="per_image.csv: column 'n_detections' missing; rerun 'quantkit evaluate'"):
        make_report(_inputs(paths, work), ReportConfig(), out)
    assert (out / "metrics.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports", "work"]  # no temp folders left


def test_tampered_record_is_refused(paths, tmp_path):
    work = _copy(paths, tmp_path)
    rec = json.loads((work / "quantize/deployed/record.json").read_text())
    rec["tensors"][0]["scale"] = [1.0]
    (work / "quantize/deployed/record.json").write_text(json.dumps(rec))
    with pytest.raises(InputFileError, match="fingerprint does not match"):
        build_report(_inputs(paths, work))


def test_an_evaluation_of_other_models_is_refused_naming_both_sides(paths, tmp_path, capsys):
    work = _copy(paths, tmp_path)
    p = work / "eval" / "cam1-night"
    s = EvalSummary.load(p)
    other = {**s.models["deployed"].to_dict(), "record_fingerprint": "f" * 64}
    EvalSummary.from_dict({**s.to_dict(), "models": {**{k: v.to_dict() for k, v in s.models.items()}, "deployed": other}}).save(p / "summary.json")
    with pytest.raises(BindingMismatchError, match=r"cam1-night: evaluates deployed record ffffffffffff .* but .*deployed is record"):
        build_report(_inputs(paths, work))
    out = tmp_path / "reports"
    assert main(_args(paths, out, work)) == 3 and not out.exists()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "rerun 'quantkit evaluate'" in err


def test_a_drift_result_of_another_record_is_refused(paths, tmp_path):
    work = _copy(paths, tmp_path)
    p = work / "drift" / "cam2-day.json"
    DriftResult.from_dict({**DriftResult.load(p).to_dict(), "record_fingerprint": "e" * 64}).save(p)
    with pytest.raises(BindingMismatchError, match="cam2-day.json: measured clipping of record eeeeeeeeeeee"):
        build_report(_inputs(paths, work))


def test_config_validation():
    with pytest.raises(ConfigError, match="report.min_agreement"):
        ReportConfig(min_agreement=1.5)
    with pytest.raises(ConfigError, match="unknown option 'min_pixel_iou'"):
        ReportConfig.from_dict({"min_pixel_iou": 0.9})
    cfg = ReportConfig()
    assert cfg.status(0.95, 0.1) == "green" and cfg.status(0.85, 0.0) == "amber" and cfg.status(0.95, 0.5) == "red"


def test_cli_report_and_bad_inputs(paths, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(_args(paths, out)) == 0
    text = capsys.readouterr().out
    assert text.startswith("ppocr_det: NEEDS REVIEW\n  The deployed model disagrees") and "On cam1-night" in text
    assert json.loads((out / "metrics.json").read_text())["ppocr_det"]["cam1-night"]["candidate"]["status_code"] in (0, 1)
    missing = tmp_path / "none"
    assert main(["report", "--work-dir", str(tmp_path / "no-work"), "--out", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "model work folder not found" in err and len(err.strip().splitlines()) == 1 and not missing.exists()


def _site(name: str, dep: tuple[float, str], cand: tuple[float, str] | None = None, *, drift: DriftResult | None = None) -> SiteReport:
    def m(variant: str, v: float, status: str) -> ShiftMetrics:
        return ShiftMetrics(name, variant, 8, 3.0, 1.0, 0.0, {} if variant == "fp32" else {"pixel_iou": v}, (v - 0.02, v + 0.02),
                            {}, None, None, None, None, status)

    ms = [m("fp32", 1.0, "green"), m("deployed", *dep)] + ([m("candidate", *cand)] if cand else [])
    return SiteReport(name, tuple(ms), None, drift, (), None, False)


PIXEL = MetricInfo("pixel_iou", "pixel IoU vs FP32", "agreement")


def _task_metrics(task: str) -> tuple[MetricInfo, ...]:
    """The metrics an evaluation summary of ``task`` lists (as ``quantkit evaluate`` writes them)."""
    from quantkit.tasks import adapter_class

    cls = adapter_class(task)
    return tuple([MetricInfo(m.name, m.label, "agreement", m.higher_is_better) for m in cls.AGREEMENT]
                 + [MetricInfo(m.name, m.label, "accuracy", m.higher_is_better) for m in cls.ACCURACY])


def _drift(*changes: StatisticChange, changed: bool = True) -> DriftResult:
    from quantkit.artifacts import SetRef

    return DriftResult(SetRef(), SetRef(), (), changes, None, changed, ("why",), {})


CAMERA = _drift(StatisticChange("sharpness_lapvar", 280.0, 90.0, -0.68, 3, True, 0.9))
NIGHT = _drift(StatisticChange("clip_bright", 0.0, 0.0, 0.0, 3, True, 0.95), StatisticChange("brightness_mean", 120.0, 36.0, -0.7, 3, True, 0.9))


def test_verdict_says_what_to_do_first():
    """The report's side of the one table (quantkit.decision; each rule is tested on its own in test_decision.py):
    the reasons come first, then the evidence; advice follows the cause -> action table."""
    cfg = ReportConfig()

    def v(sites, cand, **kw):
        return verdict(sites, PIXEL, "text region", "day", cand, cfg, metrics=(PIXEL,), **kw)

    d, lines = v([_site("day", (0.95, "green"), (0.95, "green"))], "day", same_calibration=True)
    assert d == "keep deployed" and lines[0] == "The deployed model agrees with FP32 on every site set (day pixel IoU 0.95)."
    assert "The candidate is the deployed calibration itself: nothing to compare." in lines
    d, lines = v([_site("day", (0.95, "green"), (0.95, "green")), _site("night", (0.7, "red"), (0.7, "red"))], "day", same_calibration=True)
    assert d == "needs review" and lines[0] == "The deployed model disagrees with FP32 on night (pixel IoU 0.70)."
    # what to do follows the cause -> action table: nothing moved is quantization loss, never "recalibrate"
    quiet = _site("day", (0.8, "amber"), drift=_drift(StatisticChange("brightness_mean", 120.0, 121.0, 0.01, 0, False), changed=False))
    d, lines = v([quiet, _site("night", (0.7, "red"), drift=NIGHT), _site("cam2", (0.7, "red"), drift=CAMERA)], None)
    assert d == "needs review" and lines[1].startswith("What to do: ")
    assert "day: quantization loss: no image statistic moved, yet INT8 disagrees with FP32; recover accuracy in the quantization" in lines[1]
    assert "night: recalibrate: the lighting changed; register images of the new condition" in lines[1]
    assert "cam2: check camera: the image lost more sharpness than its contrast explains: defocus or a blurred lens; service" in lines[1]
    d, lines = v([_site("day", (0.95, "green"), (0.95, "green")), _site("night", (0.7, "red"), (0.72, "red"))], "night")
    assert d == "needs review" and lines[1] == "The candidate (calibrated on night) still disagrees on night (pixel IoU 0.72)."
    d, lines = v([_site("day", (0.95, "green"), (0.82, "amber")), _site("night", (0.7, "red"), (0.94, "green"))], "night")
    assert d == "needs review" and lines[1] == ("The candidate (calibrated on night) is significantly worse on day (pixel IoU 0.82) though it "
                                                "fixes night: compose a calibration set that covers every condition.")
    d, lines = v([_site("day", (0.95, "green"), (0.93, "green")), _site("night", (0.7, "red"), (0.94, "green"))], "night")
    assert d == "switch to candidate" and lines[0] == ("Switch to the candidate (calibrated on night): it agrees with FP32 on every site set "
                                                      "and fixes night (pixel IoU 0.94).")
    assert lines[-1].startswith("To deploy it: set the model's sets.deployed.calibration") and "dvc repro" in lines[-1]  # the next command
    d, lines = v([_site("day", (0.95, "green"), (0.83, "amber")), _site("night", (0.92, "green"), (0.94, "green"))], "night")
    assert d == "keep deployed" and lines[0].startswith("The deployed model agrees with FP32 on every site set; the candidate (calibrated "
                                                        "on night) is significantly worse on day (pixel IoU 0.83)")
    assert not any(line.startswith("To deploy it") for line in lines)  # no deploy commands under a keep
    d, lines = v([_site("day", (0.95, "green"))], None)
    assert d == "keep deployed" and lines[0] == "The deployed model agrees with FP32 on every site set (day pixel IoU 0.95)."


def _labelled(name, dep, cand, accuracy):
    s = _site(name, dep, cand)
    fp32 = dataclasses.replace(s.variant("fp32"), accuracy=dict(sorted(accuracy.items())))  # key order as summary.json has it
    return dataclasses.replace(s, metrics=(fp32, *s.metrics[1:]))


def test_verdict_says_when_fp32_itself_fails_on_a_labelled_site():
    ctc = _task_metrics("ctc_text")
    sites = [_labelled("day", (0.7, "red"), (1.0, "green"), {"exact_accuracy": 0.9, "cer_gt": 0.02}),
             _labelled("flip", (0.25, "red"), (0.3, "red"), {"exact_accuracy": 0.0, "cer_gt": 0.9})]
    d, lines = verdict(sites, PIXEL, "line", "day", "dark", ReportConfig(), metrics=ctc)
    assert d == "needs review" and lines[0] == ("FP32 itself fails on flip (exact accuracy 0.00 against the labels): the model, not the "
                                                "quantization, fails there; no calibration fixes it (retrain, or check the images).")
    assert not any("FP32 itself fails on day" in line for line in lines)
    sites[1] = _labelled("flip", (0.25, "red"), (0.3, "red"), {"exact_accuracy": 0.8, "cer_gt": 0.05})  # FP32 reads flip: recalibrate
    d, lines = verdict(sites, PIXEL, "line", "day", "dark", ReportConfig(), metrics=ctc)
    assert d == "needs review" and lines[1].startswith("The candidate (calibrated on dark) still disagrees on flip (pixel IoU 0.30) (it fixes day)")


def test_a_perfect_recognizer_is_not_called_failing():
    """The trial's case: a character error rate of 0 (perfect, lower is better) sorts first in summary.json and
    was read as an accuracy of 0, "FP32 fails"."""
    site = _labelled("site-normal", (0.95, "green"), None, {"exact_accuracy": 1.0, "cer_gt": 0.0})
    assert fp32_fails(site, _task_metrics("ctc_text"), ReportConfig()) is None
    d, lines = verdict([site], PIXEL, "line", "calib-normal", None, ReportConfig(), metrics=_task_metrics("ctc_text"))
    assert d == "keep deployed" and not any("FP32 itself" in line for line in lines)


@pytest.mark.parametrize("task", ["db_text", "box_detector", "classifier", "ctc_text", "segmentation"])
def test_fp32_is_judged_by_a_higher_is_better_accuracy_of_every_task(task):
    metrics = _task_metrics(task)
    accuracy = [m for m in metrics if m.kind == "accuracy"]
    assert any(m.higher_is_better for m in accuracy), f"{task} declares no accuracy metric FP32 can be judged by"
    perfect = {m.name: 1.0 if m.higher_is_better else 0.0 for m in accuracy}
    failing = {m.name: 0.1 if m.higher_is_better else 0.9 for m in accuracy}
    judged = next(m.name for m in accuracy if m.higher_is_better)
    assert fp32_fails(_labelled("s", (0.95, "green"), None, perfect), metrics, ReportConfig()) is None
    assert fp32_fails(_labelled("s", (0.95, "green"), None, failing), metrics, ReportConfig()) == (judged, 0.1)
    assert fp32_fails(_site("s", (0.95, "green")), metrics, ReportConfig()) is None  # unlabelled: nothing to judge


def test_an_error_rate_alone_does_not_judge_fp32():
    cer = MetricInfo("cer_gt", "character error rate", "accuracy", higher_is_better=False)
    assert fp32_fails(_labelled("s", (0.95, "green"), None, {"cer_gt": 0.0}), (PIXEL, cer), ReportConfig()) is None


def test_image_changes_use_the_drift_words_and_follow_the_model():
    unaffected = _site("cam2-day", (0.95, "green"), drift=CAMERA)
    assert drift_label(unaffected) == ("changed: check camera", "amber")  # a camera fault is one whatever the agreement
    assert drift_label(_site("cam2-day", (0.85, "amber"), drift=CAMERA)) == ("changed: check camera", "red")  # sharpness fell alone
    assert drift_label(_site("cam1-night", (0.85, "amber"), drift=NIGHT)) == ("changed: recalibrate", "red")
    held = ("changed: watch (the images moved away from the calibration set; agreement held)", "neutral")
    assert drift_label(_site("cam1-night", (0.95, "green"), drift=NIGHT)) == held  # agreement held: watch, never recalibrate
    assert drift_label(_site("cam1-day", (0.95, "green"), drift=_drift(changed=False))) == ("no change", "green")
    d, lines = verdict([_site("cam1-night", (0.95, "green"), drift=NIGHT)], PIXEL, "text region", "cam1-day", None, ReportConfig(), metrics=(PIXEL,))
    assert d == "watch" and lines[0].startswith("Watch cam1-night: the images moved away from the calibration set, but the deployed model still agrees")
    assert not any("no action" in line or "recalibrate" in line for line in lines)
    assert cause(NIGHT) == "the lighting changed (brightness fell 70%)"  # "blown-out pixels changed from 0 to 0" says nothing
    # less light also lowers sharpness and raises noise: still a lighting change, not a camera swap
    lit = _drift(*(StatisticChange(n, 1.0, 0.5, -0.5, 3, True, 0.5) for n in ("brightness_mean", "noise_sigma", "sharpness_lapvar")))
    assert cause(lit).startswith("the lighting changed")


def test_params_errors_name_the_file_and_out_must_be_a_folder(paths, tmp_path, capsys):
    params = tmp_path / "site-options.yaml"
    params.write_text("report:\n  min_agreement: 1.5\n")
    out = tmp_path / "reports"
    assert main(_args(paths, out) + ["--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert f"{params}:report.min_agreement: 1.5 must be in (0, 1]" in err and "params.yaml" not in err and not out.exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(_args(paths, afile)) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and len(err.strip().splitlines()) == 1 and afile.read_text() == "x"


def test_thumbnails_come_from_the_folder_evaluate_recorded(tmp_path, monkeypatch, caplog):
    from types import SimpleNamespace

    from quantkit.artifacts.record import SetRef
    from quantkit.report.aggregate import _images_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sets" / "site-day" / "images").mkdir(parents=True)
    summary = SimpleNamespace(site_set=SetRef(path="sets/site-day", name="site-day"))
    assert _images_dir(summary, None) == Path("sets/site-day")
    (tmp_path / "other" / "site-day" / "images").mkdir(parents=True)
    assert _images_dir(summary, Path("other")) == Path("other/site-day")
    gone = SimpleNamespace(site_set=SetRef(path="moved/site-night", name="site-night"))
    with caplog.at_level("WARNING"):
        assert _images_dir(gone, None) is None
    assert "site-night" in caplog.text and "--site-sets" in caplog.text


def test_score_distance_alerts_need_the_scores_to_move_in_score_units(paths):
    from quantkit.report.render import render_html

    report = build_report(_inputs(paths), ReportConfig())
    model = report.models[0]
    site = model.sites[0]

    def with_scores(w1: float) -> str:
        dep = dataclasses.replace(site.variant("deployed"), score_psi=17.8, score_ks=1.0, score_wasserstein=w1)
        metrics = tuple(dep if m.variant == "deployed" else m for m in site.metrics)
        sites = (dataclasses.replace(site, metrics=metrics), *model.sites[1:])
        return render_html(dataclasses.replace(report, models=(dataclasses.replace(model, sites=sites),)))

    assert '<td class="alert">17.8000</td>' not in with_scores(0.0032)  # scores packed near 1: PSI alone is noise
    assert '<td class="alert">17.8000</td>' in with_scores(0.05)

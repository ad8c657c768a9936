"""Shift report: verdict first, metrics for DVC, self-contained HTML, atomic output, CLI errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from quantkit.cli.main import main
from quantkit.errors import ConfigError, InputFileError
from quantkit.report import ReportConfig, ReportInputs, build_report, make_report
from quantkit.report.build import scale_moves, threshold_table
from quantkit.report.synthetic import write_inputs


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    return write_inputs(tmp_path_factory.mktemp("inputs"), images_per_site=5)


def _inputs(p: dict[str, Path]) -> ReportInputs:
    return ReportInputs(p["eval"], p["drift"], p["deployed"], p["deployed_thresholds"], p["candidate"], p["candidate_thresholds"], p["site_sets"])


def _args(p: dict[str, Path], out: Path) -> list[str]:
    return ["report", "--eval", str(p["eval"]), "--drift", str(p["drift"]), "--deployed", str(p["deployed"]),
            "--deployed-thresholds", str(p["deployed_thresholds"]), "--candidate", str(p["candidate"]),
            "--candidate-thresholds", str(p["candidate_thresholds"]), "--site-sets", str(p["site_sets"]), "--out", str(out)]


def test_verdict_tells_the_lighting_story(paths):
    r = build_report(_inputs(paths))
    assert r.decision == "needs review"
    assert re.match(r"Needs review: the deployed model disagrees with FP32 on cam1-night \(IoU 0\.[78]\d, (amber|red)\) and cam2-day", r.verdict[0])
    assert "recalibrating on cam1-night fixes cam1-night but breaks cam1-day and cam2-day; consider a calibration set that covers both conditions" in r.verdict[0]
    night = next(v for v in r.verdict if v.startswith("On cam1-night"))
    assert "calibrated on cam1-day" in night and "lighting changed" in night and "brightness fell 68%" in night
    assert re.search(r"IoU 0\.[78]\d vs 0\.9\d on cam1-day", night)
    assert re.search(r"^Recalibrating on cam1-night: cam1-day green → (amber|red) \(IoU 0\.9\d → 0\.[67]\d\); cam1-night (amber|red) → green", r.verdict[-1])
    assert "0.90" in r.rule and "params.yaml: report" in r.rule
    assert "unquantized (FP32)" in r.rule and "overlap" in r.rule  # the jargon explained once, in plain words
    assert r.sites[1].variant("deployed").status in ("amber", "red")
    assert r.sites[1].variant("candidate").status == "green"


def test_metrics_are_numbers_per_site_and_variant(paths):
    m = build_report(_inputs(paths)).metrics_dict()
    assert set(m) == {"cam1-day", "cam1-night", "cam2-day", "verdict"}
    dep = m["cam1-night"]["deployed"]
    for key in ("pixel_iou_vs_fp32", "detections_per_image", "precision", "recall", "f1", "score_psi", "score_ks", "score_wasserstein", "status_code"):
        assert isinstance(dep[key], (int, float)) and not isinstance(dep[key], bool)
    assert m["cam1-night"]["drift"]["recalibrate"] is True and m["cam1-day"]["drift"]["recalibrate"] is False
    assert "score_psi" not in m["cam1-day"]["fp32"]  # FP32 is the reference
    assert m["verdict"] == {"candidate_acceptable": False, "needs_review": True}
    assert "latency_ms" not in json.dumps(m)  # machine-dependent: dvc metrics diff must show only real changes
    assert all(not isinstance(v, str) for site in m.values() for node in site.values() for v in (node.values() if isinstance(node, dict) else [node]))


def test_threshold_and_scale_tables():
    dep = {"values": {"thresh": 0.3}, "fp32_values": {"thresh": 0.3}, "integer_domain": {"thresh": {"tensor": "p", "dtype": "uint8", "value": 77}}}
    cand = {"values": {"thresh": 0.27}, "integer_domain": {"thresh": {"tensor": "p", "dtype": "uint8", "value": 69}}}
    assert threshold_table(dep, cand) == [{"name": "thresh", "fp32": 0.3, "deployed": 0.3, "deployed_int": 77, "candidate": 0.27, "candidate_int": 69, "dtype": "uint8", "tensor": "p", "comparison": ""}]
    def t(name: str, *scale: float) -> dict:
        return {"name": name, "role": "activation", "dtype": "uint8", "axis": None if len(scale) == 1 else 1, "scale": list(scale), "zero_point": [0] * len(scale)}

    a = {"tensors": [t("t1", 0.1), t("t2", 0.1, 0.2), t("t3", 0.1), t("only_a", 0.1)]}
    b = {"tensors": [t("t1", 0.1), t("t2", 0.4, 0.8), t("t3", 0.05)]}
    rows = scale_moves(a, b, top=2)
    assert [r["tensor"] for r in rows] == ["t2", "t3"]
    assert rows[0]["ratio"] == pytest.approx(4.0) and rows[0]["rel_change"] == pytest.approx(3.0) and rows[1]["log2_ratio"] == pytest.approx(-1.0)


def test_files_are_written_self_contained_and_deterministic(paths, tmp_path):
    out = tmp_path / "reports"
    make_report(_inputs(paths), ReportConfig(), out)
    html = (out / "shift_report.html").read_text(encoding="utf-8")
    body = html.split("<body>", 1)[1]
    assert body.lower().index("needs review") < body.index("At a glance")  # verdict first
    assert "latency ms (this machine" in html
    assert not re.search(r"""(src|href)=["'](?!data:)""", html) and "http" not in body and "<script" not in html
    assert html.count('src="data:image/png;base64,') >= 5 and html.count('src="data:image/jpeg;base64,') == 9
    assert len(html.encode()) < 5_000_000
    md = (out / "shift_report.md").read_text()
    assert md.startswith("# Quantization shift report\n\n**NEEDS REVIEW**") and "| cam1-night | deployed |" in md
    plots = sorted(p.name for p in (out / "plots").iterdir())
    assert "agreement.csv" in plots and "score_cdf-cam1-night-deployed.csv" in plots
    cdf = (out / "plots" / "score_cdf-cam1-night-deployed.csv").read_text().splitlines()
    assert cdf[0] == "score,cdf" and cdf[-1].endswith(",1")
    first = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.suffix != ".html"}
    make_report(_inputs(paths), ReportConfig(), out)
    assert first == {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.suffix != ".html"}


def test_failure_leaves_previous_report_intact(paths, tmp_path):
    out = tmp_path / "reports"
    make_report(_inputs(paths), ReportConfig(), out)
    before = (out / "metrics.json").read_bytes()
    broken = tmp_path / "eval"
    (broken / "cam1-day").mkdir(parents=True)
    (broken / "cam1-day" / "per_image.csv").write_text("image,variant\n")
    bad = ReportInputs(broken, paths["drift"], paths["deployed"], paths["deployed_thresholds"])
    with pytest.raises(InputFileError, match="per_image.csv: column 'n_detections' missing; rerun 'quantkit evaluate'"):
        make_report(bad, ReportConfig(), out)
    assert (out / "metrics.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval", "reports"]  # no temp folders left


def test_tampered_record_is_refused(paths, tmp_path):
    import shutil

    dep = tmp_path / "deployed"
    shutil.copytree(paths["deployed"], dep)
    rec = json.loads((dep / "record.json").read_text())
    rec["tensors"][0]["scale"] = [1.0]
    (dep / "record.json").write_text(json.dumps(rec))
    bad = ReportInputs(paths["eval"], paths["drift"], dep, paths["deployed_thresholds"])
    with pytest.raises(InputFileError, match="fingerprint does not match"):
        build_report(bad)


def test_config_validation():
    with pytest.raises(ConfigError, match="report.min_pixel_iou"):
        ReportConfig(min_pixel_iou=1.5)
    with pytest.raises(ConfigError, match="unknown option 'min_iou'"):
        ReportConfig.from_dict({"min_iou": 0.9})


def test_cli_report_and_bad_inputs(paths, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(_args(paths, out)) == 0
    text = capsys.readouterr().out
    assert text.startswith("Needs review: the deployed model disagrees") and "On cam1-night" in text
    assert json.loads((out / "metrics.json").read_text())["cam1-night"]["candidate"]["status_code"] == 0

    missing = tmp_path / "none"
    args = _args(paths, missing)
    args[args.index("--eval") + 1] = str(tmp_path / "no-eval")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "evaluation folder not found" in err and len(err.strip().splitlines()) == 1 and not missing.exists()

    args = _args(paths, missing)[:-6] + ["--candidate", str(paths["candidate"]), "--out", str(missing)]
    assert main(args) == 2 and "--candidate-thresholds go together" in capsys.readouterr().err
    assert not missing.exists()


def test_cause_names_lighting_for_a_dark_scene_and_camera_for_a_softer_one():
    from quantkit.report.build import _cause

    def drift(*moved: str) -> dict:
        return {"changes": [{"name": n, "moved": True} for n in moved], "reasons": ["why"]}

    # less light also lowers sharpness and raises noise: still a lighting change, not a camera swap
    assert _cause(drift("brightness_mean", "noise_sigma", "sharpness_lapvar", "cast_bg")) == "lighting changed (why)"
    assert _cause(drift("sharpness_lapvar", "noise_sigma", "saturation_mean")) == "camera or optics changed (why)"
    assert _cause(drift("brightness_mean", "width")) == "lighting changed and camera or optics changed (why)"
    assert _cause({"changes": [], "clipping": {"moved": False}}) == "no image statistic moved"


# ------------------------------------------------------------------------------ verdict cases


def _site(name: str, dep: tuple[float, str], cand: tuple[float, str] | None = None, *, drift: dict | None = None):
    from quantkit.report.build import ShiftMetrics, SiteReport

    def m(variant: str, iou: float, status: str) -> ShiftMetrics:
        return ShiftMetrics(name, variant, 8, 3.0, 1.0, iou, iou, None, None, None, None, None, None, None, None, 0.0, status)

    ms = [m("fp32", 1.0, "green"), m("deployed", *dep)] + ([m("candidate", *cand)] if cand else [])
    return SiteReport(name, tuple(ms), None, drift, (), None)


CAMERA = {"recalibrate": True, "changes": [{"name": "sharpness_lapvar", "calibration_median": 280.0, "site_median": 90.0, "relative_change": -0.68,
                                            "metrics_moved": 3, "moved": True, "separation": 0.9}], "reasons": ["sharpness fell 68%"]}
NIGHT = {"recalibrate": True, "reasons": ["blown-out pixels changed from 0 to 0 vs calibration"], "changes": [
    {"name": "clip_bright", "calibration_median": 0.0, "site_median": 0.0, "relative_change": 0.0, "metrics_moved": 3, "moved": True, "separation": 0.95},
    {"name": "brightness_mean", "calibration_median": 120.0, "site_median": 36.0, "relative_change": -0.7, "metrics_moved": 3, "moved": True, "separation": 0.9}]}


def test_verdict_says_what_to_do_first():
    from quantkit.report.build import verdict

    cfg = ReportConfig()
    # (a) the candidate is the deployed calibration: judged alone, says so
    d, lines = verdict([_site("day", (0.95, "green"), (0.95, "green"))], "day", "day", cfg, same_calibration=True)
    assert d == "keep deployed" and lines[0].startswith("Keep deployed: the candidate is the deployed calibration, nothing to compare;")
    d, lines = verdict([_site("day", (0.95, "green"), (0.95, "green")), _site("night", (0.7, "red"), (0.7, "red"))], "day", "day", cfg, same_calibration=True)
    assert d == "needs review" and "the candidate is the deployed calibration, nothing to compare" in lines[0]
    assert "the deployed model disagrees with FP32 on night (IoU 0.70, red)" in lines[0]
    # (b) deployed red, candidate no better: never "keep deployed"
    d, lines = verdict([_site("day", (0.95, "green"), (0.95, "green")), _site("night", (0.7, "red"), (0.72, "red"))], "day", "night", cfg)
    assert d == "needs review" and lines[0].startswith("Needs review: the deployed model disagrees with FP32 on night (IoU 0.70, red)")
    assert "recalibrating on night does not fix it" in lines[0]
    # (c) fixes one, breaks another
    d, lines = verdict([_site("day", (0.95, "green"), (0.82, "amber")), _site("night", (0.7, "red"), (0.94, "green"))], "day", "night", cfg)
    assert d == "needs review"
    assert "recalibrating on night fixes night but breaks day; consider a calibration set that covers both conditions" in lines[0]
    # (d) candidate green everywhere
    d, lines = verdict([_site("day", (0.95, "green"), (0.93, "green")), _site("night", (0.7, "red"), (0.94, "green"))], "day", "night", cfg)
    assert d == "switch to candidate" and lines[0].startswith("Switch to the candidate (calibrated on night): it agrees with FP32 on every site set and fixes night")
    # (e) all green, candidate no better
    d, lines = verdict([_site("day", (0.95, "green"), (0.83, "amber")), _site("night", (0.92, "green"), (0.94, "green"))], "day", "night", cfg)
    assert d == "keep deployed" and lines[0].startswith("Keep deployed: the deployed model agrees with FP32 on every site set; recalibrating on night would break day")
    d, lines = verdict([_site("day", (0.95, "green"))], "day", None, cfg)
    assert d == "keep deployed" and lines[0] == "Keep deployed: the deployed model agrees with FP32 on every site set (day IoU 0.95)."


def test_drift_column_agrees_with_the_model(paths):
    from quantkit.report.build import _cause, drift_label

    unaffected = _site("cam2-day", (0.95, "green"), drift=CAMERA)
    assert drift_label(unaffected) == ("changed — model unaffected", "neutral")
    assert drift_label(_site("cam2-day", (0.85, "amber"), drift=CAMERA)) == ("recalibrate", "red")
    assert drift_label(_site("cam1-day", (0.95, "green"), drift={"recalibrate": False})) == ("stable", "green")
    d, lines = __import__("quantkit.report.build", fromlist=["verdict"]).verdict([unaffected], "cam1-day", None, ReportConfig())
    assert d == "keep deployed" and "On cam2-day the camera or optics changed (sharpness fell 68%) but the deployed model still agrees" in lines[1]
    assert _cause(NIGHT) == "lighting changed (brightness fell 70%)"  # "blown-out pixels changed from 0 to 0" says nothing
    # the drift JSON's own recommendation is kept; the HTML words follow the model
    r = build_report(_inputs(paths))
    assert r.metrics_dict()["cam2-day"]["drift"]["recalibrate"] is True


def test_threshold_set_bound_to_another_record_is_refused(paths, tmp_path, capsys):
    out = tmp_path / "reports"
    args = _args(paths, out)
    args[args.index("--deployed-thresholds") + 1] = str(paths["candidate_thresholds"])
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "was derived for calibration 'cam1-night'" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    edited = tmp_path / "edited.json"
    edited.write_text(paths["deployed_thresholds"].read_text().replace("0.3", "0.35", 1))
    args = _args(paths, out)
    args[args.index("--deployed-thresholds") + 1] = str(edited)
    assert main(args) == 2 and "fingerprint does not match" in capsys.readouterr().err and not out.exists()


def test_params_errors_name_the_file_and_out_must_be_a_folder(paths, tmp_path, capsys):
    params = tmp_path / "site-options.yaml"
    params.write_text("report:\n  min_pixel_iou: 1.5\n")
    out = tmp_path / "reports"
    assert main(_args(paths, out) + ["--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert f"{params}:report.min_pixel_iou: 1.5 must be in (0, 1]" in err and "params.yaml" not in err and not out.exists()
    params.write_text("report:\n  min_iou: 0.9\n")
    assert main(_args(paths, out) + ["--params", str(params)]) == 2
    assert f"{params}:report: unknown option 'min_iou'" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(_args(paths, afile)) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and len(err.strip().splitlines()) == 1 and afile.read_text() == "x"


def test_site_metrics_pool_pixel_iou_over_images_like_evaluate():
    import pandas as pd

    from quantkit.report.build import ReportConfig, site_metrics

    rows = []
    for image, (inter, union) in {"a.jpg": (90, 100), "b.jpg": (1, 10)}.items():
        rows.append({"image": image, "variant": "fp32", "n_detections": 2, "pixel_iou_vs_fp32": 1.0, "box_f1_vs_fp32": 1.0,
                     "pixel_intersection": union, "pixel_union": union, "agree_tp": 2, "agree_fp": 0, "agree_fn": 0})
        rows.append({"image": image, "variant": "deployed", "n_detections": 2, "pixel_iou_vs_fp32": inter / union, "box_f1_vs_fp32": 0.5,
                     "pixel_intersection": inter, "pixel_union": union, "agree_tp": 1, "agree_fp": 1, "agree_fn": 1})
    deployed = next(m for m in site_metrics("s", pd.DataFrame(rows), None, ReportConfig()) if m.variant == "deployed")
    assert deployed.pixel_iou_vs_fp32 == pytest.approx(91 / 110)  # pooled, not the per-image mean 0.5
    assert deployed.box_f1_vs_fp32 == pytest.approx(0.5)

"""The shift report's evidence: a switch needs a paired interval (or a site set the candidate fixes), and what the
pipeline knows (verification, FP32 going blind) is named in the verdict. Each verdict branch is built from small
synthetic artifacts (quantkit.report.synthetic)."""

from __future__ import annotations

import dataclasses

import shutil

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from quantkit.errors import BindingMismatchError, InputFileError
from quantkit.report import ModelInputs, ReportConfig, build_report
from quantkit.report.paired import paired_difference
from quantkit.report.synthetic import write_inputs, write_verification
from quantkit.thresholds.stats import bootstrap_ratio

BOTH_GREEN = {"cam1-day": {"deployed": 0.95, "candidate": 0.95}, "cam1-night": {"deployed": 0.94, "candidate": 0.94},
              "cam2-day": {"deployed": 0.95, "candidate": 0.95}}


def _frame(rows: dict[str, tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    out = []
    for variant, (num, den) in rows.items():
        out += [{"image": f"{i:03d}.jpg", "variant": variant, "inter": a, "union": b} for i, (a, b) in enumerate(zip(num, den))]
    return pd.DataFrame(out)


def test_pairing_sees_a_small_consistent_gain_that_two_separate_intervals_hide():
    rng = np.random.default_rng(1)
    den = np.full(30, 1000.0)
    dep = rng.uniform(0.6, 1.0, 30) * den  # images differ a lot from each other ...
    cand = dep + 10.0  # ... but the candidate gains 0.01 on every one of them
    frame = _frame({"deployed": (dep, den), "candidate": (cand, den)})
    p = paired_difference({"site": frame}, "iou", "inter", "union")
    assert p.difference == pytest.approx(0.01) and p.images == 30 and p.better and not p.worse
    separate = [bootstrap_ratio(x, den, resamples=1000, seed=0, confidence=0.95, empty=1.0, factor=1.0).ci for x in (dep, cand)]
    assert separate[1][0] < separate[0][1]  # the per-model intervals overlap: they could not tell
    assert paired_difference({"site": frame}, "iou", "inter", "union") == p  # fixed seed: the same report every time
    assert re.fullmatch(r"a difference of \+0\.010 \(95% interval \+0\.0\d\d to \+0\.0\d\d, paired bootstrap over the same 30 images of site\)",
                        p.words())


def test_only_images_both_models_saw_are_compared_and_a_missing_count_is_named():
    den = np.full(6, 10.0)
    frame = _frame({"deployed": (np.full(6, 9.0), den), "candidate": (np.full(6, 8.0), den)})
    frame = frame[~((frame["variant"] == "candidate") & (frame["image"] == "005.jpg"))]
    p = paired_difference({"a": frame, "b": frame}, "iou", "inter", "union")
    assert p.images == 10 and p.sites == ("a", "b") and p.difference == pytest.approx(-0.1) and p.worse
    with pytest.raises(InputFileError, match=r"^a: per_image.csv has no 'tp'/'union' counts for deployed; rerun 'quantkit evaluate'$"):
        paired_difference({"a": frame}, "f1", "tp", "union")


def _model(tmp_path: Path, **kw) -> ModelInputs:
    p = write_inputs(tmp_path / "in", images_per_site=8, write_images=False, **kw)
    return ModelInputs.from_work_dir(p["work"], site_sets=p["site_sets"])


def test_two_green_models_without_a_material_difference_keep_the_deployed_one(tmp_path):
    m = build_report([_model(tmp_path, quality=BOTH_GREEN)]).models[0]
    overall = m.evidence[0]
    assert overall.ci[0] <= 0 <= overall.ci[1] and overall.images == 24 and len(m.evidence) == 4  # all sets, then each
    assert m.decision == "watch"  # cam1-night's images moved, agreement held: watch, the candidate no better
    assert m.verdict[0].startswith("Watch cam1-night and cam2-day: the images moved away from the calibration set, but the deployed model still agrees")
    assert m.verdict[1] == (f"No material difference with the candidate (pixel IoU {overall.difference:+.3f}, interval {overall.ci[0]:+.3f} to "
                            f"{overall.ci[1]:+.3f}, 24 images; the interval includes 0).")
    assert not any(v.startswith("To deploy it") for v in m.verdict)
    assert any(v.startswith("Candidate minus deployed on the same images (pixel IoU, paired bootstrap): cam1-day ") for v in m.verdict)


def test_a_candidate_closer_by_more_than_the_images_explain_is_a_switch(tmp_path):
    better = {s: {"deployed": 0.92, "candidate": 0.97} for s in BOTH_GREEN}
    m = build_report([_model(tmp_path, quality=better)]).models[0]
    assert m.evidence[0].better
    assert m.decision == "switch to candidate" and "the interval excludes 0" in m.verdict[0] and f"{m.evidence[0].difference:+.3f}" in m.verdict[0]
    assert any(v.startswith("To deploy it:") for v in m.verdict)


def test_a_candidate_green_where_the_deployed_model_is_not_is_a_switch(tmp_path):
    fixes = {**BOTH_GREEN, "cam1-night": {"deployed": 0.84, "candidate": 0.95}}
    m = build_report([_model(tmp_path, quality=fixes)]).models[0]
    assert m.site("cam1-night").variant("deployed").status != "green"
    assert m.decision == "switch to candidate" and "fixes cam1-night" in m.verdict[0]


def test_verification_is_named_and_a_failed_one_changes_the_verdict(tmp_path):
    inputs = _model(tmp_path, quality=BOTH_GREEN)
    assert any(v.startswith("The deployed bundle is not verified: no verify.json") for v in build_report([inputs]).models[0].verdict)
    write_verification(inputs.eval_dir.parent, {"onnxruntime": "verified", "openvino": "failed"})
    m = build_report([inputs]).models[0]
    assert m.decision == "needs review" and m.verdict[0].startswith("The deployed model's bundle failed verification on openvino: do not ship it")
    assert any(v.startswith("For engineers: The deployed bundle failed verification on openvino 1.0 ([decision] 0001:") for v in m.verdict[m.reasons:])
    assert any(v.startswith("No material difference with the candidate") for v in m.verdict[:m.reasons])
    assert not any("deployable" in v for v in m.verdict)  # one word per situation: it passes verification on onnxruntime, fails on openvino
    assert any(v.startswith("The deployed bundle passes verification on onnxruntime 1.0: its decisions agree with FP32") for v in m.verdict)
    assert build_report([inputs]).to_dict()["models"]["ppocr_det"]["verified"] is False


def test_a_numeric_mismatch_alone_is_a_warning_naming_the_tensor(tmp_path):
    inputs = _model(tmp_path, quality=BOTH_GREEN)
    write_verification(inputs.eval_dir.parent, {"onnxruntime": "numbers", "openvino": "absent"})
    m = build_report([inputs]).models[0]
    assert m.decision == "watch" and any(v.startswith("No material difference") for v in m.verdict[:m.reasons])
    assert ("Warning for engineers: on onnxruntime 1.0 the deployed bundle makes the simulation's decisions but its numbers differ; "
            "first diverging tensor 'conv3_out' (Conv 'conv3'); it passes verification.") in m.verdict
    assert "openvino was not installed where verify ran: the deployed bundle is not verified on it." in m.verdict


def test_a_verification_of_another_bundle_is_refused(tmp_path):
    inputs = _model(tmp_path, quality=BOTH_GREEN)
    path = write_verification(inputs.eval_dir.parent, {"onnxruntime": "verified"})
    path.write_text(path.read_text().replace(build_report([inputs]).models[0].provenance["deployed"]["record"], "f" * 64))
    with pytest.raises(BindingMismatchError, match=r"verify.json: verifies a bundle of record ffffffffffff .* rebuild and verify the bundle"):
        build_report([inputs])


def test_fp32_going_blind_on_an_unlabelled_site_is_named_and_needs_review(tmp_path):
    m = build_report([_model(tmp_path, quality=BOTH_GREEN, items={"cam1-night": 0}, labelled=False)]).models[0]
    night, day = (m.site(s).variant("fp32").detections_per_image for s in ("cam1-night", "cam1-day"))
    assert night < 0.5 * day and all(x.status == "green" for s in m.sites for x in s.metrics)  # agreement alone says green
    assert m.decision == "needs review"
    assert re.match(r"FP32 itself finds (\d+\.\dx fewer|no) text regions per image on cam1-night \(\d\.\d\d\) than on cam1-day "
                    r"\(\d\.\d\d, the calibration condition\)", m.verdict[0])
    ok = build_report([_model(tmp_path / "ok", quality=BOTH_GREEN, labelled=False)]).models[0]
    assert ok.decision == "watch" and "FP32 itself" not in " ".join(ok.verdict)
    assert ReportConfig(fp32_min_detection_ratio=0.0).fp32_min_detection_ratio == 0.0


def test_html_explains_its_words_and_shows_commands_to_copy(tmp_path):
    from quantkit.report.glossary import TERMS
    from quantkit.report.render import render_html, render_markdown

    better = {s: {"deployed": 0.92, "candidate": 0.97} for s in BOTH_GREEN}
    report = build_report([_model(tmp_path, quality=better)])
    html, md = render_html(report), render_markdown(report)
    verdict_box = html[html.index('<div class="verdict'):html.index("<h2>At a glance")]
    assert verdict_box.count('<div class="cmd"><pre>') == 2 and verdict_box.count('class="copy"') == 2  # dvc repro, dvc metrics diff
    assert "```bash\ndvc repro\ndvc metrics diff\n```" in md
    glossary = html[html.index('id="glossary"'):html.index("<h2>At a glance")]  # where the words first appear, folded
    terms = re.findall(r"<dt>(.*?)</dt>", glossary)
    assert len(terms) == len(set(terms)) and {t for t, _ in TERMS} <= set(terms)
    for term in ("pixel IoU", "text region F1", "PSI", "KS", "W1 / Wasserstein", "confidence interval (CI)", "calibration", "INT8", "FP32", "candidate"):
        assert term in terms, term
    assert not re.search(r"\d ms\b", html) and ReportConfig().candidate_latency is False  # timings live in machine/*.js only


def test_one_bundle_per_target_runtime_is_read_from_its_own_folder(tmp_path):
    """params targets: each runtime's bundle (its own placement of the deployed calibration) verified on that runtime;
    the report names each, a failed one changes the verdict, a missing one says which runtime is not verified, and a
    folder whose ranges are not the deployed record's is refused."""
    from quantkit.report.synthetic import write_target

    inputs = _model(tmp_path, quality=BOTH_GREEN)
    work = inputs.eval_dir.parent
    targets = ModelInputs.from_work_dir(work, site_sets=inputs.site_sets, targets=("onnxruntime", "openvino"))
    assert targets.verification is None and [rt for rt, _ in targets.targets] == ["onnxruntime", "openvino"]
    write_target(work, "onnxruntime", "verified")
    m = build_report([targets]).models[0]
    assert "The deployed model is not verified on openvino: no targets/openvino/verify.json in the model's work folder (the pipeline's verify stage writes it)." in m.verdict
    assert "The deployed model's bundle for onnxruntime 1.0 passes verification there: its decisions agree with FP32 on the site sets within the bound set at binding." in m.verdict
    assert "Not verified on openvino: the deployed model's bundle has no verification there." in m.verdict[:m.reasons]
    write_target(work, "openvino", "verified")
    m = build_report([targets]).models[0]
    assert m.decision == "watch" and not any("not verified" in v.lower() for v in m.verdict)
    assert any(v.startswith("The deployed model's bundles, one per target runtime (one calibration set, each runtime's own file: the recipe chosen for it), pass "
                            "verification on onnxruntime 1.0 and openvino 1.0: its decisions agree with FP32") for v in m.verdict)
    assert not any("box f1" in v for v in m.verdict)  # one agreement metric per model: the task's primary (pixel IoU here)
    shutil.rmtree(work / "targets" / "openvino")
    write_target(work, "openvino", "failed")
    m = build_report([targets]).models[0]
    assert m.decision == "needs review" and m.verdict[0].startswith("The deployed model's bundle failed verification on openvino: do not ship it")
    record = work / "targets" / "openvino" / "quantize" / "record.json"
    text = record.read_text()
    record.write_text(text.replace('"ranges_from": "', '"ranges_from": "0'))
    build_report([targets])  # another recipe's file (NNCF's, say) from the same calibration set is accepted
    from quantkit.artifacts import CalibrationRecord

    rec = CalibrationRecord.load(record)
    other = dataclasses.replace(rec.calibration_set, set_id="0" * 64)  # another calibration set: its own fingerprint
    rec = dataclasses.replace(rec, calibration_set=other,
                              fingerprint=CalibrationRecord.compute_fingerprint(rec.tensors, rec.model_digest, other.set_id, rec.config_hash))
    rec.save(record)
    with pytest.raises(BindingMismatchError, match=r"targets/openvino/quantize: not made from the deployed record's calibration"):
        build_report([targets])


def test_how_each_runtimes_file_was_chosen_is_shown(tmp_path):
    """A target whose file was chosen among recipes (choice.json): the report shows every recipe's agreement with its
    interval and speed against the best float run, which one is deployed and why, and what was not built."""
    import json

    from quantkit.report.render import render_html
    from quantkit.report.synthetic import write_target

    inputs = _model(tmp_path, quality=BOTH_GREEN)
    work = inputs.eval_dir.parent
    targets = ModelInputs.from_work_dir(work, site_sets=inputs.site_sets, targets=("onnxruntime", "openvino"))
    write_target(work, "onnxruntime", "verified")
    folder = write_target(work, "openvino", "verified")
    fig = {"images": 24, "best_float": "fp32-default", "best_float_ms": 20.0, "fingerprint": ""}
    choice = {"runtime": "openvino", "chosen": "nncf", "rule": "meets", "reason": "nncf: agreement 0.988, 1.31x the best float run",
              "target": 0.9, "tolerance": 0.01, "metric": "pixel_iou", "cpu": "Test CPU (x86_64; avx2)", "threads": 0,
              "figures": [{**fig, "name": "openvino", "agreement": 0.968, "ci": [0.964, 0.972], "median_ms": 14.0, "vs_best_float": 1.4286},
                          {**fig, "name": "nncf", "agreement": 0.988, "ci": [0.985, 0.989], "median_ms": 15.3, "vs_best_float": 0.97}],
              "skipped": [{"recipe": "nncf:openvino", "why": "nncf is not installed here"}]}
    (folder / "quantize" / "choice.json").write_text(json.dumps(choice))
    m = build_report([targets]).models[0]
    assert [c["runtime"] for c in m.recipes] == ["openvino"]
    html = render_html(build_report([targets]))
    assert "how ppocr_det's INT8 file for each runtime was chosen (openvino)" in html and "Test CPU (x86_64; avx2)" in html
    assert '<td class="l">nncf</td><td>0.988<br><small>95% CI 0.985–0.989</small></td><td class="alert">0.97x</td><td class="l">yes</td>' in html
    assert '<td class="l">openvino</td><td>0.968<br><small>95% CI 0.964–0.972</small></td><td class="">1.43x</td><td class="l"></td>' in html
    assert "not built: nncf is not installed here" in html and "openvino: nncf: agreement 0.988, 1.31x the best float run." in html
    assert "The fallback started from" not in html
    choice.update(chosen="fallback", reason="fallback: agreement 0.978, 1.30x the best float run",
                  fallback={"from": "nncf:ort", "target": 0.977, "search_images": 16, "kept_in_float": 76, "met_on_search": True, "on_search": 0.978})
    (folder / "quantize" / "choice.json").write_text(json.dumps(choice))
    html = render_html(build_report([targets]))
    assert ("openvino: fallback: agreement 0.978, 1.30x the best float run. The fallback started from nncf:ort and kept 76 nodes in float "
            "to reach 0.977 on 16 calibration images.") in html
    from quantkit.report.render import render_markdown

    md = render_markdown(build_report([targets]))  # the engineers' table in shift_report.md too (a new user's trial)
    assert "### How ppocr_det's INT8 file for each runtime was chosen" in md
    assert "| openvino | nncf | 0.988 [0.985, 0.989] | 0.97x |  |" in md and "| openvino | nncf:openvino | not built: nncf is not installed here | | |" in md
    assert "- openvino: fallback: agreement 0.978, 1.30x the best float run. The fallback started from nncf:ort" in md


def _measured(path: Path, rows: dict[str, tuple[float, float]]) -> Path:
    """A ``measurements.json`` (quantkit measure) with the candidate's speed per runtime: ``{runtime: (vs_deployed, vs_best_float)}``."""
    import json

    latency = [{"model": "ppocr_det", "variant": "candidate", "runtime": rt, "threads": 1, "median_ms": 10.0, "vs_fp32": 1.5,
                "vs_deployed": d, "best_float": "fp32", "vs_best_float": b, "placement": None} for rt, (d, b) in rows.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema_version": 3, "latency": latency}))
    return path


def test_no_switch_where_the_candidate_is_slower_than_the_deployed_file(tmp_path):
    """ppocr_det: the candidate agrees more closely but runs at 0.70x the deployed file on OpenVINO (below its own float
    run): the decision switches on ONNX Runtime only, names OpenVINO, and shows deploy commands; slower everywhere: keep,
    and no deploy commands under a keep."""
    from quantkit.report.render import render_html, render_markdown

    better = {s: {"deployed": 0.92, "candidate": 0.97} for s in BOTH_GREEN}
    base = _model(tmp_path, quality=better)
    inputs = ModelInputs.from_work_dir(base.eval_dir.parent, site_sets=base.site_sets,
                                       measurements=_measured(tmp_path / "machine" / "ppocr_det" / "measurements.json",
                                                              {"onnxruntime": (1.05, 2.0), "openvino": (0.70, 0.9)}))
    report = build_report([inputs])
    m = report.models[0]
    assert (m.decision, m.label, m.choice.excluded) == ("switch on runtime", "switch on onnxruntime", ("openvino",))
    assert m.verdict[1].startswith("Keep the deployed model on openvino: on openvino the candidate runs slower than the deployed file "
                                   "and below openvino's own fp32 run")
    assert any(v.startswith("To deploy it for onnxruntime only:") for v in m.verdict)
    assert "SWITCH ON ONNXRUNTIME" in render_markdown(report) and 'class="decision">switch on onnxruntime<' in render_html(report)
    _measured(inputs.measurements, {"onnxruntime": (0.90, 2.0), "openvino": (0.70, 0.9)})  # 0.90x: beyond the timing noise
    report = build_report([inputs])
    m = report.models[0]
    assert (m.decision, m.choice.rule) == ("keep deployed", "candidate-slower-everywhere") and not m.choice.deploys
    html = render_html(report)
    assert not any(v.startswith("To deploy it") for v in m.verdict) and '<div class="cmd">' not in html[:html.index("<h2>At a glance")]


def test_a_fallback_candidate_is_verified_on_each_runtime_it_switches_on():
    """The deploy commands under a switch verify the bundle on the runtimes it is to run on, not on one by default."""
    import types

    from quantkit.report.candidate import deploy_commands

    fb = types.SimpleNamespace(reference_sets=(types.SimpleNamespace(path="reference_sets/cam1-day"),))
    work = Path("work/models/ppocr_det")
    cmds = deploy_commands("ppocr_det", work / "quantize/candidate", work / "thresholds/candidate.json", fb, ["site_sets/cam1-day"],
                           ("onnxruntime", "openvino"))
    assert cmds[0].startswith("quantkit bundle ") and len(cmds) == 3
    assert "--runtime onnxruntime" in cmds[1] and cmds[1].endswith("verify-candidate-onnxruntime.json")
    assert "--runtime openvino" in cmds[2] and cmds[2].endswith("verify-candidate-openvino.json")


def test_a_switch_names_the_candidate_bundle_verified_on_each_runtime(tmp_path):
    """The candidate's bundle verified on each target runtime (verify-candidate.json, the verify_candidate stage): a
    runtime where it failed is left out of the switch with the reason, the switch names the verified bundle instead of
    commands that would build one, and a candidate verified nowhere leaves the decision as the speed alone makes it."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.artifacts.thresholds import ThresholdSet
    from quantkit.report.synthetic import _verification, write_target

    better = {s: {"deployed": 0.92, "candidate": 0.97} for s in BOTH_GREEN}
    base = _model(tmp_path, quality=better)
    work = base.eval_dir.parent
    for rt in ("onnxruntime", "openvino"):
        write_target(work, rt, "verified")
    inputs = ModelInputs.from_work_dir(work, site_sets=base.site_sets, targets=("onnxruntime", "openvino"),
                                       measurements=_measured(tmp_path / "machine" / "ppocr_det" / "measurements.json",
                                                              {"onnxruntime": (1.05, 2.0), "openvino": (1.02, 1.3)}))
    m = build_report([inputs]).models[0]
    assert m.decision == "switch to candidate"  # no candidate bundle verified: how to build one
    assert any(v.startswith("To deploy it: set the model's sets.deployed.calibration") for v in m.verdict)
    rec, ts = CalibrationRecord.load(work / "quantize" / "candidate"), ThresholdSet.load(work / "thresholds" / "candidate.json")
    for rt, state in (("onnxruntime", "verified"), ("openvino", "failed")):
        _verification(rec, ts, {rt: state}, list(BOTH_GREEN)).save(work / "targets" / rt / "verify-candidate.json")
    m = build_report([inputs]).models[0]
    assert (m.decision, m.label, m.choice.excluded) == ("switch on runtime", "switch on onnxruntime", ("openvino",))
    assert m.verdict[1].startswith("Keep the deployed model on openvino: on openvino the candidate's bundle failed verification (")
    shipped = [v for v in m.verdict if v.startswith("To deploy it:")]
    assert len(shipped) == 1 and "verified on onnxruntime:" in shipped[0] and "quantkit-bundle-" in shipped[0] and not m.deploy
    assert not any("sets.deployed.calibration" in v for v in m.verdict) and m.shipped
    assert "dist/ppocr_det-candidate/quantkit-bundle-" in shipped[0]
    from quantkit.report.render import verdict_commands

    assert verdict_commands(m) == ()  # no "dvc repro" block under a bundle already verified
    dep, dep_ts = CalibrationRecord.load(work / "quantize" / "deployed"), ThresholdSet.load(work / "thresholds" / "deployed.json")
    _verification(dep, dep_ts, {"onnxruntime": "verified"}, list(BOTH_GREEN)).save(work / "targets" / "onnxruntime" / "verify-candidate.json")
    with pytest.raises(BindingMismatchError, match="verify-candidate.json: verifies a bundle of record"):
        build_report([inputs])

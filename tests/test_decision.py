"""The one decision table (quantkit.decision): every rule on its own, from small evidence."""

from __future__ import annotations

import dataclasses

import pytest

from quantkit.decision import (
    DEPLOYS,
    FIRST_SCREEN,
    KEEP,
    REVIEW,
    RULES,
    SWITCH,
    SWITCH_ON,
    WATCH,
    AgreementPolicy,
    Evidence,
    Paired,
    RuntimeEvidence,
    SiteEvidence,
    decide,
)


def site(name, dep=0.95, cand=None, *, dep_ok=None, cand_ok=None, paired=None, **kw):
    return SiteEvidence(name, dep, dep >= 0.9 if dep_ok is None else dep_ok, candidate=cand,
                        candidate_ok=(cand is not None and cand >= 0.9) if cand_ok is None else cand_ok, paired=paired, **kw)


def ev(*sites, cand="night", overall=None, runtimes=()):
    return Evidence("top-1 agreement", "class decisions", tuple(sites), tuple(runtimes), cand, overall)


BETTER = Paired(0.05, (0.02, 0.08), 64, better=True)
SAME = Paired(0.01, (-0.01, 0.03), 64)
WORSE = Paired(-0.125, (-0.250, -0.031), 32, worse=True)


def test_the_table_has_one_decision_per_rule_and_notes_last():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) and RULES[-6].name == "keep" and all(r.decision is None for r in RULES[-5:])
    assert set(DEPLOYS) == {SWITCH, SWITCH_ON}


def test_deployed_bundle_failing_verification_needs_review_first():
    d = decide(ev(site("day", 0.95, 0.97, paired=BETTER), overall=BETTER,
                  runtimes=[RuntimeEvidence("openvino", "failed", "[decision] 0001: 3 boxes vs 4"), RuntimeEvidence("onnxruntime")]))
    assert (d.decision, d.rule) == (REVIEW, "deployed-fails-verification")
    assert d.reasons[0].startswith("The deployed model's bundle failed verification on openvino: do not ship it there")
    assert "[decision]" not in " ".join(d.reasons)  # verify's own metric stays in the evidence: one metric per model


def test_fp32_failing_against_labels_needs_review():
    d = decide(ev(site("flip", 0.95, fp32_fails="exact accuracy 0.00 against the labels"), cand=None))
    assert (d.decision, d.rule) == (REVIEW, "fp32-fails") and "the model, not the quantization" in d.reasons[0]
    d = decide(ev(site("day", 0.7, fp32_fails="f1 0.10 against the labels"), cand=None))
    assert d.reasons[1] == "The deployed model disagrees with FP32 on day (top-1 agreement 0.70)."  # note-deployed-disagrees, once


def test_fp32_going_blind_needs_review_and_never_says_no_action():
    """ddddocr_det: FP32 finds 8x fewer boxes at night; the deployed model agrees there (by finding nothing too)."""
    d = decide(ev(site("day"), site("night", 0.97, moved=True, fp32_blind="finds 8.0x fewer boxes per image on night than on day"), cand=None))
    assert (d.decision, d.rule) == (REVIEW, "fp32-blind")
    assert not any("no action" in r or "deployable" in r for r in d.reasons)
    assert any(r.startswith("Watch night") for r in d.reasons)  # the images moved, agreement held: watch, not recalibrate


def test_user_classifier_candidate_significantly_worse_where_it_looks_fixed():
    """A status that improved is no fix when the paired interval says the candidate is worse there."""
    d = decide(ev(site("cam1-day", 0.85, 0.93, paired=WORSE), site("cam1-night", 0.95, 0.96, paired=SAME)))
    assert (d.decision, d.rule) == (REVIEW, "candidate-worse-where-deployed-disagrees")
    assert "significantly worse on cam1-day (-0.125, interval -0.250 to -0.031, 32 images)" in d.reasons[1]
    assert not any("fixes cam1-day" in r for r in d.reasons)


def test_agreement_held_but_count_changed_is_not_called_disagreement_with_that_number():
    """"disagrees with FP32 (top-1 agreement 1.00, red)": the count moved, not the agreement; the words say so."""
    s = SiteEvidence("cam1", 1.0, False, 0.45, None)
    d = decide(ev(s, cand=None))
    assert (d.decision, d.rule) == (REVIEW, "deployed-disagrees")
    assert "cam1 (top-1 agreement 1.00, class decisions per image +45% vs FP32)" in d.reasons[0]


def test_candidate_that_does_not_fix_needs_review_with_the_advice():
    s = site("night", 0.7, 0.8, paired=Paired(0.1, (0.05, 0.15), 32, better=True), advice="recalibrate: the lighting changed")
    d = decide(ev(site("day", 0.95, 0.95, paired=SAME), s))
    assert (d.decision, d.rule) == (REVIEW, "candidate-does-not-fix")
    assert d.reasons[1] == "The candidate (calibrated on night) still disagrees on night (top-1 agreement 0.80)."
    assert d.reasons[2] == "What to do: night: recalibrate: the lighting changed."


def test_deployed_disagreeing_without_candidate_groups_the_advice():
    d = decide(ev(site("a", 0.7, advice="quantization loss: recover accuracy"), site("b", 0.6, advice="quantization loss: recover accuracy"),
                  cand=None))
    assert (d.decision, d.rule) == (REVIEW, "deployed-disagrees") and d.reasons[1] == "What to do: a and b: quantization loss: recover accuracy."


def _fixing(*runtimes):
    return ev(site("day", 0.95, 0.95, paired=SAME), site("night", 0.7, 0.95, paired=BETTER), runtimes=runtimes)


def test_a_fix_slower_everywhere_needs_review():
    d = decide(_fixing(RuntimeEvidence("openvino", candidate_vs_deployed=0.69, candidate_vs_best_float=0.95)))
    assert (d.decision, d.rule) == (REVIEW, "candidate-slower-everywhere-needed") and d.excluded == ("openvino",)
    assert "on openvino the candidate runs slower than the deployed file (measured on the machine that built this report)" in d.reasons[1]
    assert not any(ch.isdigit() for ch in d.reasons[1].split("openvino", 1)[1])  # no machine-dependent figures in a tracked report


def test_a_closer_candidate_slower_everywhere_is_kept_out():
    d = decide(ev(site("day", 0.93, 0.97, paired=BETTER), overall=BETTER, runtimes=[RuntimeEvidence("openvino", candidate_vs_deployed=0.7)]))
    assert (d.decision, d.rule) == (KEEP, "candidate-slower-everywhere") and not d.deploys


def test_ppocr_det_switch_only_where_the_candidate_is_not_slower():
    """ppocr_det: the candidate exists only in ONNX Runtime's placement; on OpenVINO it runs at 0.70x the deployed file."""
    d = decide(_fixing(RuntimeEvidence("onnxruntime", candidate_vs_deployed=1.02, candidate_vs_best_float=2.1),
                       RuntimeEvidence("openvino", candidate_vs_deployed=0.70, candidate_vs_best_float=0.9, best_float="fp32-default")))
    assert (d.decision, d.rule, d.runtimes, d.excluded) == (SWITCH_ON, "switch-on-runtime", ("onnxruntime",), ("openvino",))
    assert d.label == "switch on onnxruntime" and d.deploys and d.keys == ("onnxruntime",)
    assert d.reasons[0].startswith("Switch to the candidate (calibrated on night) on onnxruntime only: it agrees with FP32 on every site set and fixes night")
    assert d.reasons[1].startswith("Keep the deployed model on openvino: on openvino the candidate runs slower than the deployed file and "
                                   "below openvino's own fp32-default run")


def test_a_runtime_where_the_candidate_bundle_failed_verification_is_left_out_of_the_switch():
    """Verified on ONNX Runtime, failed on OpenVINO (speed not measured on either): switch on onnxruntime only, and the
    reason for OpenVINO is the failure, not a speed."""
    d = decide(_fixing(RuntimeEvidence("onnxruntime", candidate="deployable"),
                       RuntimeEvidence("openvino", candidate="failed", candidate_failure="2 of 4 decisions differ")))
    assert (d.decision, d.runtimes, d.excluded) == (SWITCH_ON, ("onnxruntime",), ("openvino",))
    assert d.reasons[1] == "Keep the deployed model on openvino: on openvino the candidate's bundle failed verification (2 of 4 decisions differ)."
    d = decide(_fixing(RuntimeEvidence("onnxruntime", candidate="failed"), RuntimeEvidence("openvino", candidate="failed")))
    assert d.decision == REVIEW and d.rule == "candidate-slower-everywhere-needed"  # fails everywhere: not switched anywhere


def test_switch_when_the_candidate_fixes_or_is_materially_closer():
    d = decide(_fixing(RuntimeEvidence("onnxruntime")))  # not measured: no speed evidence against it
    assert (d.decision, d.rule) == (SWITCH, "switch") and d.deploys
    d = decide(ev(site("day", 0.92, 0.97, paired=BETTER), overall=BETTER))
    assert d.decision == SWITCH and "the interval excludes 0" in d.reasons[0]


def test_a_candidate_worse_somewhere_is_kept_out_when_the_deployed_model_agrees():
    d = decide(ev(site("cam1-day", 0.95, 0.92, paired=WORSE), site("cam2", 0.95, 0.99, paired=BETTER), overall=SAME))
    assert (d.decision, d.rule) == (KEEP, "candidate-worse") and "significantly worse on cam1-day (-0.125" in d.reasons[0]


def test_a_status_that_fell_while_agreement_rose_is_no_worse_by_the_interval():
    """"amber -> red" as agreement rose 0.91 -> 0.97: the candidate is judged by the paired interval, not the colour."""
    s = site("cam1", 0.91, 0.97, dep_ok=True, cand_ok=False, paired=Paired(0.06, (0.03, 0.09), 32, better=True))
    d = decide(ev(s, overall=s.paired))
    assert d.rule == "keep" and not any("worse" in r for r in d.reasons)


def test_images_that_moved_while_agreement_held_are_watched_not_recalibrated():
    d = decide(ev(site("day"), site("night", 0.95, moved=True), cand=None))
    assert (d.decision, d.rule) == (WATCH, "watch") and len(d.reasons) == 1
    assert d.reasons[0].startswith("Watch night: the images moved away from the calibration set") and "recalibrate" not in d.reasons[0]


def test_keep_with_its_notes():
    d = decide(ev(site("day", 0.95, 0.96, paired=SAME), site("night", 0.94, 0.95, moved=True, paired=SAME), overall=SAME,
                  runtimes=[RuntimeEvidence("openvino", "not verified")]))
    assert d.decision == WATCH  # the images moved: watch outranks keep
    d = decide(ev(site("day", 0.95, 0.96, paired=SAME), overall=SAME, runtimes=[RuntimeEvidence("openvino", "not verified")]))
    assert (d.decision, d.rule) == (KEEP, "keep") and not d.deploys
    assert d.reasons == ("The deployed model agrees with FP32 on every site set (day top-1 agreement 0.95).",
                         "No material difference with the candidate (top-1 agreement +0.010, interval -0.010 to +0.030, 64 images; the interval includes 0).",
                         "Not verified on openvino: the deployed model's bundle has no verification there.")
    assert len(d.first) <= FIRST_SCREEN


def test_a_camera_fault_where_agreement_held_is_named_not_watched():
    """cam2-day: the replacement camera is blurred (check camera) while INT8 still agrees: the set is not told to
    "watch"; the fault is named, and it does not wait for the agreement to fall."""
    blurred = dataclasses.replace(site("cam2", 0.96, None), moved=True, fault="check camera: defocus or a blurred lens")
    dark = dataclasses.replace(site("night", 0.95, None), moved=True)
    d = decide(ev(site("day", 0.95, None), blurred, dark))
    assert d.rule == "watch" and any(r.startswith("Watch night:") for r in d.reasons)
    assert not any("Watch cam2" in r or "Watch night and cam2" in r for r in d.reasons)
    assert any(r.startswith("cam2: check camera: defocus or a blurred lens (the deployed model still agrees") for r in d.reasons)


@pytest.mark.parametrize("rule", [r.name for r in RULES])
def test_every_rule_is_reached_by_some_test_above(rule):
    """Guards the table against a rule no test exercises."""
    reached = {"deployed-fails-verification", "fp32-fails", "fp32-blind", "candidate-worse-where-deployed-disagrees", "candidate-does-not-fix",
               "deployed-disagrees", "candidate-slower-everywhere-needed", "candidate-slower-everywhere", "switch-on-runtime", "switch",
               "candidate-worse", "watch", "keep", "note-no-material-difference", "note-watch", "note-unverified", "note-deployed-disagrees", "note-fault"}
    assert rule in reached


def test_agreement_policy_states_or_derives_each_number():
    p = AgreementPolicy(green=0.9, amber_band=0.1, floor=0.5, fleet_drop=0.15)
    assert p.red == pytest.approx(0.8) and p.fallback_target == 0.9 and p.holds(0.9) and not p.holds(0.89)
    assert not p.fell(0.95, 0.95) and not p.fell(0.99, 0.91) and p.fell(0.95, 0.7)


def test_a_speed_ratio_within_the_timing_noise_is_not_slower():
    """0.97x the deployed file is within run-to-run noise (SLOWER_BELOW): the switch stands; 0.90x is slower."""
    assert decide(_fixing(RuntimeEvidence("onnxruntime", candidate_vs_deployed=0.97, candidate_vs_best_float=1.5))).decision == SWITCH
    assert decide(_fixing(RuntimeEvidence("onnxruntime", candidate_vs_deployed=0.90, candidate_vs_best_float=1.5))).decision == REVIEW

"""The decision for a quality lead, in plain words (what to do first, then the facts behind it).

* **switch to candidate**: the candidate is green on every site set (and, when the deployed model is green
  everywhere too, agrees with FP32 more closely on average);
* **keep deployed**: the deployed model is green on every site set and no candidate does better;
* **needs review**: the deployed model is amber or red somewhere and the candidate does not fix every site set.

A candidate with the deployed model's record fingerprint is the deployed calibration itself (e.g. right after
deploying): nothing is compared and the deployed model is judged alone. Image changes (drift) are worded the same
way as ``quantkit drift`` words them ("changed", "no change"), combined with whether the model still agrees.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..artifacts.drift import DriftResult
from ..artifacts.evaluation import MetricInfo
from ..drift.advice import Finding, diagnose_result, finding
from .config import ReportConfig
from .model import STATUS_CODE, ShiftMetrics, SiteReport


def cause(drift: DriftResult | None) -> str:
    """The likely cause of a drift in plain words: the words of :func:`quantkit.drift.advice.diagnose`'s cause, with the
    statistics that moved (e.g. "the lighting changed (brightness fell 70%)"); "no image statistic moved" when none did.

    Less light also raises noise, shifts the colour cast and lowers sharpness, so those are not blamed on the camera
    then; the camera is named when sharpness fell more than the contrast explains, or noise rose in the same light.
    """
    if drift is None:
        return "no drift result to say why"
    from ..drift.statistics import describe_changes

    found = diagnose_result(drift)
    if found.cause in ("none", "quantization"):
        return "no image statistic moved"
    phrases = describe_changes(drift.changes)
    more = f"; {len(phrases) - 3} more" if len(phrases) > 3 else ""
    return f"{found.words} ({'; '.join(phrases[:3])}{more})" if phrases else found.words


def advice(site: SiteReport, metrics: Sequence[MetricInfo], cfg: ReportConfig) -> Finding:
    """What to do about a site set where the deployed model is not green, through the one table
    (:mod:`quantkit.drift.advice`): its drift, that the deployed INT8 model disagrees, and whether FP32 itself fails."""
    fails = fp32_fails(site, metrics, cfg) is not None
    if site.drift is None:
        return finding("new_content" if fails else "quantization")
    return diagnose_result(site.drift, agreement_low=True, fp32_fails=fails)


def what_to_do(sites: Sequence[SiteReport], metrics: Sequence[MetricInfo], cfg: ReportConfig) -> str:
    """One clause per action for the site sets ``sites`` (those where the deployed model is not green), e.g. "recalibrate
    for cam1-night (the lighting changed): compose a calibration set ..."; quantization loss is never "recalibrate"."""
    groups: dict[str, tuple[Finding, list[str], list[str]]] = {}
    for s in sites:
        f = advice(s, metrics, cfg)
        _, names, words = groups.setdefault(f.action.name, (f, [], []))
        names.append(s.name)
        words += [] if f.words in words else [f.words]
    return "; ".join(f"{f.action.badge} for {_names(names)} ({'; '.join(words)}): {f.action.fix}" for f, names, words in groups.values())


def drift_label(site: SiteReport) -> tuple[str, str]:
    """``(words, css class)`` of a site set's image change, read together with the deployed model's status: the
    same words ``quantkit drift`` prints ("changed", "no change"), plus what it means for the model."""
    if site.drift is None:
        return "–", ""
    if not site.drift.changed:
        return "no change", "green"
    dep = site.variant("deployed")
    if dep is not None and dep.status == "green":
        return "changed, model still agrees", "neutral"
    return f"changed, {diagnose_result(site.drift, agreement_low=True).action.badge}", "red"


def plural(word: str) -> str:
    """``box`` -> ``boxes``, ``text region`` -> ``text regions``, ``class decision`` -> ``class decisions``."""
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def _names(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def short(primary: MetricInfo) -> str:
    """The metric's label without "vs FP32" (the sentences say what it is compared with)."""
    return primary.label.replace(" vs FP32", "")


def value_words(m: ShiftMetrics, primary: MetricInfo) -> str:
    """``pixel IoU 0.87 (95% CI 0.85-0.89, 32 images)``."""
    v = m.agreement.get(primary.name, float("nan"))
    ci = f"95% CI {m.primary_ci[0]:.2f}-{m.primary_ci[1]:.2f}, " if m.primary_ci else ""
    return f"{short(primary)} {v:.2f} ({ci}{m.images} images)"


def _mean(d: dict[str, ShiftMetrics | None], primary: MetricInfo) -> float:
    vals = [m.agreement.get(primary.name, np.nan) for m in d.values() if m]
    return float(np.mean(vals)) if vals else float("nan")


def fp32_accuracy_metric(metrics: Sequence[MetricInfo]) -> MetricInfo | None:
    """The metric FP32 is judged by against the labels: the first accuracy metric the task adapter declares (its
    ``ACCURACY`` order, as the evaluation summary lists them) where higher is better, e.g. exact text accuracy for
    ``ctc_text`` (not its character error rate), top-1 accuracy for ``classifier``, F1 for ``db_text`` and
    ``box_detector``. None when the task declares none: an error rate has no floor on the 0..1 accuracy scale of
    ``report.fp32_min_accuracy``, so FP32 is not judged then."""
    return next((m for m in metrics if m.kind == "accuracy" and m.higher_is_better), None)


def fp32_fails(site: SiteReport, metrics: Sequence[MetricInfo], cfg: ReportConfig) -> tuple[str, float] | None:
    """``(metric, value)`` when FP32's accuracy against the site set's labels (:func:`fp32_accuracy_metric` of the
    task's ``metrics``) is below ``cfg.fp32_min_accuracy``; None when it is not, the set is unlabelled, or the task
    has no higher-is-better accuracy metric."""
    fp32 = site.variant("fp32")
    judged = fp32_accuracy_metric(metrics)
    if fp32 is None or judged is None or judged.name not in fp32.accuracy:
        return None
    value = fp32.accuracy[judged.name]
    return (judged.name, value) if value == value and value < cfg.fp32_min_accuracy else None


def _facts(sites: Sequence[SiteReport], dep: dict[str, ShiftMetrics | None], primary: MetricInfo, metrics: Sequence[MetricInfo], item: str,
           deployed_cal: str, cfg: ReportConfig) -> list[str]:
    facts = []
    for s in sites:
        failing = fp32_fails(s, metrics, cfg)
        if failing is not None:
            facts.append(f"On {s.name} FP32 itself gets {failing[0].replace('_', ' ')} {failing[1]:.2f} against the labels: the model, "
                         "not the quantization, fails there, and no calibration set can fix that; the model needs retraining or "
                         "the images a check (orientation, crop, exposure).")
        m = dep[s.name]
        if m is None:
            continue
        if m.status != "green":
            facts.append(f"On {s.name} the deployed INT8 model (calibrated on {deployed_cal}) agrees with FP32 at {value_words(m, primary)}, "
                         f"{m.status}, and changes {plural(item)} per image by {100 * m.detection_change:+.0f}%: {cause(s.drift)}.")
        elif s.drift is not None and s.drift.changed:
            facts.append(f"On {s.name} the images changed ({cause(s.drift)}) but the deployed model still agrees with FP32 "
                         f"({value_words(m, primary)}): no action needed there now.")
    return facts


def verdict(sites: Sequence[SiteReport], primary: MetricInfo, item: str, deployed_cal: str, candidate_cal: str | None, cfg: ReportConfig,
            *, metrics: Sequence[MetricInfo], same_calibration: bool = False) -> tuple[str, list[str]]:
    """Decision (one of :data:`quantkit.report.model.DECISIONS`) and plain sentences: the first says what to do and
    why, the others give the facts (sample sizes and 95% bootstrap CIs) and the commands that carry it out.

    ``metrics``: the task's metrics (:attr:`quantkit.artifacts.EvalSummary.metrics`, in the adapter's order with their
    direction); FP32's accuracy on labelled site sets is judged by :func:`fp32_accuracy_metric` of them."""
    dep = {s.name: s.variant("deployed") for s in sites}
    cand = {s.name: s.variant("candidate") for s in sites}
    bad = [n for n, m in dep.items() if m and m.status != "green"]
    has_candidate = bool(candidate_cal) and any(cand.values()) and not same_calibration
    facts = _facts(sites, dep, primary, metrics, item, deployed_cal, cfg)
    status_words = {n: f"{short(primary)} {m.agreement.get(primary.name, float('nan')):.2f}, {m.status}" for n, m in dep.items() if m}
    disagrees = "the deployed model disagrees with FP32 on " + _names([f"{n} ({status_words[n]})" for n in bad]) if bad else ""
    if not has_candidate:
        same = "the candidate is the deployed calibration, nothing to compare; " if same_calibration else ""
        if bad:
            todo = what_to_do([s for s in sites if s.name in bad], metrics, cfg)
            return "needs review", [f"Needs review: {same}{disagrees}; {todo}.", *facts]
        return "keep deployed", [f"Keep deployed: {same}the deployed model agrees with FP32 on every site set ("
                                 + ", ".join(f"{n} {short(primary)} {m.agreement.get(primary.name, float('nan')):.2f}" for n, m in dep.items() if m)
                                 + ").", *facts]
    # a candidate calibrated on the deployed model's own set (a fallback of it) is no recalibration
    recal = f"recalibrating on {candidate_cal}" if candidate_cal != deployed_cal else f"the candidate (also calibrated on {candidate_cal})"
    fixes = [n for n, c in cand.items() if c and dep[n] and STATUS_CODE[c.status] < STATUS_CODE[dep[n].status]]  # type: ignore[union-attr]
    breaks = [n for n, c in cand.items() if c and dep[n] and STATUS_CODE[c.status] > STATUS_CODE[dep[n].status]]  # type: ignore[union-attr]
    still = [n for n, c in cand.items() if c and c.status != "green" and n not in breaks]
    cand_green = all(c is not None and c.status == "green" for c in cand.values())
    md, mc = _mean(dep, primary), _mean(cand, primary)
    deploy_cmd = (f"To deploy it: set calibrations.deployed.calibration_set to the candidate's calibration set ({candidate_cal}) in params.yaml, "
                  "run 'dvc repro', review 'dvc metrics diff', and commit.")
    if cand_green and (bad or mc > md + 1e-9):
        decision = "switch to candidate"
        why = f"fixes {_names(fixes)}" if fixes else f"agrees more closely (mean {short(primary)} {mc:.2f} vs {md:.2f})"
        head = f"Switch to the candidate (calibrated on {candidate_cal}): it agrees with FP32 on every site set and {why}."
    elif not bad:
        decision = "keep deployed"
        if breaks:
            tail = f"{recal} would break {_names(breaks)}"
        elif cand_green:
            tail = f"the candidate (calibrated on {candidate_cal}) is green too but no closer (mean {short(primary)} {mc:.2f} vs {md:.2f})"
        else:
            tail = f"the candidate (calibrated on {candidate_cal}) is not green on {_names(still)}"
        head = f"Keep deployed: the deployed model agrees with FP32 on every site set; {tail}."
    else:
        decision = "needs review"
        fixed, better = [n for n in fixes if n not in still], [n for n in fixes if n in still]  # green now / better, not green
        if fixes and breaks:
            tail = f"{recal} {'fixes' if fixed else 'improves'} {_names(fixes)} but breaks {_names(breaks)}; compose a calibration set that covers both conditions"
        elif fixes:
            hopeless = [s.name for s in sites if s.name in still and fp32_fails(s, metrics, cfg)]
            advice = (f"FP32 itself fails on {_names(hopeless)} (below)" if hopeless == still
                      else "add images of those conditions to the calibration set")
            done = ([f"fixes {_names(fixed)}"] if fixed else []) + ([f"improves {_names(better)}"] if better else [])
            tail = f"{recal} {' and '.join(done)} but still disagrees on {_names(still)}; {advice}"
        else:
            tail = f"{recal} does not fix it; {what_to_do([s for s in sites if s.name in bad], metrics, cfg)}"
        head = f"Needs review: {disagrees}; {tail}."
    moves = [f"{n} {dep[n].status} → {c.status} ({short(primary)} {dep[n].agreement.get(primary.name, float('nan')):.2f} → "  # type: ignore[union-attr]
             f"{c.agreement.get(primary.name, float('nan')):.2f})" for n, c in cand.items() if c and dep[n]]
    lines = [head, *facts, f"The candidate (calibrated on {candidate_cal}): " + "; ".join(moves) + "."]
    changed = [f"{n} {100 * c.detection_change:+.0f}%" for n, c in cand.items() if c and abs(c.detection_change) > cfg.max_detection_change]
    if changed:
        lines.append(f"The candidate's {plural(item)} per image vs FP32: " + ", ".join(changed) + ".")
    if decision == "switch to candidate":
        lines.append(deploy_cmd)
    return decision, lines

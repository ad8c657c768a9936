"""The decision for a quality lead, in plain words (what to do first, then the facts behind it).

* **switch to candidate**: the candidate is green on every site set and either green where the deployed model is
  not, or (both green everywhere) closer to FP32 by more than the images can explain: the paired bootstrap
  interval of the improvement on the same images (:mod:`.paired`) excludes 0;
* **keep deployed**: the deployed model is green on every site set and no candidate does materially better
  ("no material difference; keep the deployed model", with the interval that includes 0);
* **needs review**: the deployed model is amber or red somewhere and the candidate does not fix every site set, or
  something the pipeline knows makes the deployed model doubtful: its bundle is not deployable on a target runtime
  (``verify.json``), or FP32 itself fails on a site set (against its labels) or loses most of its detections there
  (against the calibration condition), which agreement with FP32 cannot show.

A candidate with the deployed model's record fingerprint is the deployed calibration itself (e.g. right after
deploying): nothing is compared and the deployed model is judged alone. Image changes (drift) are worded the same
way as ``quantkit drift`` words them ("changed", "no change"), combined with whether the model still agrees.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..artifacts.drift import DriftResult
from ..artifacts.evaluation import MetricInfo
from ..artifacts.verification import DeploymentVerification
from ..drift.advice import Finding, diagnose_result, finding
from .config import ReportConfig
from .model import STATUS_CODE, ShiftMetrics, SiteReport
from .paired import PairedDifference


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


def reference_sites(sites: Sequence[SiteReport], calibration: tuple[str, str]) -> list[SiteReport]:
    """The site sets taken under the deployed model's calibration condition: same ``(camera, lighting)`` as its
    calibration set; else those whose images did not change vs the calibration set (drift "no change"); else none."""
    same = [s for s in sites if calibration[0] and (s.camera, s.lighting) == calibration]
    return same or [s for s in sites if s.drift is not None and not s.drift.changed]


def fp32_loses_detections(site: SiteReport, references: Sequence[SiteReport], cfg: ReportConfig) -> tuple[float, SiteReport] | None:
    """``(ratio, reference)`` when FP32 finds fewer than ``cfg.fp32_min_detection_ratio`` times the detections per
    image on ``site`` than on the reference site set with the most (:func:`reference_sites`); None otherwise, for a
    reference itself, or without references. A model blind on a site set agrees with FP32 there by finding nothing
    too, so agreement alone would call it green."""
    fp32 = site.variant("fp32")
    refs = [(r.variant("fp32"), r) for r in references if r.name != site.name and r.variant("fp32") is not None]
    if fp32 is None or not refs or site.name in {r.name for r in references}:
        return None
    best, ref = max(refs, key=lambda x: x[0].detections_per_image)  # type: ignore[union-attr]
    if best is None or best.detections_per_image <= 0:
        return None
    ratio = fp32.detections_per_image / best.detections_per_image
    return (ratio, ref) if ratio < cfg.fp32_min_detection_ratio else None


def fp32_concerns(sites: Sequence[SiteReport], metrics: Sequence[MetricInfo], item: str, calibration: tuple[str, str], cfg: ReportConfig) -> list[str]:
    """Site sets where FP32 itself is doubtful, in words: against the labels where the set has them
    (:func:`fp32_fails`), else by its detections per image against the calibration condition (:func:`fp32_loses_detections`)."""
    out, refs = [], reference_sites(sites, calibration)
    for s in sites:
        if s.labelled:
            failing = fp32_fails(s, metrics, cfg)
            if failing is not None:
                out.append(f"FP32 itself fails on {s.name} against its labels (below)")
            continue
        lost = fp32_loses_detections(s, refs, cfg)
        if lost is not None:
            ratio, ref = lost
            here, there = s.variant('fp32').detections_per_image, ref.variant('fp32').detections_per_image  # type: ignore[union-attr]
            finds = (f"{1 / ratio:.1f}x fewer {plural(item)} per image on {s.name} ({here:.2f}) than on {ref.name} ({there:.2f}, "
                     if ratio > 0 else f"no {plural(item)} on {s.name}, against {there:.2f} per image on {ref.name} (")
            out.append(f"FP32 itself finds {finds}the calibration condition), so agreeing with "
                       f"FP32 there cannot show what the model misses; check those images or the model before trusting green")
    return out


def verification_facts(v: DeploymentVerification | None, role: str = "deployed", *, per_runtime: bool = False,
                       unverified: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """``(concerns, facts)`` of the ``role`` bundle's deployment verification (``verify.json``).

    ``per_runtime``: ``v`` merges one bundle per target runtime (params ``targets``: each runtime's own Q/DQ placement of
    one calibration), each verified on its runtime; ``unverified``: target runtimes without a verification.

    A runtime where the bundle is not deployable (its decisions disagree, or it failed to load or run) is a concern;
    a runtime where the decisions agree but the numbers differ from the QDQ simulation is a fact (a warning for
    engineers, naming the first diverging tensor); a runtime not installed where verify ran is a fact. Without a
    verification: "not verified". ``RuntimeResult.deployable`` is None in files written before it existed: then the
    runtime's ``verified`` answers."""
    missing = [f"The {role} model is not verified on {rt}: no targets/{rt}/verify.json in the model's work folder (the pipeline's "
               f"verify stage writes it)." for rt in unverified]
    if v is None:
        return [], missing or [f"The {role} bundle is not verified: no verify.json in the model's work folder (the pipeline's verify stage writes it)."]
    def bundle(name: str) -> str:  # the bundle verified on runtime ``name``
        return f"the {role} model's bundle for {name}" if per_runtime else f"the {role} bundle"

    concerns, facts, ok = [], missing, []
    for r in v.runtimes:
        name = r.label or r.runtime
        if not r.installed:
            facts.append(f"{r.runtime} was not installed where verify ran: {bundle(r.runtime)} is not verified on it.")
            continue
        deployable = r.verified if r.deployable is None else r.deployable
        if not deployable:
            first = f" ({r.failures[0]})" if r.failures else ""
            concerns.append(f"{bundle(name)} failed verification" + ("" if per_runtime else f" on {name}") + first)
        elif not r.verified:
            where = f"; first diverging tensor {r.divergence}" if r.divergence else ""
            subject = bundle(name) if per_runtime else f"on {name} {bundle(name)}"
            what = ("differs from the simulation's decisions on a golden image but agrees with FP32 within the interval bound with "
                    "the thresholds" if any(f.startswith("[decision]") for f in r.failures) else
                    "makes the simulation's decisions but its numbers differ")
            facts.append(f"Warning for engineers: {subject} {what}{where}; it is deployable.")
            ok.append(name)
        else:
            ok.append(name)
    if ok:
        shown = ok if per_runtime else ok[:1]  # one bundle: its decisions on the first runtime; one per runtime: each one's
        agree = "; ".join(f"{name}: " + ", ".join(f"{s.site_set} {s.metric.replace('_', ' ')} {s.value:.2f} over {s.images} images"
                                                 for r in v.runtimes if (r.label or r.runtime) == name for s in r.sites) for name in shown)
        what = (f"The {role} model's bundles, one per target runtime (one calibration, each runtime's own Q/DQ placement), are"
                if per_runtime and len(ok) > 1 else f"{bundle(ok[0])[0].upper()}{bundle(ok[0])[1:]} is")
        facts.insert(0, f"{what} deployable on {_names(ok)}" + (f" (decisions vs FP32 on {agree})." if agree.strip() else "."))
    return concerns, facts


def paired_words(per_site: Sequence[PairedDifference], label: str) -> str:
    """One sentence: candidate minus deployed per site set on the same images, each with its interval and images."""
    parts = [f"{p.sites[0]} {p.difference:+.3f} ({100 * p.confidence:.0f}% interval {p.ci[0]:+.3f} to {p.ci[1]:+.3f}, {p.images} images)"
             for p in per_site]
    return f"Candidate minus deployed on the same images ({label}, paired bootstrap): " + "; ".join(parts) + "."


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
            *, metrics: Sequence[MetricInfo], same_calibration: bool = False, paired: PairedDifference | None = None,
            paired_sites: Sequence[PairedDifference] = (), verification: DeploymentVerification | None = None,
            with_verification: bool = False, calibration: tuple[str, str] = ("", ""), per_runtime: bool = False,
            unverified: Sequence[str] = ()) -> tuple[str, list[str]]:
    """Decision (one of :data:`quantkit.report.model.DECISIONS`) and plain sentences: the first says what to do and
    why, the others give the facts (sample sizes and 95% bootstrap CIs) and the commands that carry it out.

    ``metrics``: the task's metrics (:attr:`quantkit.artifacts.EvalSummary.metrics`, in the adapter's order with their
    direction); FP32's accuracy on labelled site sets is judged by :func:`fp32_accuracy_metric` of them.
    ``paired``: candidate minus deployed of the primary metric over every site set on the same images
    (:func:`quantkit.report.paired.paired_difference`), ``paired_sites`` the same per site set; without ``paired``
    two green models are never told apart. ``verification``: the deployed bundle's ``verify.json`` when
    ``with_verification`` (None then says "not verified"; the report always passes it); ``per_runtime`` / ``unverified``:
    as in :func:`verification_facts`. ``calibration``:
    the deployed calibration set's ``(camera, lighting)``, the condition FP32's detections are compared against."""
    decision, lines = _decide(sites, primary, item, deployed_cal, candidate_cal, cfg, metrics=metrics, same_calibration=same_calibration,
                              paired=paired, paired_sites=paired_sites)
    v_concerns, v_facts = verification_facts(verification, per_runtime=per_runtime, unverified=unverified) if with_verification else ([], [])
    f_concerns = fp32_concerns(sites, metrics, item, calibration, cfg)
    if decision == "needs review":  # labelled FP32 failures are in the headline already ("FP32 itself fails on X (below)")
        f_concerns = [c for c in f_concerns if not c.endswith("against its labels (below)")]
    concerns = v_concerns + f_concerns
    if concerns and decision == "keep deployed":
        decision, lines = "needs review", [f"Needs review: {'; '.join(concerns)}.", f"Apart from that: {lines[0]}", *lines[1:]]
    elif concerns and decision == "switch to candidate" and f_concerns:
        decision, lines = "needs review", [f"Needs review: {'; '.join(concerns)}.", f"Apart from that: {lines[0]}", *lines[1:]]
    elif concerns:
        lines = [lines[0], f"Also: {'; '.join(concerns)}.", *lines[1:]]
    return decision, [*lines[:1 + bool(concerns)], *v_facts, *lines[1 + bool(concerns):]]


def _decide(sites: Sequence[SiteReport], primary: MetricInfo, item: str, deployed_cal: str, candidate_cal: str | None, cfg: ReportConfig,
            *, metrics: Sequence[MetricInfo], same_calibration: bool, paired: PairedDifference | None,
            paired_sites: Sequence[PairedDifference]) -> tuple[str, list[str]]:
    """The decision from agreement with FP32 alone (see :func:`verdict`)."""
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
    deploy_cmd = (f"To deploy it: set the model's sets.deployed.calibration (params.yaml models.<name>.sets) to the candidate's calibration "
                  f"set ({candidate_cal}), registered in its sets.calibration folder, run 'dvc repro', review 'dvc metrics diff', and commit.")
    material = paired is not None and paired.better
    if cand_green and bad:
        decision = "switch to candidate"
        head = f"Switch to the candidate (calibrated on {candidate_cal}): it agrees with FP32 on every site set and fixes {_names(fixes or bad)}."
    elif cand_green and material:
        decision = "switch to candidate"
        head = (f"Switch to the candidate (calibrated on {candidate_cal}): both models agree with FP32 on every site set and the candidate "
                f"agrees more closely (mean {short(primary)} {paired.candidate:.2f} vs {paired.deployed:.2f}, {paired.words()}; "  # type: ignore[union-attr]
                "the interval excludes 0).")
    elif not bad:
        decision = "keep deployed"
        if breaks:
            head = f"Keep deployed: the deployed model agrees with FP32 on every site set; {recal} would break {_names(breaks)}."
        elif cand_green and paired is not None:
            why = ("the interval lies below 0: the candidate is materially worse" if paired.worse else
                   "the interval includes 0: the difference is within what the choice of images explains")
            head = (f"No material difference; keep the deployed model: both agree with FP32 on every site set; the candidate "
                    f"(calibrated on {candidate_cal}) has mean {short(primary)} {paired.candidate:.3f} against the deployed model's "
                    f"{paired.deployed:.3f}, {paired.words()}; {why}.")
        elif cand_green:
            head = (f"No material difference; keep the deployed model: both agree with FP32 on every site set (mean {short(primary)} "
                    f"{mc:.2f} vs {md:.2f}), and without a per-image comparison of the two the difference cannot be judged.")
        else:
            head = (f"Keep deployed: the deployed model agrees with FP32 on every site set; the candidate (calibrated on {candidate_cal}) "
                    f"is not green on {_names(still)}.")
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
    if paired_sites:
        lines.append(paired_words(paired_sites, short(primary)))
    changed = [f"{n} {100 * c.detection_change:+.0f}%" for n, c in cand.items() if c and abs(c.detection_change) > cfg.max_detection_change]
    if changed:
        lines.append(f"The candidate's {plural(item)} per image vs FP32: " + ", ".join(changed) + ".")
    if decision == "switch to candidate":
        lines.append(deploy_cmd)
    return decision, lines

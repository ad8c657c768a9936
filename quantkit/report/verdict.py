"""The shift report's side of the one decision: its evidence read from the report's artifacts, handed to the rule table
(:mod:`quantkit.decision`, which says keep / switch / switch on runtime X / needs review / watch and why), and the facts
behind it in plain words (sample sizes, 95% intervals, verification, the candidate against the deployed model).

A candidate with the deployed model's record fingerprint is the deployed calibration itself (e.g. right after
deploying): nothing is compared and the deployed model is judged alone. Image changes (drift) are worded the same
way as ``quantkit drift`` and the fleet check word them (:mod:`quantkit.drift.advice`, :func:`quantkit.decision.site_words`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..artifacts.drift import DriftResult
from ..artifacts.evaluation import MetricInfo
from ..artifacts.verification import DeploymentVerification
from ..decision import Decision, site_words, Evidence, Paired, RuntimeEvidence, SiteEvidence, decide
from ..drift.advice import Finding, diagnose_result, finding
from .config import ReportConfig
from .model import ShiftMetrics, SiteReport
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


def fault(drift: DriftResult | None) -> str:
    """"badge: words" of a drift finding that holds whatever the agreement (a camera fault, another kind of image, new
    content); "" for a change of light, clipping or none (those wait on the agreement: watch or recalibrate)."""
    if drift is None or not drift.changed:
        return ""
    found = diagnose_result(drift, covered=True)
    return f"{found.action.badge}: {found.words}" if found.action.name in FAULT_ACTIONS else ""


FAULT_ACTIONS = ("check-camera", "register-set", "retrain")
"""Actions of :mod:`quantkit.drift.advice` that do not depend on whether INT8 still agrees with FP32."""


def advice(site: SiteReport, metrics: Sequence[MetricInfo], cfg: ReportConfig) -> Finding:
    """What to do about a site set where the deployed model is not green, through the one table
    (:mod:`quantkit.drift.advice`): its drift, that the deployed INT8 model disagrees, and whether FP32 itself fails."""
    fails = fp32_fails(site, metrics, cfg) is not None
    if site.drift is None:
        return finding("new_content" if fails else "quantization")
    return diagnose_result(site.drift, agreement_low=True, fp32_fails=fails)


def drift_label(site: SiteReport) -> tuple[str, str]:
    """``(words, css class)`` of a site set's image change, read together with whether the deployed model's agreement held:
    :func:`quantkit.decision.site_words` of the cause -> action table's finding (the fleet check's words for a camera)."""
    if site.drift is None:
        return "–", ""
    dep = site.variant("deployed")
    held = dep is None or dep.status == "green"
    found = diagnose_result(site.drift, agreement_low=not held, covered=held)
    return site_words(held, site.drift.changed, found.action.badge)


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


def fp32_blind_words(site: SiteReport, references: Sequence[SiteReport], item: str, cfg: ReportConfig) -> str:
    """"finds 8.0x fewer boxes per image on night (0.40) than on day (3.20, the calibration condition)" when FP32 loses
    most of its detections on an unlabelled ``site`` (:func:`fp32_loses_detections`); "" otherwise."""
    if site.labelled:
        return ""
    lost = fp32_loses_detections(site, references, cfg)
    if lost is None:
        return ""
    ratio, ref = lost
    here, there = site.variant("fp32").detections_per_image, ref.variant("fp32").detections_per_image  # type: ignore[union-attr]
    return ("finds " + (f"{1 / ratio:.1f}x fewer {plural(item)} per image on {site.name} ({here:.2f}) than on {ref.name} ({there:.2f}, "
                        if ratio > 0 else f"no {plural(item)} on {site.name}, against {there:.2f} per image on {ref.name} (")
            + "the calibration condition)")


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
        if not r.passes:
            first = f" ({r.failures[0]})" if r.failures else ""
            concerns.append(f"{bundle(name)} failed verification" + ("" if per_runtime else f" on {name}") + first)
        elif not r.verified:
            where = f"; first diverging tensor {r.divergence}" if r.divergence else ""
            subject = bundle(name) if per_runtime else f"on {name} {bundle(name)}"
            what = ("differs from the simulation's decisions on a golden image but agrees with FP32 within the interval bound with "
                    "the thresholds" if any(f.startswith("[decision]") for f in r.failures) else
                    "makes the simulation's decisions but its numbers differ")
            facts.append(f"Warning for engineers: {subject} {what}{where}; it passes verification.")
            ok.append(name)
        else:
            ok.append(name)
    if ok:
        if per_runtime and len(ok) > 1:
            what = (f"The {role} model's bundles, one per target runtime (one calibration set, each runtime's own file: the recipe chosen for it), pass "
                    f"verification on {_names(ok)}")
        else:
            what = f"The {role} model's bundle for {ok[0]} passes verification there" if per_runtime else f"The {role} bundle passes verification on {_names(ok)}"
        facts.insert(0, f"{what}: its decisions agree with FP32 on the site sets within the bound set at binding.")
    return concerns, facts


def paired_words(per_site: Sequence[PairedDifference], label: str) -> str:
    """One sentence: candidate minus deployed per site set on the same images, each with its interval and images."""
    parts = [f"{p.sites[0]} {p.difference:+.3f} ({100 * p.confidence:.0f}% interval {p.ci[0]:+.3f} to {p.ci[1]:+.3f}, {p.images} images)"
             for p in per_site]
    return f"Candidate minus deployed on the same images ({label}, paired bootstrap): " + "; ".join(parts) + "."


def _value(m: ShiftMetrics | None, primary: MetricInfo) -> float | None:
    return None if m is None else m.agreement.get(primary.name, float("nan"))


def _paired(p: PairedDifference | None) -> Paired | None:
    return None if p is None else Paired(p.difference, p.ci, p.images, p.better, p.worse)


def _states(v: DeploymentVerification | None) -> dict[str, tuple[str, str]]:
    """``{runtime: (state, first failure where it failed)}`` of a verification (none for None); state ``deployable`` |
    ``failed`` | ``not installed``."""
    out = {}
    for r in v.runtimes if v is not None else ():
        state = "not installed" if not r.installed else "deployable" if r.passes else "failed"
        out[r.runtime] = (state, r.failures[0] if state == "failed" and r.failures else "")
    return out


def runtime_evidence(v: DeploymentVerification | None, unverified: Sequence[str] = (),
                     measurements: Sequence[dict[str, Any]] = (), candidate: DeploymentVerification | None = None) -> tuple[RuntimeEvidence, ...]:
    """Per target runtime: the deployed bundle's verification (``verify.json``), the candidate's speed where measured
    (``measurements``: the candidate's rows of ``reports/machine/<model>/measurements.json``; the slowest thread count
    counts) and the candidate bundle's verification (``candidate``: ``verify-candidate.json`` per runtime)."""
    speed: dict[str, tuple[float, float | None, str]] = {}
    for r in measurements:
        if r.get("variant") != "candidate" or r.get("vs_deployed") is None:
            continue
        rt, vs_best = str(r["runtime"]), r.get("vs_best_float")
        old = speed.get(rt)
        if old is None or r["vs_deployed"] < old[0]:
            speed[rt] = (float(r["vs_deployed"]), None if vs_best is None else float(vs_best), str(r.get("best_float") or "FP32"))
    states = _states(v)
    for rt in unverified:
        states[rt] = ("not verified", "")
    for rt in speed:
        states.setdefault(rt, ("", ""))
    cand = _states(candidate)
    return tuple(RuntimeEvidence(rt, state, failure, *speed.get(rt, (None, None, "FP32")), key=rt, candidate=cand.get(rt, ("", ""))[0],
                                 candidate_failure=cand.get(rt, ("", ""))[1]) for rt, (state, failure) in sorted(states.items()))


def decide_model(sites: Sequence[SiteReport], primary: MetricInfo, item: str, deployed_cal: str, candidate_cal: str | None, cfg: ReportConfig,
                 *, metrics: Sequence[MetricInfo], same_calibration: bool = False, paired: PairedDifference | None = None,
                 paired_sites: Sequence[PairedDifference] = (), verification: DeploymentVerification | None = None,
                 with_verification: bool = False, calibration: tuple[str, str] = ("", ""), per_runtime: bool = False,
                 unverified: Sequence[str] = (), measurements: Sequence[dict[str, Any]] = (), deploy_how: str | None = None,
                 candidate_verification: DeploymentVerification | None = None, bundle_dir: str = "") -> tuple[Decision, list[str]]:
    """The one decision (:func:`quantkit.decision.decide`) on this model's evidence, and its lines: the decision's reasons
    in order, then the evidence behind them (facts with sample sizes and intervals), then, only under a decision to deploy,
    how to deploy the candidate (``deploy_how``: the fallback's way; default: register its calibration set).

    ``metrics``: the task's metrics (FP32's accuracy on labelled sets is judged by :func:`fp32_accuracy_metric` of them);
    ``paired`` / ``paired_sites``: candidate minus deployed over every site set / per set; ``verification``: the
    deployed bundle's ``verify.json`` when ``with_verification``; ``per_runtime`` / ``unverified``: as in
    :func:`verification_facts`; ``calibration``: the deployed calibration set's ``(camera, lighting)``;
    ``measurements``: rows of ``measurements.json`` for this model (the candidate's speed per runtime);
    ``candidate_verification``: the candidate's bundle verified per target runtime (a runtime where it failed is excluded
    from a switch; under a switch, the bundle verified on its runtimes is named instead of commands that build one;
    ``bundle_dir``: where that bundle lies, for the words)."""
    has_cand = bool(candidate_cal) and not same_calibration and any(s.variant("candidate") for s in sites)
    refs, per = reference_sites(sites, calibration), {p.sites[0]: p for p in paired_sites}
    evidence = []
    for s in sites:
        dep, cand = s.variant("deployed"), s.variant("candidate") if has_cand else None
        failing = fp32_fails(s, metrics, cfg)
        held = dep is None or dep.status == "green"
        evidence.append(SiteEvidence(
            s.name, _value(dep, primary), held, dep.detection_change if dep else 0.0, _value(cand, primary),
            cand is not None and cand.status == "green", cand.detection_change if cand else 0.0, _paired(per.get(s.name)),
            f"{failing[0].replace('_', ' ')} {failing[1]:.2f} against the labels" if failing else "", fp32_blind_words(s, refs, item, cfg),
            bool(s.drift and s.drift.changed), cause(s.drift), "" if held else advice(s, metrics, cfg).sentence, fault(s.drift)))
    runtimes = runtime_evidence(verification if with_verification else None, unverified, measurements,
                                candidate_verification if has_cand else None)
    d = decide(Evidence(short(primary), plural(item), tuple(evidence), runtimes, candidate_cal if has_cand else None,
                        _paired(paired) if has_cand else None, cfg.policy().green))
    facts = ["The candidate is the deployed calibration itself: nothing to compare."] if same_calibration else []
    for s in sites:
        m = s.variant("deployed")
        if m is not None and m.status != "green":
            facts.append(f"On {s.name} the deployed INT8 model (calibrated on {deployed_cal}) reaches {value_words(m, primary)} against FP32, "
                         f"{m.status}, and changes {plural(item)} per image by {100 * m.detection_change:+.0f}%: {cause(s.drift)}.")
    if with_verification:
        concerns, checked = verification_facts(verification, per_runtime=per_runtime, unverified=unverified)
        facts += [f"For engineers: {c[0].upper()}{c[1:]}." for c in concerns] + checked
    if has_cand:
        dep = {s.name: s.variant("deployed") for s in sites}
        moves = [f"{n} {short(primary)} {dep[n].agreement.get(primary.name, float('nan')):.2f} → "  # type: ignore[union-attr]
                 f"{c.agreement.get(primary.name, float('nan')):.2f} ({dep[n].status} → {c.status})"  # type: ignore[union-attr]
                 for n, c in ((s.name, s.variant("candidate")) for s in sites) if c and dep[n]]
        facts.append(f"The candidate (calibrated on {candidate_cal}), against the deployed model: " + "; ".join(moves) + ".")
        if paired_sites:
            facts.append(paired_words(paired_sites, short(primary)))
        changed = [f"{s.name} {100 * c.detection_change:+.0f}%" for s in sites if (c := s.variant("candidate")) and abs(c.detection_change) > cfg.max_detection_change]
        if changed:
            facts.append(f"The candidate's {plural(item)} per image vs FP32: " + ", ".join(changed) + ".")
    verified = [r for r in runtimes if r.candidate == "deployable" and (not d.runtimes or r.runtime in d.runtimes)]
    if d.deploys and verified and candidate_verification is not None:
        where = f"{bundle_dir.rstrip('/')}/" if bundle_dir else ""
        facts.append(f"To deploy it: ship its bundle {where}{candidate_verification.bundle} (sha256 {candidate_verification.bundle_sha256}), "
                     f"verified on {' and '.join(r.runtime for r in verified)}: its decisions agree with FP32 on the site sets there.")
    elif d.deploys:
        where = f" for {' and '.join(d.runtimes)} only" if d.runtimes else ""
        facts.append(f"To deploy it{where}: " + (deploy_how or (
            f"set the model's sets.deployed.calibration (params.yaml models.<name>.sets) to the candidate's calibration set ({candidate_cal}), "
            "registered in its sets.calibration folder, run 'dvc repro', review 'dvc metrics diff', and commit.")))
    return d, [*d.reasons, *facts]


def verdict(*args: Any, **kw: Any) -> tuple[str, list[str]]:
    """``(decision, lines)`` of :func:`decide_model` (the decision's name, one of :data:`quantkit.decision.DECISIONS`)."""
    d, lines = decide_model(*args, **kw)
    return d.decision, lines

"""One decision a quality lead can act on: the evidence about one model -> keep / switch / switch on runtime X /
needs review / watch, with its reasons in order.

Every place that words a decision about a model or a site set (the shift report's verdict, its drift labels, the fleet
check's camera actions through :mod:`quantkit.drift.advice`, ``quantkit drift``) reads it from here, so the same
situation gets the same words everywhere.

The evidence is typed and small (:class:`Evidence`): per site set the task's primary agreement with FP32 of the deployed
and candidate INT8 models with the paired interval of their difference (:mod:`quantkit.report.paired`), FP32's own
health there, whether the images moved; per target runtime the deployed and candidate bundles' verification and, where
measured, the candidate's speed against the deployed file and the runtime's best float run. :func:`decide` computes the
derived facts once (:class:`Facts`) and walks :data:`RULES`, a table: the first rule with a decision whose condition
holds decides and gives the first reasons; every note rule (no decision) whose condition holds adds one reason after
them. Each rule is tested on its own (``tests/test_decision.py``). The agreement numbers live in
:class:`AgreementPolicy`, one per model (its docstring says which are stated, a params key each, and which derived).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .drift.advice import CAUSES

KEEP, SWITCH, SWITCH_ON, REVIEW, WATCH = "keep deployed", "switch to candidate", "switch on runtime", "needs review", "watch"
DECISIONS = (KEEP, SWITCH, SWITCH_ON, REVIEW, WATCH)
"""Every decision; ``switch on runtime`` names its runtimes in :attr:`Decision.runtimes`."""
DEPLOYS, FIRST_SCREEN = (SWITCH, SWITCH_ON), 3
"""The decisions under which deploy commands are shown (never under keep, watch or needs review); the reasons a quality
lead reads first (the rest are one click away)."""


@dataclasses.dataclass(frozen=True)
class AgreementPolicy:
    """The agreement numbers of one model: when does INT8 still agree with FP32 (on the task's primary metric).

    Stated (a params key each, read once):
        green: ``report.min_agreement``, the line a site set's agreement must stay at or above (green).
        amber_band: ``report.amber_band``; ``red`` (derived) = ``green - amber_band``.
        floor: ``thresholds.min_agreement``, below which ``quantkit bind`` refuses a model outright.
        fleet_drop: ``fleet.check.agreement_drop``, how far a camera's agreement may fall below its own reference.
    Derived (never a second copy to keep in sync by hand):
        red: ``green - amber_band``.
        fallback_target: the precision fallback's target is the green line (a fallback that stops below it produces a
            model the report calls amber).
        verify bound: per threshold set, the lower end of the bootstrap interval ``bind`` measured (stored with it), so it is
            not a number of the policy.
    """

    green: float = 0.9
    amber_band: float = 0.1
    floor: float = 0.5
    fleet_drop: float = 0.15

    red = property(lambda self: self.green - self.amber_band)
    fallback_target = property(lambda self: self.green)

    def holds(self, agreement: float) -> bool:
        """Whether ``agreement`` is at or above the green line."""
        return agreement >= self.green

    def fell(self, before: float, after: float) -> bool:
        """Whether a camera's agreement fell, by the shift report's line: it crossed the green line (at or above it before,
        below it since), or fell by more than ``fleet_drop`` to below it."""
        return not self.holds(after) and (self.holds(before) or before - after > self.fleet_drop)


@dataclasses.dataclass(frozen=True)
class Paired:
    """Candidate minus deployed of the primary metric on the same images: ``difference``, its interval ``ci``,
    ``images``; ``better`` / ``worse``: the interval lies wholly on one side of 0 (the metric's direction applied)."""

    difference: float
    ci: tuple[float, float]
    images: int
    better: bool = False
    worse: bool = False

    def words(self) -> str:
        return f"{self.difference:+.3f}, interval {self.ci[0]:+.3f} to {self.ci[1]:+.3f}, {self.images} images"


@dataclasses.dataclass(frozen=True)
class SiteEvidence:
    """One site set. ``deployed`` / ``candidate``: primary agreement with FP32 (None: not evaluated); ``*_ok``: the
    site set's status is green (agreement at the policy's line and the item count within the report's bound);
    ``*_change``: relative change of items per image vs FP32; ``paired``: candidate minus deployed on these images;
    ``fp32_fails`` / ``fp32_blind``: words when FP32 itself fails (labels) or loses most of its items (vs the
    calibration condition); ``moved``: the images changed against the calibration set, ``cause`` in words;
    ``advice``: what to do where the deployed model disagrees (badge: words; fix), from :mod:`quantkit.drift.advice`;
    ``fault``: a finding that holds whatever the agreement (the camera is at fault, the images are another kind, FP32
    sees content it never learned), as "badge: words": such a set is named with it, never told to watch."""

    name: str
    deployed: float | None
    deployed_ok: bool = True
    deployed_change: float = 0.0
    candidate: float | None = None
    candidate_ok: bool = True
    candidate_change: float = 0.0
    paired: Paired | None = None
    fp32_fails: str = ""
    fp32_blind: str = ""
    moved: bool = False
    cause: str = ""
    advice: str = ""
    fault: str = ""


SLOWER_BELOW = 0.95
"""A speed ratio below which the candidate counts as slower: interleaved medians of the same file on a quiet 2-core
machine differ by up to about 3% from run to run (bench/history.md), so 0.97x is noise, not a slower file."""


@dataclasses.dataclass(frozen=True)
class RuntimeEvidence:
    """One target runtime. ``deployed``: ``deployable`` | ``failed`` | ``not verified`` | ``not installed`` (its bundle's
    verification, ``failure``: the first failure); ``candidate_vs_deployed`` / ``candidate_vs_best_float``: speed ratios
    (> 1 faster) where measured on this machine (None: not measured); ``best_float``: that float run's label; ``candidate``: the
    candidate bundle's verification there (``deployable`` | ``failed`` | "": none), ``candidate_failure`` its first failure."""

    runtime: str
    deployed: str = "deployable"
    failure: str = ""
    candidate_vs_deployed: float | None = None
    candidate_vs_best_float: float | None = None
    best_float: str = "FP32"
    key: str = ""
    """The runtime's registry name (``openvino``) when ``runtime`` is a label (``openvino 2026.4``)."""
    candidate: str = ""
    candidate_failure: str = ""

    @property
    def measured(self) -> bool:
        return self.candidate_vs_deployed is not None

    @property
    def slower_than_deployed(self) -> bool:
        return self.candidate_vs_deployed is not None and self.candidate_vs_deployed < SLOWER_BELOW

    @property
    def below_best_float(self) -> bool:
        return self.candidate_vs_best_float is not None and self.candidate_vs_best_float < SLOWER_BELOW

    @property
    def candidate_slower(self) -> bool:
        """Not for this runtime: slower than the deployed file or the runtime's own best float run (then quantizing does not
        pay) by more than the timing noise (:data:`SLOWER_BELOW`), or its bundle failed verification there."""
        return (self.measured and (self.slower_than_deployed or self.below_best_float)) or self.candidate == "failed"

    def speed_words(self) -> str:
        """Why the candidate is not for this runtime, in words without figures: the ratios are this machine's (the report's
        speed section shows them when opened), and a tracked report keeps machine-dependent figures out."""
        if self.candidate == "failed":
            return f"on {self.runtime} the candidate's bundle failed verification ({self.candidate_failure or 'see its verify-candidate.json'})"
        parts = (["slower than the deployed file"] if self.slower_than_deployed else []) \
            + ([f"below {self.runtime}'s own {self.best_float} run"] if self.below_best_float else [])
        said = " and ".join(parts) or "at about the deployed file's speed"
        return f"on {self.runtime} the candidate runs {said} (measured on the machine that built this report)"


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Everything the decision reads about one model. ``metric``: the primary agreement metric's short label (one per
    model, e.g. ``pixel IoU``); ``item``: what a decision counts, plural (``text regions``); ``candidate``: the
    candidate's calibration set name (None: no candidate to compare); ``overall``: candidate minus deployed over
    every site set."""

    metric: str
    item: str
    sites: tuple[SiteEvidence, ...]
    runtimes: tuple[RuntimeEvidence, ...] = ()
    candidate: str | None = None
    overall: Paired | None = None
    green: float = AgreementPolicy.green
    """The policy's green line (:attr:`AgreementPolicy.green`): a site set below it is named by its agreement alone."""


def _names(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the rules test, derived once from the evidence (names of site sets or runtimes)."""

    e: Evidence

    @property
    def failed(self) -> list[RuntimeEvidence]:
        return [r for r in self.e.runtimes if r.deployed == "failed"]

    @property
    def fp32_fails(self) -> list[SiteEvidence]:
        return [s for s in self.e.sites if s.fp32_fails]

    @property
    def fp32_blind(self) -> list[SiteEvidence]:
        return [s for s in self.e.sites if s.fp32_blind and not s.fp32_fails]

    @property
    def bad(self) -> list[SiteEvidence]:
        return [s for s in self.e.sites if s.deployed is not None and not s.deployed_ok]

    @property
    def has_candidate(self) -> bool:
        return self.e.candidate is not None and any(s.candidate is not None for s in self.e.sites)

    @property
    def worse(self) -> list[SiteEvidence]:
        """Site sets where the candidate is worse: its paired interval lies below 0 (without one: it is not green where the
        deployed model is)."""
        return [s for s in self.e.sites if s.candidate is not None and
                (s.paired.worse if s.paired is not None else (s.deployed_ok and not s.candidate_ok))]

    @property
    def cand_bad(self) -> list[SiteEvidence]:
        worse = {s.name for s in self.worse}
        return [s for s in self.e.sites if s.candidate is not None and not s.candidate_ok and s.name not in worse]

    @property
    def fixes(self) -> list[SiteEvidence]:
        worse = {s.name for s in self.worse}
        return [s for s in self.bad if s.candidate is not None and s.candidate_ok and s.name not in worse]

    @property
    def improves(self) -> list[SiteEvidence]:
        """Site sets where the candidate is materially closer to FP32 (paired interval above 0) without being a fix."""
        fixes = {s.name for s in self.fixes}
        return [s for s in self.e.sites if s.paired is not None and s.paired.better and s.name not in fixes]

    @property
    def switch_ok(self) -> bool:
        """The candidate is green everywhere, worse nowhere, and fixes a site set or is closer over all of them."""
        return (self.has_candidate and not self.worse and not self.cand_bad
                and (bool(self.bad) or bool(self.e.overall and self.e.overall.better)))

    @property
    def slow(self) -> list[RuntimeEvidence]:
        return [r for r in self.e.runtimes if r.candidate_slower]

    @property
    def fast(self) -> list[RuntimeEvidence]:
        return [r for r in self.e.runtimes if (r.measured or r.candidate == "deployable") and not r.candidate_slower]

    @property
    def moved_held(self) -> list[SiteEvidence]:
        return [s for s in self.e.sites if s.moved and s.deployed is not None and s.deployed_ok and not s.fault]

    @property
    def faults(self) -> list[SiteEvidence]:
        return [s for s in self.e.sites if s.fault and s.deployed_ok]

    @property
    def unverified(self) -> list[RuntimeEvidence]:
        return [r for r in self.e.runtimes if r.deployed in ("not verified", "not installed")]

    # words shared by several rules
    def agreement(self, s: SiteEvidence, role: str = "deployed") -> str:
        v = s.deployed if role == "deployed" else s.candidate
        ok, change = (s.deployed_ok, s.deployed_change) if role == "deployed" else (s.candidate_ok, s.candidate_change)
        count = "" if ok or abs(change) < 1e-9 or v < self.e.green else f", {self.e.item} per image {100 * change:+.0f}% vs FP32"
        return f"{s.name} ({self.e.metric} {v:.2f}{count})"

    def disagrees(self) -> str:
        return "The deployed model disagrees with FP32 on " + _names([self.agreement(s) for s in self.bad]) + "."

    def advice(self, sites: Sequence[SiteEvidence]) -> str:
        groups: dict[str, list[str]] = {}
        for s in sites:
            groups.setdefault(s.advice or "check those images and the quantization", []).append(s.name)
        return "; ".join(f"{_names(names)}: {a}" for a, names in groups.items()) + "."

    def why_switch(self) -> str:
        if self.fixes:
            return f"it agrees with FP32 on every site set and fixes {_names([self.agreement(s, 'candidate') for s in self.fixes])}"
        o = self.e.overall
        return f"both agree with FP32 and the candidate agrees more closely ({self.e.metric} {o.words()}; the interval excludes 0)"  # type: ignore[union-attr]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One row of the table: ``when`` (over :class:`Facts`) -> ``decision`` (None: a note that adds a reason) and its
    ``reasons`` in plain words."""

    name: str
    when: Callable[[Facts], bool]
    decision: str | None
    reasons: Callable[[Facts], list[str]]


RULES: tuple[Rule, ...] = (
    Rule("deployed-fails-verification", lambda f: bool(f.failed), REVIEW, lambda f: [
        (f"The deployed model's bundle failed verification on {_names([r.runtime for r in f.failed])}: do not ship it there until "
         "this is fixed (the evidence names the first failure).")]),
    Rule("fp32-fails", lambda f: bool(f.fp32_fails), REVIEW, lambda f: [
        (f"FP32 itself fails on {_names([s.name for s in f.fp32_fails])} ({'; '.join(s.fp32_fails for s in f.fp32_fails)}): the model, "
         "not the quantization, fails there; no calibration fixes it (retrain, or check the images).")]),
    Rule("fp32-blind", lambda f: bool(f.fp32_blind), REVIEW, lambda f: [
        (f"FP32 itself {'; '.join(s.fp32_blind for s in f.fp32_blind)}: agreeing with FP32 there cannot show what the model misses; "
         "check those images or the model before trusting the agreement.")]),
    Rule("candidate-worse-where-deployed-disagrees", lambda f: bool(f.bad) and f.has_candidate and bool(f.worse), REVIEW, lambda f: [
        f.disagrees(),
        f"The candidate (calibrated on {f.e.candidate}) is significantly worse on "
        + _names([f"{s.name} ({s.paired.words()})" if s.paired else f.agreement(s, 'candidate') for s in f.worse])
        + (f" though it fixes {_names([s.name for s in f.fixes])}" if f.fixes else "")
        + (f"{' and' if f.fixes else ' though it'} improves {_names([s.name for s in f.improves])}" if f.improves else "")
        + ": compose a calibration set that covers every condition."]),
    Rule("candidate-does-not-fix", lambda f: bool(f.bad) and f.has_candidate and bool(f.cand_bad), REVIEW, lambda f: [
        f.disagrees(),
        f"The candidate (calibrated on {f.e.candidate}) still disagrees on {_names([f.agreement(s, 'candidate') for s in f.cand_bad])}"
        + (f" (it fixes {_names([s.name for s in f.fixes])})" if f.fixes else "") + ".",
        "What to do: " + f.advice(f.cand_bad)]),
    Rule("deployed-disagrees", lambda f: bool(f.bad) and not f.switch_ok, REVIEW, lambda f: [
        f.disagrees(), "What to do: " + f.advice(f.bad)]),
    Rule("candidate-slower-everywhere-needed", lambda f: f.switch_ok and bool(f.bad) and bool(f.slow) and not f.fast, REVIEW, lambda f: [
        f.disagrees(),
        "The candidate fixes it but does not pay on any runtime it was measured or verified on ("
        + "; ".join(r.speed_words() for r in f.slow) + "): decide whether the accuracy is worth the speed."]),
    Rule("candidate-slower-everywhere", lambda f: f.switch_ok and bool(f.slow) and not f.fast, KEEP, lambda f: [
        f"The candidate {f.why_switch()}, but it does not pay on any runtime it was measured or verified on ("
        + "; ".join(r.speed_words() for r in f.slow) + ")."]),
    Rule("switch-on-runtime", lambda f: f.switch_ok and bool(f.slow), SWITCH_ON, lambda f: [
        f"Switch to the candidate (calibrated on {f.e.candidate}) on {_names([r.runtime for r in f.fast])} only: {f.why_switch()}.",
        f"Keep the deployed model on {_names([r.runtime for r in f.slow])}: " + "; ".join(r.speed_words() for r in f.slow) + "."]),
    Rule("switch", lambda f: f.switch_ok, SWITCH, lambda f: [
        f"Switch to the candidate (calibrated on {f.e.candidate}): {f.why_switch()}."]),
    Rule("candidate-worse", lambda f: f.has_candidate and bool(f.worse), KEEP, lambda f: [
        f"The deployed model agrees with FP32 on every site set; the candidate (calibrated on {f.e.candidate}) is significantly worse on "
        + _names([f"{s.name} ({s.paired.words()})" if s.paired else f.agreement(s, 'candidate') for s in f.worse]) + "."]),
    Rule("watch", lambda f: bool(f.moved_held), WATCH, lambda f: [
        (f"Watch {_names([s.name for s in f.moved_held])}: the images moved away from the calibration set, but the deployed model still "
         f"agrees with FP32 ({', '.join(f'{s.name} {f.e.metric} {s.deployed:.2f}' for s in f.moved_held)}); nothing to fix yet.")]),
    Rule("keep", lambda f: True, KEEP, lambda f: [
        "The deployed model agrees with FP32 on every site set ("
        + ", ".join(f"{s.name} {f.e.metric} {s.deployed:.2f}" for s in f.e.sites if s.deployed is not None) + ")."]),
    # notes: a reason added after the deciding rule's (once: a reason the deciding rule gave already is not repeated)
    Rule("note-deployed-disagrees", lambda f: bool(f.bad), None, lambda f: [f.disagrees()]),
    Rule("note-no-material-difference", lambda f: f.has_candidate and not f.bad and not f.worse and not f.switch_ok and f.e.overall is not None,
         None, lambda f: [f"No material difference with the candidate ({f.e.metric} {f.e.overall.words()}; the interval includes 0)."]),  # type: ignore[union-attr]
    Rule("note-watch", lambda f: bool(f.moved_held), None, lambda f: [
        (f"Watch {_names([s.name for s in f.moved_held])}: the images moved away from the calibration set, but the deployed model "
         "still agrees with FP32 there.")]),
    Rule("note-fault", lambda f: bool(f.faults), None, lambda f: [
        "; ".join(f"{s.name}: {s.fault}" for s in f.faults) + " (the deployed model still agrees with FP32 there; this does not wait "
        "for the agreement to fall)."]),
    Rule("note-unverified", lambda f: bool(f.unverified), None, lambda f: [
        f"Not verified on {_names([r.runtime for r in f.unverified])}: the deployed model's bundle has no verification there."]),
)
"""THE table, in order. Rules with a decision: the first whose condition holds decides. Notes (decision None): each that
holds adds its reason, unless the deciding rule already says the same (``watch`` and ``note-watch``)."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """The decision, the rule that made it, its reasons in order (the first :data:`FIRST_SCREEN` for the first screen),
    and for ``switch on runtime`` the runtimes to switch on and those excluded."""

    decision: str
    rule: str
    reasons: tuple[str, ...]
    runtimes: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    """``runtimes`` by registry name (for commands: ``quantkit verify --runtime``)."""

    @property
    def label(self) -> str:
        """``switch on openvino`` for a switch on some runtimes, else the decision."""
        return f"switch on {_names(self.runtimes)}" if self.decision == SWITCH_ON else self.decision

    @property
    def deploys(self) -> bool:
        return self.decision in DEPLOYS

    @property
    def first(self) -> tuple[str, ...]:
        return self.reasons[:FIRST_SCREEN]

    def to_dict(self) -> dict[str, object]:
        return {"decision": self.decision, "label": self.label, "rule": self.rule, "reasons": list(self.reasons),
                "runtimes": list(self.runtimes), "excluded": list(self.excluded)}


def decide(evidence: Evidence, rules: Sequence[Rule] = RULES) -> Decision:
    """The decision on one model's evidence through ``rules`` (see the module docstring)."""
    facts = Facts(evidence)
    deciding = next(r for r in rules if r.decision is not None and r.when(facts))
    reasons = list(deciding.reasons(facts))
    for note in rules:
        if note.decision is None and note.when(facts) and not (note.name == "note-watch" and deciding.name == "watch"):
            reasons += [r for r in note.reasons(facts) if r not in reasons]
    runtimes = tuple(r.runtime for r in facts.fast) if deciding.decision == SWITCH_ON else ()
    excluded = tuple(r.runtime for r in facts.slow) if deciding.decision in (SWITCH_ON, KEEP, REVIEW) and facts.switch_ok else ()
    keys = tuple(r.key or r.runtime for r in facts.fast) if deciding.decision == SWITCH_ON else ()
    return Decision(deciding.decision, deciding.name, tuple(reasons), runtimes, excluded, keys)  # type: ignore[arg-type]


MOVED_AWAY = CAUSES["covered"][0]
"""The words for images that moved while agreement held: the shift report's drift labels, the fleet check's "watch"
cameras and ``quantkit drift`` (through :data:`quantkit.drift.advice.CAUSES` ``covered``)."""


def site_words(held: bool, moved: bool, badge: str) -> tuple[str, str]:
    """``(words, css class)`` for one site set's (or camera's) images, read with whether the deployed model's agreement held
    and the cause -> action table's badge: "no change"; "changed: watch (...)" when agreement held and nothing is at fault;
    else "changed: <badge>" (e.g. "changed: check camera", "changed: recalibrate")."""
    if not moved:
        return "no change", "green"
    if badge == "watch":
        return "changed: watch (the images moved away from the calibration set; agreement held)", "neutral"
    return f"changed: {badge}", "amber" if held else "red"


__all__ = ["DECISIONS", "DEPLOYS", "FIRST_SCREEN", "MOVED_AWAY", "RULES", "AgreementPolicy", "Decision", "Evidence", "Facts",
           "Paired", "Rule", "RuntimeEvidence", "SiteEvidence", "decide", "site_words"]

"""``quantkit fleet check``: which cameras changed, since when, why, and what to do.

Per camera (:mod:`.camera`): its first windows are its reference, every later window is judged against
it with thresholds derived for that camera. A camera alerts from the first window of
``persistence`` consecutive alerting windows ("since"). Its reasons are plain words: the statistics
that moved (medians before/after from the KLL sketches), INT8 agreement with FP32 and detections per
image since then against its reference, clipping, and whether its images moved further from the
deployed calibration set. The action comes from the one cause -> action table
(:func:`quantkit.drift.advice.diagnose`): a camera fault (defocus, sensor noise, exposure that collapsed or keeps
drifting) is ``check-camera``; a change of light is ``recalibrate`` when INT8 agreement fell, else ``watch`` (the
images moved away from the calibration set, agreement held: the same rule and words as the shift report's). Cameras are ranked by action (most urgent first, the order of
:data:`quantkit.drift.advice.ACTIONS`), then those whose INT8 agreement fell (:meth:`quantkit.decision.AgreementPolicy.fell`)
first, then by severity (largest effect over its threshold).

The result is a :class:`FleetCheck` (``check.json``) with site and fleet rollups, a verdict line for
quality leads and flat DVC metrics; with a planted-truth file it also scores the alerts
(:mod:`.truth`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_json, read_json
from ..errors import CalibrationSetError, InputFileError
from .camera import CameraJudge, WindowCheck, clip_rate, confirm_agreement, pooled, reference_windows, window_agreement
from ..decision import AgreementPolicy
from ..drift.advice import ACTIONS
from .config import FleetCheckConfig
from .decisions import primary_label
from .store import ScoreStore

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

TO_DO = {"check-camera": "to check the camera", "register-set": "showing another kind of image than the calibration set", "retrain": "showing content the model never saw", "recalibrate": "to recalibrate",
         "quantization-loss": "with quantization loss", "watch": "to watch", "none": "with nothing to do"}
"""How the verdict counts the cameras of each action (:data:`quantkit.drift.advice.ACTIONS`): "2 to recalibrate (b01, b02)"."""


@dataclasses.dataclass(frozen=True)
class CameraCheck:
    """One camera: ``status`` ``ok`` | ``alert`` | ``insufficient`` (too little history to judge)."""

    camera: str
    site: str
    line: str
    status: str
    since: str | None
    alerting_now: bool
    action: str
    severity: float
    reasons: tuple[str, ...]
    reference: dict[str, Any]
    after: dict[str, Any]
    windows: tuple[WindowCheck, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reasons": list(self.reasons), "windows": [w.to_dict() for w in self.windows]}


@dataclasses.dataclass(frozen=True)
class FleetCheck:
    """The fleet check (``check.json``). ``ranked``: alerting cameras, most urgent first; ``primary``: the task's
    primary agreement metric (:attr:`quantkit.fleet.decisions.DecisionSummarizer.primary`); ``warnings``: plain
    lines, e.g. windows and references too small for a metric to show any change (also logged)."""

    verdict: str
    alerting: bool
    primary: dict[str, Any]
    cameras: tuple[CameraCheck, ...]
    ranked: tuple[str, ...]
    sites: dict[str, Any]
    fleet: dict[str, Any]
    calibration_set: dict[str, Any]
    scores: dict[str, Any]
    config: dict[str, Any]
    truth: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()

    def camera(self, name: str) -> CameraCheck:
        return next(c for c in self.cameras if c.camera == name)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(schema_version=SCHEMA_VERSION, cameras=[c.to_dict() for c in self.cameras], ranked=list(self.ranked), warnings=list(self.warnings))
        return d

    def save(self, path: str | os.PathLike[str]) -> Path:
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "FleetCheck":
        """Read ``check.json``. Raises InputFileError naming the file when missing or malformed."""
        from .camera import StatMove

        d = read_json(path, "fleet check")
        try:
            cams = tuple(CameraCheck(**{**c, "reasons": tuple(c["reasons"]), "windows": tuple(
                WindowCheck(**{**w, "moved": tuple(StatMove(**m) for m in w["moved"]), "evidence": tuple(w["evidence"])})
                for w in c["windows"])}) for c in d["cameras"])
            return cls(d["verdict"], d["alerting"], d["primary"], cams, tuple(d["ranked"]), d["sites"], d["fleet"],
                       d["calibration_set"], d["scores"], d["config"], d.get("truth"), tuple(d.get("warnings", ())))
        except (KeyError, TypeError) as e:
            raise InputFileError(f"{path}: not a fleet check (bad or missing field {e}); rerun 'quantkit fleet check'") from None

    def metrics(self) -> dict[str, Any]:
        """Flat DVC metrics: fleet counts, alerting cameras per action, per site, and truth scores when known."""
        m: dict[str, Any] = {"cameras": len(self.cameras), "cameras_alerting": len(self.ranked),
                             **{f"cameras_to_{a.replace('-', '_')}": sum(1 for c in self.cameras if c.action == a) for a in ACTIONS if a != "none"},
                             "images": self.fleet["images"], "images_scored": self.fleet["scored"], "image_errors": self.fleet["errors"],
                             "agreement": self.fleet["agreement"], "sites": {s: {k: v[k] for k in ("cameras_alerting", "agreement")}
                                                                              for s, v in self.sites.items()}}
        if self.truth is not None:
            m["alert_precision"] = self.truth["precision"]
            m["alert_recall"] = self.truth["recall"]
            m["events"] = {e["name"]: {k: e[k] for k in ("precision", "recall", "max_delay_days")} for e in self.truth["events"]}
        return m

    def __repr__(self) -> str:
        return f"FleetCheck({len(self.cameras)} cameras, {len(self.ranked)} alerting)"


def _calibration_counts(calibration_set: str | os.PathLike[str], store: ScoreStore) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from ..calibset import CalibrationSet
    from ..calibset.stats import STAT_COLUMNS

    cset = CalibrationSet.load(calibration_set, verify=True)
    want = store.edges.source.get("set_id")
    if want and cset.set_id != want:
        raise CalibrationSetError(f"{calibration_set}: set {cset.set_id[:12]} is not the calibration set the scores' edges came from "
                                  f"({store.edges.source.get('name')}, {str(want)[:12]}); pass that set or re-score")
    stats = cset.stats()
    return {n: store.edges.bin_counts(n, stats[n].to_numpy(np.float64))[0] for n in STAT_COLUMNS}, {"name": cset.name, "set_id": cset.set_id}


def _since(windows: list[WindowCheck], persistence: int) -> int | None:
    """Index of the first window of the first run of ``persistence`` alerting windows (thin windows
    neither break nor extend a run), or None."""
    start, run = 0, 0
    for i, w in enumerate(windows):
        if w.status == "alert":
            start = i if run == 0 else start
            run += 1
            if run >= persistence:
                return start
        elif w.status == "ok":
            run = 0
    return None


def _tail_phrase(name: str, ref: np.ndarray, after: np.ndarray) -> str:
    """Plain words for a statistic that moved while its median stayed 0: how many images since the change lie
    beyond the bins its reference occupies (its range at the histogram's resolution)."""
    from ..drift import PLAIN_NAMES

    label = PLAIN_NAMES.get(name, name)
    nz = np.flatnonzero(ref)
    below, above = (int(after[:nz[0]].sum()), int(after[nz[-1] + 1:].sum())) if nz.size else (0, 0)
    if below + above == 0:
        return f"{label} spread changed"
    where = "above" if not below else "below" if not above else "outside"
    return f"{label} {where} its range in {below + above} of {int(after.sum())} images"


def _reasons(judged: list[WindowCheck], since: int, ref: Any, after: Any, primary: dict[str, Any], cfg: FleetCheckConfig,
             calibration_name: str, ref_span: str, trend: list[float], policy: AgreementPolicy | None = None) -> tuple[list[str], str, float]:
    from ..drift import PLAIN_NAMES, StatisticChange

    alerts = [w for w in judged[since:] if w.status == "alert"]
    counts: dict[str, int] = {}
    best: dict[str, Any] = {}
    for w in alerts:
        for m in w.moved:
            counts[m.name] = counts.get(m.name, 0) + 1
            if m.name not in best or m.ratio > best[m.name].ratio:
                best[m.name] = m
    order = sorted(counts, key=lambda n: (-counts[n], -best[n].ratio, n))
    phrases = []
    for n in order[:4]:
        r, a = ref.quantile(n, 0.5), after.quantile(n, 0.5)
        if r == a == 0:  # e.g. blown-out pixels in a few images: the median says nothing ("changed from 0 to 0")
            phrases.append(_tail_phrase(n, ref.hist[n], after.hist[n]))
        elif r != 0 and abs(a / r - 1.0) < 0.03:  # the distribution moved, not its median
            phrases.append(f"{PLAIN_NAMES.get(n, n)} spread changed")
        else:
            phrases.append(StatisticChange(n, r, a, 0.0, best[n].metrics_moved, True).phrase)
    reasons = []
    if phrases:
        more = len(order) - 4
        reasons.append(f"{'; '.join(phrases)} vs its reference ({ref_span})" + (f"; {more} more statistic{'s' if more > 1 else ''} moved" if more > 0 else ""))
    ra, aa = window_agreement(ref, primary), window_agreement(after, primary)
    label = primary_label(primary)
    policy = policy or AgreementPolicy(fleet_drop=cfg.agreement_drop)
    agreement_fell = ra["agreement"] is not None and aa["agreement"] is not None and policy.fell(ra["agreement"], aa["agreement"])
    if aa["agreement"] is not None and ra["agreement"] is not None:
        how = (f"fell below the {policy.green:.2f} line" if agreement_fell else "held" if policy.holds(aa["agreement"])
               else f"stayed below the {policy.green:.2f} line, as before")
        reasons.append(f"INT8 agreement with FP32 ({label}) {how}: {aa['agreement']:.2f} since then vs {ra['agreement']:.2f} before "
                       f"({after.scored} vs {ref.scored} images scored)")
    if aa["det_int8_per_image"] is not None and ra["det_int8_per_image"] is not None and any("detections" in w.evidence for w in alerts):
        reasons.append(f"INT8 detections per image {aa['det_int8_per_image']:.2f} vs {ra['det_int8_per_image']:.2f} before")
    cr, ca = clip_rate(ref), clip_rate(after)
    if cr is not None and ca is not None and any("clipping" in w.evidence for w in alerts):
        reasons.append(f"INT8 activations clip {100 * ca:.2f}% of values vs {100 * cr:.2f}% before")
    further = sorted({m.name for w in alerts for m in w.moved if m.calibration_psi > cfg.calibration_margin * m.calibration_psi_reference
                      and m.calibration_psi > cfg.psi_floor})
    if further:
        reasons.append(f"images moved further from the calibration set {calibration_name} ({', '.join(PLAIN_NAMES.get(n, n) for n in further[:4])})")
    found = _diagnose(ref, after, set(counts), agreement_fell, bool(further), trend)
    reasons.append(f"{found.action.badge}: {found.words}" + (f"; {found.action.fix}" if found.action.fix != "none" else ""))
    action = found.action.name
    severity = max([max((m.ratio for m in w.moved), default=0.0) for w in alerts] + [0.0])
    if agreement_fell:
        severity = max(severity, (ra["agreement"] - aa["agreement"]) / cfg.agreement_drop)
    return reasons, action, round(severity, 6)


def _diagnose(ref: Any, after: Any, moved: set[str], agreement_fell: bool, further: bool, trend: list[float]) -> Any:
    """The camera's cause and action through the one table (:func:`quantkit.drift.advice.diagnose`): medians of its
    reference and of everything since the change, ``trend`` (its brightness median per judged window since the change:
    exposure drift), and whether INT8 agreement held: then a change of light is "watch: the images moved away from the
    calibration set" (:mod:`quantkit.decision`: the shift report's words for a site set whose agreement held), never
    "recalibrate", however far the images moved (``further`` is a reason shown, not a cause)."""
    from ..calibset.stats import STAT_COLUMNS
    from ..drift.advice import diagnose, is_drifting

    before = {n: ref.quantile(n, 0.5) for n in STAT_COLUMNS if n in ref.kll}
    since = {n: after.quantile(n, 0.5) for n in STAT_COLUMNS if n in after.kll}
    drifting = is_drifting(trend, before.get("brightness_mean", 0.0))
    return diagnose(before, since, moved, agreement_low=agreement_fell, drifting=drifting, covered=not agreement_fell)


@dataclasses.dataclass(frozen=True)
class _Limits:
    """What a camera's windows were too small for (:attr:`.camera.CameraJudge.unable`): ``unable`` bounded metric ->
    statistics on which it cannot flag a complete separation, at window sizes ``sizes`` (images), against a
    reference of ``reference_images`` in ``reference_windows`` windows."""

    sizes: tuple[int, ...]
    reference_images: int
    reference_windows: int
    unable: dict[str, tuple[str, ...]]

    def key(self) -> tuple[Any, ...]:
        return self.sizes, self.reference_images, self.reference_windows, tuple(self.unable)


def _limits(judge: CameraJudge, ref: Any, start: int) -> _Limits | None:
    """The camera's :class:`_Limits` when, at some window size, PSI or KS cannot flag a complete separation on
    most (over half) of the statistics it judges whose reference varies: then it is out of the vote for the
    camera, not on one statistic whose reference happens to crowd an outer PSI group."""
    unable: dict[str, set[str]] = {}
    sizes = []
    for n, per in sorted(judge.unable.items()):
        most = {m: names for m, names in per.items() if 2 * len(names) > len(judge.varying.get(n, ()))}
        for m, names in most.items():
            unable.setdefault(m, set()).update(names)
        sizes += [n] if most else []
    if not unable:
        return None
    return _Limits(tuple(sizes), int(ref.images - ref.errors), start, {m: tuple(sorted(v)) for m, v in sorted(unable.items())})


def _small_reference_warning(limits: dict[str, _Limits], cameras: int) -> str:
    """One line (``""`` when nothing to say): cameras whose windows and reference are too small for PSI or KS
    to flag even a complete separation, so that the other metrics decide (:mod:`.camera`)."""
    if not limits:
        return ""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for cam, lim in sorted(limits.items()):
        groups.setdefault(lim.key(), []).append(cam)
    parts = []
    for cams in groups.values():
        lims = [limits[c] for c in cams]
        first = lims[0]
        on = []
        for m in first.unable:
            lo, hi = min(len(x.unable[m]) for x in lims), max(len(x.unable[m]) for x in lims)
            on.append(f"{m} on {lo if lo == hi else f'{lo}-{hi}'} statistic{'s' if hi > 1 else ''}")
        who = ", ".join(cams[:6]) + (f" and {len(cams) - 6} more" if len(cams) > 6 else "")
        parts.append(f"{who} (windows of {'/'.join(str(n) for n in first.sizes)} images, reference {first.reference_images} images in "
                     f"{first.reference_windows} windows): {' and '.join(on)}")
    metrics = sorted({m for lim in limits.values() for m in lim.unable})
    return (f"{len(limits)} of {cameras} cameras have windows too small to judge change on every metric: " + "; ".join(parts)
            + f": even a window with every image beyond the reference's range could not exceed {' or '.join(metrics)}'s threshold there, "
              "so the other metrics decide and small changes can be missed; use more images per window (fleet.score.window_hours) "
              "or in the reference (fleet.check.reference_windows)")


def check_camera(store: ScoreStore, camera: str, calibration: dict[str, np.ndarray], calibration_name: str,
                 cfg: FleetCheckConfig, policy: AgreementPolicy | None = None) -> tuple[CameraCheck, _Limits | None]:
    """Judge one camera (see the module docstring); also what its windows were too small for (None: nothing)."""
    shards = store.camera_shards(camera)
    ident = shards[0][0]
    windows = [(i["window"], s) for i, s in shards]
    start = reference_windows(windows, cfg)
    primary = store.primary
    if start < 0:
        judged = [WindowCheck(w, s.images - s.errors, s.errors, s.scored, "few-images") for w, s in windows]
        return CameraCheck(camera, ident["site"], ident["line"], "insufficient", None, False, "", 0.0,
                           (f"only {len(windows)} windows; {cfg.reference_windows} with >= {cfg.min_images} images are needed as its reference",),
                           {}, {}, tuple(judged)), None
    ref_windows = [s for _, s in windows[:start]]
    ref = pooled(ref_windows)
    judge = CameraJudge(camera, store.edges, calibration, cfg, primary)
    ref_checks = [WindowCheck(w, s.images - s.errors, s.errors, s.scored, "reference", agreement=window_agreement(s, primary)["agreement"],
                              det_int8_per_image=window_agreement(s, primary)["det_int8_per_image"], clip_rate=clip_rate(s))
                  for w, s in windows[:start]]
    later = confirm_agreement([judge.judge(w, s, ref, ref_windows) for w, s in windows[start:]], cfg.agreement_windows)
    since = _since(later, cfg.persistence)
    ref_span = f"{windows[0][0][:10]}..{windows[start - 1][0][:10]}"
    summary_ref = {"windows": start, "span": ref_span, **window_agreement(ref, primary), "clip_rate": clip_rate(ref), "images": ref.images}
    limits = _limits(judge, ref, start)
    if since is None:
        return CameraCheck(camera, ident["site"], ident["line"], "ok", None, False, "", 0.0, (), summary_ref, {}, tuple(ref_checks + later)), limits
    after = pooled([s for _, s in windows[start + since:]])
    trend = [s.quantile("brightness_mean", 0.5) for (_, s), w in zip(windows[start + since:], later[since:]) if w.status in ("ok", "alert")]
    reasons, action, severity = _reasons(later, since, ref, after, primary, cfg, calibration_name, ref_span, trend, policy)
    summary_after = {"windows": len(windows) - start - since, **window_agreement(after, primary), "clip_rate": clip_rate(after), "images": after.images}
    judged_last = [w for w in later if w.status in ("ok", "alert")]
    return CameraCheck(camera, ident["site"], ident["line"], "alert", later[since].window, bool(judged_last and judged_last[-1].status == "alert"),
                       action, severity, tuple(reasons), summary_ref, summary_after, tuple(ref_checks + later)), limits


def _rollups(store: ScoreStore, cameras: list[CameraCheck]) -> tuple[dict[str, Any], dict[str, Any]]:
    def group(kind: str, name: str, cams: list[CameraCheck]) -> dict[str, Any]:
        s = store.group(kind, name)
        a = window_agreement(s, store.primary)
        return {"cameras": len(cams), "cameras_alerting": sum(c.status == "alert" for c in cams), "images": s.images, "scored": s.scored,
                "errors": s.errors, "agreement": None if a["agreement"] is None else round(a["agreement"], 6),
                "det_int8_per_image": None if a["det_int8_per_image"] is None else round(a["det_int8_per_image"], 6),
                "windows_alerting": sum(w.status == "alert" for c in cams for w in c.windows)}

    sites = {site: group("site", site, [c for c in cameras if c.site == site]) for site in sorted({c.site for c in cameras})}
    return sites, group("fleet", "", cameras)


def _verdict(cameras: list[CameraCheck], ranked: list[CameraCheck]) -> str:
    if not ranked:
        return f"All {len(cameras)} cameras stable: no image statistic, INT8 agreement or detection rate moved beyond its camera's reference."
    parts = []
    for action in ACTIONS.values():  # most urgent first, as ranked
        cams = [c.camera for c in ranked if c.action == action.name]
        if cams:
            parts.append(f"{len(cams)} {TO_DO[action.name]} ({', '.join(cams)})")
    return f"{len(ranked)} of {len(cameras)} cameras changed: " + "; ".join(parts) + "."


def check_fleet(scores: str | os.PathLike[str], calibration_set: str | os.PathLike[str], config: FleetCheckConfig | None = None,
                *, truth: str | os.PathLike[str] | None = None, policy: AgreementPolicy | None = None) -> FleetCheck:
    """Judge every camera of a scores folder (see the module docstring).

    Args:
        scores: output folder of ``quantkit fleet score``.
        calibration_set: the deployed calibration set (the one the scores' histogram edges came from).
        truth: optional planted-truth JSON (the demo fleet's) to score the alerts against.
        policy: the model's agreement policy (its green line, ``report.min_agreement``; ``fleet_drop``); default: the
            default green line with ``config.agreement_drop``. A camera's agreement fell by its :meth:`~AgreementPolicy.fell`.

    Raises:
        InputFileError: the scores folder (or truth file) is missing or malformed.
        CalibrationSetError: the calibration set is not the one the scores were made with.
    """
    from ..progress import progress

    cfg = config or FleetCheckConfig()
    store = ScoreStore(scores)
    calibration, cal_info = _calibration_counts(calibration_set, store)
    policy = policy or AgreementPolicy(fleet_drop=cfg.agreement_drop)
    judged = [check_camera(store, cam, calibration, cal_info["name"], cfg, policy)
              for cam in progress(sorted(store.cameras), total=len(store.cameras), desc="fleet check", unit="camera")]
    cameras = [c for c, _ in judged]
    warning = _small_reference_warning({c.camera: lim for c, lim in judged if lim is not None}, len(cameras))
    if warning:
        log.warning("fleet check: %s", warning)
    urgency = {name: i for i, name in enumerate(ACTIONS)}  # most urgent action first (check camera, retrain, recalibrate, ...)

    def held(c: CameraCheck) -> bool:  # within one action, a camera whose INT8 decisions stopped agreeing comes first
        before, after = c.reference.get("agreement"), c.after.get("agreement")
        return before is None or after is None or not policy.fell(before, after)

    ranked = sorted((c for c in cameras if c.status == "alert"),
                    key=lambda c: (urgency.get(c.action, len(urgency)), held(c), -c.severity, c.since or "", c.camera))
    sites, fleet = _rollups(store, cameras)
    result = FleetCheck(_verdict(cameras, ranked), bool(ranked), store.primary, tuple(cameras), tuple(c.camera for c in ranked), sites, fleet,
                        cal_info, {"path": str(store.path), "spec_fingerprint": store.summary.get("spec_fingerprint"),
                                   "models": store.summary.get("models", {}), "manifest_root": str(store.summary["manifest"]["root"])}, cfg.to_dict(),
                        warnings=(warning,) if warning else ())
    if truth is not None:
        from .truth import evaluate

        result = dataclasses.replace(result, truth=evaluate(result, truth))
    log.info("fleet check: %s", result.verdict)
    return result

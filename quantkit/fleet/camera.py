"""One camera's windows judged against its own reference windows (thresholds derived for this camera).

Evidence per window (after the reference): image statistics that moved (:mod:`.effects`), INT8
agreement with FP32 below the reference by more than ``agreement_drop``, INT8 detections per image
changed (two-sided Poisson test), activation clipping above the reference (as ``quantkit drift``).
For each moved statistic the PSI against the deployed calibration set is compared with the
reference's: "further from the calibration set" feeds the recommendation.

A statistic moved when ``min_metrics`` of the metrics able to flag the window's change exceed their
thresholds. A metric that stays below its threshold abstains when that threshold is not below the
effect of a complete separation in the window's direction, every image beyond the reference's range at
the end of the axis it moved towards (:func:`.effects.extreme_effects`): its "not moved" says nothing
about such a change (PSI on 5 groups with 6 images a window; KS with fewer), and counting it would
demand agreement from a test that cannot agree. The judge records where a bounded metric (PSI, KS: their
ceiling is set by the window's size, not by how far the images moved) cannot flag a complete separation
(:attr:`CameraJudge.unable`, out of :attr:`CameraJudge.varying`) for the check's small-reference warning.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import decisions, effects
from .config import FleetCheckConfig
from .summaries import Edges, Summary, merge_all


@dataclasses.dataclass(frozen=True)
class StatMove:
    """A statistic that moved in a window: effects and thresholds per metric, KLL medians (reference,
    window), PSI against the calibration set (reference, window)."""

    name: str
    metrics_moved: int
    ratio: float
    effects: dict[str, float]
    thresholds: dict[str, float]
    reference_median: float
    median: float
    calibration_psi_reference: float
    calibration_psi: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class WindowCheck:
    """One window: ``status`` is ``reference``, ``ok``, ``alert`` or ``few-images``; ``evidence`` the
    kinds that fired (``statistics``, ``agreement``, ``detections``, ``clipping``)."""

    window: str
    images: int
    errors: int
    scored: int
    status: str
    moved: tuple[StatMove, ...] = ()
    evidence: tuple[str, ...] = ()
    agreement: float | None = None
    det_int8_per_image: float | None = None
    clip_rate: float | None = None
    detections_p: float | None = None
    agreement_low: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "moved": [m.to_dict() for m in self.moved], "evidence": list(self.evidence)}


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 1e9


def window_agreement(s: Summary, primary: Mapping[str, Any]) -> dict[str, float | None]:
    return decisions.aggregate(s.sums, s.scored, primary)


def clip_rate(s: Summary) -> float | None:
    return s.sums.get("clip_rate", 0.0) / s.clipped if s.clipped else None


def poisson_p(k: int, lam: float) -> float:
    """Two-sided p-value of ``k`` events under Poisson(``lam``): ``min(1, 2 min(P(X <= k), P(X >= k)))``."""
    from scipy.stats import poisson

    if lam <= 0:
        return 1.0 if k == 0 else 0.0
    return float(min(1.0, 2.0 * min(poisson.cdf(k, lam), poisson.sf(k - 1, lam))))


class CameraJudge:
    """Judges one camera's windows. ``calibration``: the calibration set's counts per statistic."""

    def __init__(self, camera: str, edges: Edges, calibration: Mapping[str, np.ndarray], config: FleetCheckConfig, primary: Mapping[str, Any]) -> None:
        self.camera, self.edges, self.calibration, self.cfg, self.primary = camera, edges, calibration, config, primary
        self._thr: dict[int, dict[str, float]] = {}
        self._extremes: dict[str, dict[str, tuple[float, float]]] = {}
        self.unable: dict[int, dict[str, set[str]]] = {}
        """Per window size (images): bounded metric (PSI, KS) -> statistics on which its threshold is not below the
        effect of a complete separation (on a side the reference leaves free)."""
        self.varying: dict[int, set[str]] = {}
        """Per window size (images): the statistics judged whose reference spans more than one bin."""

    def _cal_psi(self, name: str, counts: np.ndarray) -> float:
        cal = self.calibration[name]
        if cal.sum() <= 0 or counts.sum() <= 0:
            return 0.0
        g = effects.psi_groups(cal, self.cfg.psi_bins)
        from .. import metrics

        return metrics.psi_from_counts(effects.grouped(cal, g, self.cfg.psi_bins), effects.grouped(counts, g, self.cfg.psi_bins))

    def _thresholds(self, n: int, ref_windows: Sequence[Summary]) -> dict[str, float]:
        if n not in self._thr:
            c = self.cfg
            names = c.judged_statistics()
            self._thr[n] = effects.camera_thresholds(
                {k: effects.axis(k, self.edges.edges[k]) for k in names}, {k: [w.hist[k] for w in ref_windows] for k in names}, n,
                psi_bins=c.psi_bins, spread_floor=c.spread_floor, repeats=c.repeats, quantile=c.quantile, margin=c.margin,
                floors={"psi": c.psi_floor, "wasserstein": c.wasserstein_floor, "ks": c.ks_floor},
                seed=effects.seed_for(c.seed, self.camera, str(n)))
        return self._thr[n]

    def _extreme_effects(self, name: str, ref: Summary) -> dict[str, tuple[float, float]]:
        if name not in self._extremes:
            self._extremes[name] = effects.extreme_effects(effects.axis(name, self.edges.edges[name]), ref.hist[name],
                                                           psi_bins=self.cfg.psi_bins, spread_floor=self.cfg.spread_floor)
        return self._extremes[name]

    def _able(self, name: str, n: int, ref: np.ndarray, cur: np.ndarray, eff: Mapping[str, float], thr: Mapping[str, float],
              ext: Mapping[str, tuple[float, float]]) -> list[str]:
        """The metrics that vote: above their threshold, or with a threshold that a complete separation in the window's
        direction (its mean bin against the reference's; either way when equal) would exceed. Records bounded
        metrics that cannot flag a complete separation on a side the reference leaves free."""
        bins = np.arange(ref.size)
        step = float(bins @ cur / cur.sum() - bins @ ref / ref.sum())
        free = [side for side, ok in ((0, ref[0] == 0), (1, ref[-1] == 0)) if ok]
        varying = bool(free) and np.count_nonzero(ref) > 1
        if varying:
            self.varying.setdefault(n, set()).add(name)
        able = []
        for m in thr:
            down, up = ext[m]
            if eff[m] > thr[m] or thr[m] < (down if step < 0 else up if step > 0 else max(down, up)):
                able.append(m)
            if varying and m in ("psi", "ks") and thr[m] >= min(ext[m][side] for side in free):
                self.unable.setdefault(n, {}).setdefault(m, set()).add(name)
        return able

    def moved_statistics(self, window: Summary, ref: Summary, ref_windows: Sequence[Summary]) -> list[StatMove]:
        """Statistics of ``window`` that moved against ``ref`` (the merged reference windows): at least
        ``min(min_metrics, metrics able to flag a change)`` metrics above their thresholds (module docstring)."""
        out = []
        n = int(window.images - window.errors)
        thr = {m: v for m, v in self._thresholds(n, ref_windows).items() if m in self.cfg.metrics}
        for name in self.cfg.judged_statistics():
            cur = window.hist[name]
            if cur.sum() == 0 or ref.hist[name].sum() == 0:
                continue
            eff = effects.effects(effects.axis(name, self.edges.edges[name]), ref.hist[name], cur, psi_bins=self.cfg.psi_bins,
                                  spread_floor=self.cfg.spread_floor)
            eff = {m: v for m, v in eff.items() if m in self.cfg.metrics}
            able = self._able(name, n, ref.hist[name], cur, eff, thr, self._extreme_effects(name, ref))
            need = min(self.cfg.min_metrics, len(able))
            above = [m for m in able if eff[m] > thr[m]]
            if need and len(above) >= need:
                ratio = sorted((_finite(eff[m] / thr[m]) if thr[m] > 0 else 1e9 for m in able), reverse=True)[need - 1]
                out.append(StatMove(name, len(above), round(ratio, 6), {m: round(_finite(v), 6) for m, v in eff.items()},
                                    {m: round(v, 6) for m, v in thr.items()}, ref.quantile(name, 0.5), window.quantile(name, 0.5),
                                    round(self._cal_psi(name, ref.hist[name]), 6), round(self._cal_psi(name, cur), 6)))
        return sorted(out, key=lambda m: (-m.ratio, m.name))

    def judge(self, window: str, s: Summary, ref: Summary, ref_windows: Sequence[Summary]) -> WindowCheck:
        """The :class:`WindowCheck` of one window after the reference."""
        c = self.cfg
        valid = s.images - s.errors
        agree = window_agreement(s, self.primary)
        clip = clip_rate(s)
        if valid < c.min_images:
            return WindowCheck(window, valid, s.errors, s.scored, "few-images", agreement=agree["agreement"],
                               det_int8_per_image=agree["det_int8_per_image"], clip_rate=clip)
        moved = self.moved_statistics(s, ref, ref_windows)
        evidence = ["statistics"] if moved else []
        ref_agree = window_agreement(ref, self.primary)
        p_det, low = None, False
        if s.scored >= c.min_scored and ref.scored:
            low = agree["agreement"] is not None and ref_agree["agreement"] is not None and ref_agree["agreement"] - agree["agreement"] > c.agreement_drop
            rate = max(ref_agree["det_int8_per_image"] or 0.0, 1.0 / ref.scored)
            k = int(s.sums.get("n_det_int8", 0))
            p_det = poisson_p(k, rate * s.scored)
            if abs(k / s.scored - rate) > c.detections_change * rate and p_det < c.detections_alpha:
                evidence.append("detections")
        ref_clip = clip_rate(ref)
        if clip is not None and ref_clip is not None and clip > max(ref_clip * c.clip_ratio, ref_clip + c.clip_floor):
            evidence.append("clipping")
        return WindowCheck(window, valid, s.errors, s.scored, "alert" if evidence else "ok", tuple(moved), tuple(evidence),
                           agree["agreement"], agree["det_int8_per_image"], clip, None if p_det is None else round(p_det, 8), bool(low))


def confirm_agreement(windows: Sequence[WindowCheck], runs: int) -> list[WindowCheck]:
    """Add ``agreement`` evidence to every window of a run of at least ``runs`` consecutive windows whose
    agreement is low (windows without scored images neither break nor extend a run): one image that
    INT8 gets wrong is common on an unchanged camera, a run of them is not."""
    out = list(windows)
    run: list[int] = []
    for i in range(len(out) + 1):
        w = out[i] if i < len(out) else None
        if w is not None and w.agreement_low:
            run.append(i)
            continue
        if w is not None and (w.agreement is None or w.status not in ("ok", "alert")):
            continue
        if len(run) >= runs:
            for j in run:
                ev = (*out[j].evidence, "agreement")
                out[j] = dataclasses.replace(out[j], evidence=ev, status="alert")
        run = []
    return out


def reference_windows(windows: Sequence[tuple[str, Summary]], config: FleetCheckConfig) -> int:
    """Index after the reference: the first ``reference_windows`` windows with at least ``min_images``
    valid images form it (earlier thin windows are part of it too); -1 when there are not enough."""
    found = 0
    for i, (_, s) in enumerate(windows):
        if s.images - s.errors >= config.min_images:
            found += 1
            if found == config.reference_windows:
                return i + 1
    return -1


def pooled(windows: Sequence[Summary]) -> Summary:
    return merge_all(windows)

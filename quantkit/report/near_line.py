"""Decisions near the line, in plain words for a quality lead (:class:`quantkit.artifacts.evaluation.NearLine`).

One sentence per role and site set, and the warnings shown under the verdict. Nothing here knows a task: the adapter
chose which values are decisions and the threshold set gave the integer step (:mod:`quantkit.thresholds.near_line`).
"""

from __future__ import annotations

from ..artifacts.evaluation import NearLine
from .config import ReportConfig
from .model import INT8_ROLES, ModelReport, is_fragile


def ordered(near: dict[str, NearLine]) -> list[tuple[str, NearLine]]:
    """``(role, result)`` pairs, deployed first, then candidate, then any other role by name."""
    return sorted(near.items(), key=lambda kv: (INT8_ROLES.index(kv[0]) if kv[0] in INT8_ROLES else len(INT8_ROLES), kv[0]))


def _pct(share: float) -> str:
    """A share (0..1) as a whole percentage; under 1% but above 0 reads "<1%"."""
    return "<1%" if 0 < share < 0.005 else f"{100 * share:.0f}%"


def sentence(nl: NearLine, role: str, cfg: ReportConfig) -> str:
    """One plain sentence: the share of FP32's decisions within one INT8 step of ``role``'s threshold on this site set,
    against the share when the thresholds were bound, and what it means."""
    who = f"{role.capitalize()} model"
    if nl.decisions == 0:
        return f"{who}: FP32 made no decisions on these images, so none can sit near the line."
    now = _pct(nl.share_1)
    wide = f" ({_pct(nl.share_k)} within {nl.k} steps"
    if nl.baseline_1 is None:
        return (f"{who}: {now} of decisions sit within one INT8 step of the line{wide}); there is no calibration-time figure to "
                "compare with (re-run 'quantkit bind' to record one).")
    then, wide_then = _pct(nl.baseline_1), _pct(nl.baseline_k or 0.0)
    wide += f", {wide_then} when calibrated)"
    if is_fragile(nl, cfg):
        return (f"{who}: {now} of decisions now sit within one INT8 step of the line, up from {then} when calibrated{wide}: "
                "small changes in the images can flip them, even while agreement with FP32 still looks fine.")
    trend = "down from" if nl.share_1 < nl.baseline_1 else "about the same as" if nl.share_1 - nl.baseline_1 < 0.005 else "a little up from"
    return f"{who}: {now} of decisions sit within one INT8 step of the line, {trend} {then} when calibrated{wide}: no sign of fragile decisions."


def warnings(model: ModelReport, cfg: ReportConfig) -> list[str]:
    """One line per site set and role whose decisions near the line rose by ``cfg.near_line_rise`` or more."""
    out = []
    for s in model.sites:
        for role, nl in ordered(s.near_line):
            if is_fragile(nl, cfg):
                out.append(f"Decisions near the line on {s.name}: {_pct(nl.share_1)} of the {role} model's decisions sit within one "
                           f"INT8 step of its threshold, up from {_pct(nl.baseline_1 or 0.0)} when calibrated; they can flip before "
                           "agreement with FP32 falls.")
    return out

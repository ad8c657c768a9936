"""Export-note checks: does the declared preprocessing look right on a sample?

The classic mistakes are an NHWC array given to an NCHW model, RGB/BGR swapped, and 0–255 vs 0–1 vs
normalized input. Each is checked by running the model on a *probe* under the declared preprocessing
and under each swapped alternative, and comparing the probe's score of the outputs (:mod:`.probes`: which probe applies is the task's
knowledge, a pluggable hook; built in is ``db_text``, whose score is a separation ROC AUC). A declared
setting is flagged when an alternative scores higher by more than ``margin``.

Where no probe applies (a classifier, a box detector's ``[1, N, 5+C]`` head, a recognizer, inputs under
32 px), colour order and value range are reported ``untested`` with the reason; nothing is guessed.
A layout mismatch is also caught without running: a declared NHWC layout on an input whose static
channel dim sits at position 1 (or NCHW with it last) cannot be right.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..note import Preprocessing
from .probes import PROBES, Probe, ProbeContext, ProbeFactory, map_auc, register_probe, select_probe, separation_auc, text_map_probe, text_probe

log = logging.getLogger(__name__)

__all__ = ["PROBES", "NoteCheckReport", "NoteFinding", "Probe", "ProbeContext", "ProbeFactory", "VariantScore", "check_note", "map_auc",
           "register_probe", "select_probe", "separation_auc", "text_map_probe", "text_probe"]

RANGES: dict[str, dict[str, Any]] = {
    "0-255": {"scale": 1.0, "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)},
    "0-1": {"scale": 1.0 / 255.0, "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)},
    "normalized(0.5,0.5)": {"scale": 1.0 / 255.0, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)},
    "normalized(imagenet)": {"scale": 1.0 / 255.0, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
}
"""Value ranges tried as alternatives. ImageNet mean/std are torchvision's ``transforms.Normalize`` values."""


@dataclasses.dataclass(frozen=True)
class VariantScore:
    """The probe's score (for map probes the separation AUC: 0.5 = none, 1 = perfect) under one
    preprocessing variant. ``score`` is ``None`` when the model rejects the variant's array (wrong shape)
    or the probe cannot score the outputs."""

    layout: str
    color_order: str
    value_range: str
    declared: bool
    score: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class NoteFinding:
    """A declared setting that looks wrong: ``check`` ∈ {layout, color_order, value_range}."""

    check: str
    declared: str
    suggested: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class NoteCheckReport:
    """Scores of every variant tried, the findings (empty when the declared note looks right) and a
    verdict per check (see :meth:`verdicts`)."""

    probe: str
    margin: float
    scores: tuple[VariantScore, ...]
    findings: tuple[NoteFinding, ...]
    verdict: tuple[tuple[str, str], ...]
    layout_from_shape: str | None = None
    untested_reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.findings

    def verdicts(self) -> dict[str, str]:
        """Per check: ``flagged`` (a finding), ``ok`` (every alternative scores lower by more than
        ``margin``, or the input shape confirms the layout), ``indistinguishable`` (an alternative
        scores within ``margin``: the probe cannot tell them apart on this model), ``untested`` (no probe
        applies, or no variant could be scored: :attr:`untested_reason` says why) or ``n/a`` (colour order
        of a 1-channel input)."""
        return dict(self.verdict)

    def summary(self) -> str:
        """One line: the verdict per check, and why anything is untested."""
        line = ", ".join(f"{k}: {v}" for k, v in self.verdicts().items())
        return line + (f" ({self.untested_reason})" if self.untested_reason else "")

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "margin": self.margin, "ok": self.ok, "layout_from_shape": self.layout_from_shape, "verdicts": self.verdicts(),
                "scores": [s.to_dict() for s in self.scores], "findings": [f.to_dict() for f in self.findings],
                "untested_reason": self.untested_reason}

    def __repr__(self) -> str:
        return f"NoteCheckReport(ok={self.ok}, findings={[f.check for f in self.findings]})"


def _layout_from_shape(shape: Sequence[Any] | None, channels: int = 3, batch_axis: bool = True) -> str | None:
    """NCHW / NHWC when the static input shape shows where the ``channels`` dim sits, else None."""
    rank = 4 if batch_axis else 3
    if not shape or len(shape) != rank:
        return None
    first, last = shape[rank - 3], shape[rank - 1]
    if first == channels and last != channels:
        return "NCHW"
    if last == channels and first != channels:
        return "NHWC"
    return None


def _transposed(x: np.ndarray, layout: str) -> np.ndarray:
    """``x`` (in ``layout``, with or without batch axis) moved to the other layout."""
    if x.ndim == 4:
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if layout == "NCHW" else x.transpose(0, 3, 1, 2))
    return np.ascontiguousarray(x.transpose(1, 2, 0) if layout == "NCHW" else x.transpose(2, 0, 1))


def _ranges_for(pre: Preprocessing) -> dict[str, dict[str, Any]]:
    """Value ranges to try, the declared one first; ImageNet's per-channel mean/std only for 3 channels."""
    declared = _range_name(pre)
    out: dict[str, dict[str, Any]] = {declared: {}}
    for name, f in RANGES.items():
        if name == declared or (len(set(f["mean"])) > 1 and pre.channels != 3):
            continue
        out[name] = {"scale": f["scale"], "mean": f["mean"] if pre.channels == 3 else f["mean"][:1],
                     "std": f["std"] if pre.channels == 3 else f["std"][:1]}
    return out


def check_note(model: Any, pre: Preprocessing, probe: Probe | None, *, margin: float = 0.05, no_probe: str = "no probe given") -> NoteCheckReport:
    """Score the declared preprocessing against swapped layout, colour order and value range.

    Colour order and value range are searched jointly (2 × ``len(RANGES)`` runs; colour only for 3- and
    4-channel inputs), so one wrong setting does not make the other look wrong: the best-scoring
    combination is found, and a declared setting that differs from it is flagged when the best beats every
    combination that keeps the declared setting by more than ``margin``. The layout is checked from the
    input's static shape, else by one run with the array transposed to the other layout.

    Args:
        model: path or serialized bytes of an ONNX model with one image input, or an ``onnx.ModelProto``.
        pre: the declared preprocessing (from the export note).
        probe: image (+ mask) and scorer; its image is resized by ``pre`` like any input. None: only the
            layout is checked (from the input shape), the rest is ``untested`` because of ``no_probe``.
        margin: score margin by which an alternative must beat the declared setting to flag it.
        no_probe: the one-line reason no probe applies (reported when ``probe`` is None).

    Raises:
        ModelError: the model cannot be loaded by ONNX Runtime.
    """
    import onnx

    from ..runner import OrtRunner

    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    scores: list[VariantScore] = []
    findings: list[NoteFinding] = []
    verdict: dict[str, str] = {}
    runner = OrtRunner(src, name="note-check model")
    with runner:
        name = runner.input_names[0]
        shape = runner.session.get_inputs()[0].shape
        by_shape = _layout_from_shape([d if isinstance(d, int) and d > 0 else None for d in shape], pre.channels, pre.batch_axis)
        if by_shape is not None and by_shape != pre.layout:
            findings.append(NoteFinding("layout", pre.layout, by_shape, f"input {name!r} has shape {shape}, which is {by_shape}, but the note declares {pre.layout}; set preprocessing.layout: {by_shape}"))
            verdict["layout"] = "flagged"
        elif by_shape == pre.layout:
            verdict["layout"] = "ok"
        reason = ""
        if probe is None:
            reason = f"no probe: {no_probe}"
            verdict.setdefault("layout", "untested")
            verdict.update(color_order="n/a" if pre.channels == 1 else "untested", value_range="untested")
        else:
            reason = _probe_checks(runner, name, pre, probe, margin, scores, findings, verdict)
    return NoteCheckReport(probe.name if probe is not None else "none", margin, tuple(scores), tuple(findings), tuple(sorted(verdict.items())),
                           by_shape, reason)


def _probe_checks(runner: Any, name: str, pre: Preprocessing, probe: Probe, margin: float, scores: list[VariantScore],
                  findings: list[NoteFinding], verdict: dict[str, str]) -> str:
    """Run the probe under every variant; fill ``scores``, ``findings`` and ``verdict``; return why
    anything stayed untested ('' when everything was scored)."""
    rmask = None
    if probe.mask is not None:  # the mask is resized exactly like the image (its padding, whatever pad_value, is off the mask)
        rmask = pre.replace(pad_value=0).resize(np.repeat(probe.mask.astype(np.uint8)[..., None] * 255, 3, axis=2))[0][..., 0] > 127
    declared_range = _range_name(pre)
    other_layout = "NHWC" if pre.layout == "NCHW" else "NCHW"

    def score(p: Preprocessing, range_name: str, transpose: bool = False) -> float | None:
        x, _ = p.apply(probe.image)  # every policy (a crop's zoom, pad_input after normalizing) applied once, from the probe
        layout = other_layout if transpose else p.layout
        if transpose:
            x = _transposed(x, p.layout)
        try:
            out = runner.infer({name: x})
        except Exception as e:  # noqa: BLE001 - ORT rejects a wrongly shaped array
            log.debug("variant %s rejected: %s", layout, e)
            s = None
        else:
            s = probe.score(list(out.values()), rmask, layout)
        declared = not transpose and p.color_order == pre.color_order and range_name == declared_range
        scores.append(VariantScore(layout, p.color_order if pre.channels > 1 else "gray", range_name, declared, s))
        return s

    grid: dict[tuple[str, str], float | None] = {}
    ranges = _ranges_for(pre)
    colours = (pre.color_order,) if pre.channels == 1 else (pre.color_order, "BGR" if pre.color_order == "RGB" else "RGB")
    for colour in colours:
        for rname, fields in ranges.items():
            grid[(colour, rname)] = score(pre.replace(color_order=colour, **fields), rname)
    base = grid[(pre.color_order, declared_range)]
    by_shape_verdicts = dict(verdict)  # layout decided by the input shape, before any run
    alt_layout = None
    if "layout" not in verdict:
        alt_layout = score(pre, declared_range, transpose=True)
        if _better(alt_layout, base, margin) and alt_layout >= probe.min_score:
            findings.append(NoteFinding("layout", pre.layout, other_layout, f"an {other_layout} array separates the probe better (score {alt_layout:.3f} vs {_fmt(base)}); check preprocessing.layout"))
            verdict["layout"] = "flagged"
        else:
            verdict["layout"] = _closeness(alt_layout, base, margin)

    runnable = {k: v for k, v in grid.items() if v is not None}
    best_any = max([v for v in runnable.values()] + ([alt_layout] if alt_layout is not None else []), default=None)
    if not runnable or best_any is None or best_any < probe.min_score:
        if verdict.get("layout") != "flagged" and "layout" not in by_shape_verdicts:
            verdict["layout"] = "untested"
        verdict.update(color_order="n/a" if pre.channels == 1 else "untested", value_range="untested")
        if not runnable:
            return f"probe {probe.name!r} could not score the model's outputs under any variant"
        return f"the model does not respond to probe {probe.name!r} under any variant (best score {best_any:.3f} < {probe.min_score:g})"
    # best combination; ties go to the one closer to the declared note
    (bc, br), best = max(runnable.items(), key=lambda kv: (kv[1], (kv[0][0] == pre.color_order) + (kv[0][1] == declared_range)))
    keep_colour = max((v for (c, _), v in runnable.items() if c == pre.color_order), default=None)
    keep_range = max((v for (_, r), v in runnable.items() if r == declared_range), default=None)
    for check, declared, suggested, kept, field in (("color_order", pre.color_order, bc, keep_colour, "color_order"),
                                                    ("value_range", declared_range, br, keep_range, "scale/mean/std")):
        # flag only when keeping the declared setting (best over the other dimension) loses by > margin
        if declared != suggested and _better(best, kept, margin):
            findings.append(NoteFinding(check, declared, suggested, f"{suggested} input separates the probe better (score {best:.3f} vs {_fmt(kept)} at the declared {check}); check preprocessing.{field}"))
            verdict[check] = "flagged"
    if pre.channels == 1:
        verdict["color_order"] = "n/a"
    swapped_colour = "BGR" if bc == "RGB" else "RGB"
    verdict.setdefault("color_order", _closeness(grid.get((swapped_colour, br)), best, margin))
    others = [grid[(bc, r)] for r in ranges if r != br]
    verdict.setdefault("value_range", _closeness(max((o for o in others if o is not None), default=None), best, margin))
    return ""


def _closeness(alt: float | None, ref: float | None, margin: float) -> str:
    if alt is None or ref is None:
        return "untested" if ref is None else "ok"
    return "indistinguishable" if alt > ref - margin else "ok"


def _better(alt: float | None, base: float | None, margin: float) -> bool:
    if alt is None:
        return False
    return base is None or alt > base + margin


def _fmt(v: float | None) -> str:
    return "n/a (the model rejects the declared array)" if v is None else f"{v:.3f}"


def _range_name(pre: Preprocessing) -> str:
    for rname, f in RANGES.items():
        if np.isclose(pre.scale, f["scale"]) and np.allclose(pre.mean, f["mean"]) and np.allclose(pre.std, f["std"]):
            return rname
    return f"scale={pre.scale:g},mean={list(pre.mean)},std={list(pre.std)}"

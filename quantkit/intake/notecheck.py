"""Export-note checks: does the declared preprocessing look right on a sample?

The classic mistakes are an NHWC array given to an NCHW model, RGB/BGR swapped, and 0–255 vs 0–1 vs
normalized input. Each is checked by running the model on a *probe* (an image plus a mask of where
the model should respond) under the declared preprocessing and under each swapped alternative, and
comparing how well the first output separates the masked pixels from the rest. The separation score
is the ROC AUC of output values inside vs outside the mask (Mann–Whitney U / (n₁·n₂), computed with
``scipy.stats.rankdata``): 0.5 means no separation, 1.0 perfect, independent of output scale. A
declared setting is flagged when an alternative scores higher by more than ``margin``.

A layout mismatch is also caught without running: a declared NHWC layout on an input whose static
dim 1 is 3 (or NCHW with static last dim 3 and dim 1 not 3) cannot be right.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..note import Preprocessing

log = logging.getLogger(__name__)

RANGES: dict[str, dict[str, Any]] = {
    "0-255": {"scale": 1.0, "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)},
    "0-1": {"scale": 1.0 / 255.0, "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)},
    "normalized(0.5,0.5)": {"scale": 1.0 / 255.0, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)},
    "normalized(imagenet)": {"scale": 1.0 / 255.0, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
}
"""Value ranges tried as alternatives. ImageNet mean/std are torchvision's ``transforms.Normalize`` values."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """A sample for the checks: ``image`` ``(H, W, 3) uint8`` RGB and ``mask`` ``(H, W) bool`` marking
    where the model's first output should be high (e.g. text pixels for a text detector)."""

    name: str
    image: np.ndarray
    mask: np.ndarray

    def __repr__(self) -> str:
        return f"Probe({self.name!r}, {self.image.shape[1]}x{self.image.shape[0]}, mask={self.mask.mean():.1%})"


def text_probe(size: tuple[int, int] = (640, 640), *, seed: int = 0) -> Probe:
    """A photo (scikit-image's ``coffee``) with coloured labels of printed text pasted on it; the mask
    covers the middle band of each text line (where DB-style detectors put their shrunk text kernels). Deterministic for a given ``seed``."""
    import cv2
    from skimage import data

    h, w = size
    rng = np.random.default_rng(seed)
    img = cv2.resize(data.coffee(), (w, h), interpolation=cv2.INTER_AREA)
    mask = np.zeros((h, w), bool)
    lines = ["LOT 4711-A", "SN 00932871", "EXP 2027-03", "QC PASS 17"]
    colours = [((250, 240, 220), (20, 20, 20)), ((40, 60, 200), (250, 250, 120)), ((230, 30, 30), (255, 255, 255)), ((245, 245, 245), (30, 30, 160))]
    y = int(h * 0.08)
    for text, (bg, fg) in zip(lines, colours):
        scale = max(0.6, w / 640 * 1.4) * float(rng.uniform(0.9, 1.1))
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 3)
        x = int(rng.integers(int(0.03 * w), max(int(0.03 * w) + 1, w - tw - int(0.05 * w))))
        if y + th + base + 12 > h:
            break
        cv2.rectangle(img, (x - 10, y - 8), (x + tw + 10, y + th + base + 8), bg, -1)
        cv2.putText(img, text, (x, y + th), cv2.FONT_HERSHEY_SIMPLEX, scale, fg, 3, cv2.LINE_AA)
        core = max(1, int(0.3 * th))  # DB-style shrunk text core: the middle band of the x-height
        mask[y + th // 2 - core // 2:y + th // 2 + core - core // 2, x + 4:x + tw - 4] = True
        y += th + base + int(h * 0.12)
    return Probe(f"text-on-coffee-{h}x{w}-seed{seed}", img, mask)


@dataclasses.dataclass(frozen=True)
class VariantScore:
    """Separation AUC (0.5 = none, 1 = perfect) of the first output under one preprocessing variant.
    ``score`` is ``None`` when the model rejects the variant's array (wrong shape)."""

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

    @property
    def ok(self) -> bool:
        return not self.findings

    def verdicts(self) -> dict[str, str]:
        """Per check: ``flagged`` (a finding), ``ok`` (every alternative scores lower by more than
        ``margin``, or the input shape confirms the layout), ``indistinguishable`` (an alternative
        scores within ``margin``: the probe cannot tell them apart on this model) or ``untested``."""
        return dict(self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "margin": self.margin, "ok": self.ok, "layout_from_shape": self.layout_from_shape, "verdicts": self.verdicts(),
                "scores": [s.to_dict() for s in self.scores], "findings": [f.to_dict() for f in self.findings]}

    def __repr__(self) -> str:
        return f"NoteCheckReport(ok={self.ok}, findings={[f.check for f in self.findings]})"


def separation_auc(values: np.ndarray, mask: np.ndarray) -> float:
    """ROC AUC of ``values`` for ``mask`` vs ``~mask`` (both ``(H, W)``), ties counted half.

    Source: AUC = U / (n₁ n₂), U the Mann–Whitney statistic from average ranks.
    """
    from scipy.stats import rankdata

    v = np.asarray(values, np.float64).ravel()
    m = np.asarray(mask, bool).ravel()
    n1, n0 = int(m.sum()), int((~m).sum())
    if n1 == 0 or n0 == 0:
        raise ValueError("probe mask must have pixels inside and outside")
    r = rankdata(v)
    u = r[m].sum() - n1 * (n1 + 1) / 2.0
    return float(u / (n1 * n0))


def _response_map(out: np.ndarray, layout: str) -> np.ndarray:
    """First image, first channel of a spatial output as ``(h, w)``."""
    a = np.asarray(out)
    if a.ndim == 4:
        return a[0, 0] if layout == "NCHW" or a.shape[1] <= 4 else a[0, :, :, 0]
    if a.ndim == 3:
        return a[0]
    if a.ndim == 2:
        return a
    raise ModelError(f"note check: first output has shape {a.shape}; the probe check needs a spatial (H, W) output map")


def _layout_from_shape(shape: Sequence[Any] | None) -> str | None:
    if not shape or len(shape) != 4:
        return None
    if shape[1] == 3 and shape[3] != 3:
        return "NCHW"
    if shape[3] == 3 and shape[1] != 3:
        return "NHWC"
    return None


def check_note(model: Any, pre: Preprocessing, probe: Probe, *, margin: float = 0.05) -> NoteCheckReport:
    """Score the declared preprocessing against swapped layout, colour order and value range.

    Colour order and value range are searched jointly (2 × ``len(RANGES)`` runs), so one wrong
    setting does not make the other look wrong: the best-scoring combination is found, and a declared
    setting that differs from it is flagged when the best beats every combination that keeps the
    declared setting by more than ``margin``. The layout is checked from the input's static shape, else by one run with the
    array transposed to the other layout.

    Args:
        model: path or serialized bytes of an ONNX model with one image input, or an ``onnx.ModelProto``.
        pre: the declared preprocessing (from the export note).
        probe: image + mask; its image is resized by ``pre`` like any input.
        margin: AUC margin by which an alternative must beat the declared setting to flag it.

    Raises:
        ModelError: the model cannot be loaded, or its first output is not a spatial map.
    """
    import cv2
    import onnx

    from ..runner import OrtRunner

    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    scores: list[VariantScore] = []
    findings: list[NoteFinding] = []
    verdict: dict[str, str] = {}
    resized_img, _ = pre.resize(probe.image)  # the mask is resized exactly like the image
    mask_u8 = np.repeat(probe.mask.astype(np.uint8)[..., None] * 255, 3, axis=2)
    rmask = pre.resize(mask_u8)[0][..., 0] > 127
    declared_range = _range_name(pre)
    other_layout = "NHWC" if pre.layout == "NCHW" else "NCHW"

    runner = OrtRunner(src, name="note-check model")
    with runner:
        name = runner.input_names[0]
        shape = runner.session.get_inputs()[0].shape
        by_shape = _layout_from_shape([d if isinstance(d, int) else None for d in shape])

        def score(p: Preprocessing, range_name: str, transpose: bool = False) -> float | None:
            x, _ = p.apply(resized_img)
            if transpose:
                x = np.ascontiguousarray(x.transpose(0, 2, 3, 1) if p.layout == "NCHW" else x.transpose(0, 3, 1, 2))
            layout = other_layout if transpose else p.layout
            try:
                out = runner.infer({name: x})
            except Exception as e:  # noqa: BLE001 - ORT rejects a wrongly shaped array
                log.debug("variant %s rejected: %s", layout, e)
                s = None
            else:
                resp = _response_map(next(iter(out.values())), layout)
                m = rmask if resp.shape == rmask.shape else cv2.resize(rmask.astype(np.uint8), (resp.shape[1], resp.shape[0]), interpolation=cv2.INTER_NEAREST) > 0
                s = separation_auc(resp, m)
            declared = not transpose and p.color_order == pre.color_order and range_name == declared_range
            scores.append(VariantScore(layout, p.color_order, range_name, declared, s))
            return s

        grid: dict[tuple[str, str], float | None] = {}
        ranges: dict[str, dict[str, Any]] = {declared_range: {}} | {k: v for k, v in RANGES.items() if k != declared_range}
        for colour in (pre.color_order, "BGR" if pre.color_order == "RGB" else "RGB"):
            for rname, fields in ranges.items():
                grid[(colour, rname)] = score(pre.replace(color_order=colour, **fields), rname)
        base = grid[(pre.color_order, declared_range)]
        alt_layout = score(pre, declared_range, transpose=True)

        # layout: static shape evidence first, then the transposed run
        if by_shape is not None and by_shape != pre.layout:
            findings.append(NoteFinding("layout", pre.layout, by_shape, f"input {name!r} has shape {shape}, which is {by_shape}, but the note declares {pre.layout}; set preprocessing.layout: {by_shape}"))
            verdict["layout"] = "flagged"
        elif by_shape == pre.layout:
            verdict["layout"] = "ok"
        elif _better(alt_layout, base, margin):
            findings.append(NoteFinding("layout", pre.layout, other_layout, f"an {other_layout} array separates the probe better (AUC {alt_layout:.3f} vs {_fmt(base)}); check preprocessing.layout"))
            verdict["layout"] = "flagged"
        else:
            verdict["layout"] = _closeness(alt_layout, base, margin)

        runnable = {k: v for k, v in grid.items() if v is not None}
        if not runnable:
            verdict.update(color_order="untested", value_range="untested")
        else:
            # best combination; ties go to the one closer to the declared note
            (bc, br), best = max(runnable.items(), key=lambda kv: (kv[1], (kv[0][0] == pre.color_order) + (kv[0][1] == declared_range)))
            keep_colour = max((v for (c, _), v in runnable.items() if c == pre.color_order), default=None)
            keep_range = max((v for (_, r), v in runnable.items() if r == declared_range), default=None)
            for check, declared, suggested, kept, field in (("color_order", pre.color_order, bc, keep_colour, "color_order"),
                                                            ("value_range", declared_range, br, keep_range, "scale/mean/std")):
                # flag only when keeping the declared setting (best over the other dimension) loses by > margin
                if declared != suggested and _better(best, kept, margin):
                    findings.append(NoteFinding(check, declared, suggested, f"{suggested} input separates the probe better (AUC {best:.3f} vs {_fmt(kept)} at the declared {check}); check preprocessing.{field}"))
                    verdict[check] = "flagged"
            swapped_colour = "BGR" if bc == "RGB" else "RGB"
            verdict.setdefault("color_order", _closeness(grid.get((swapped_colour, br)), best, margin))
            others = [grid[(bc, r)] for r in ranges if r != br]
            verdict.setdefault("value_range", _closeness(max((o for o in others if o is not None), default=None), best, margin))
    return NoteCheckReport(probe.name, margin, tuple(scores), tuple(findings), tuple(sorted(verdict.items())), by_shape)


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


def _describe(pre: Preprocessing) -> str:
    return f"{pre.layout} {pre.color_order} {_range_name(pre)}"

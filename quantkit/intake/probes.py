"""Probes for the export-note check (:mod:`.notecheck`): what a model should respond to, per task.

A :class:`Probe` is an image (+ optional mask) and a scorer of the model's outputs. Which probe applies is
the task's knowledge, so probes are a pluggable hook: a :data:`ProbeFactory` takes a :class:`ProbeContext`
(input size, input and output shapes, seed) and returns a :class:`Probe`, or a one-line reason why it does
not apply. Factories are registered by name in :data:`PROBES` (:func:`register_probe`; a task adapter
registers its own); ``intake.note_probe`` picks one (``auto``: the first registered one that applies).

Built in: ``db_text`` (:func:`text_map_probe`): printed text on a photo, with a mask where a DB-style text
map must be high. Its score is the ROC AUC of the first output's map inside vs outside the mask
(Mann–Whitney U / (n₁·n₂), computed with ``scipy.stats.rankdata``): 0.5 means no separation, 1.0 perfect,
independent of output scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import ConfigError

ProbeScore = Callable[[Sequence[np.ndarray], "np.ndarray | None", str], "float | None"]
"""``(model outputs in graph order, the probe mask resized like the image (or None), layout) -> score``:
higher = the outputs respond more as the probe expects; None = cannot be scored on these outputs."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """A sample for the checks: ``image`` ``(H, W, 3) uint8`` RGB; ``mask`` ``(H, W) bool`` marking
    where the model's first output map should be high (map probes), or None; ``scorer``: how outputs are
    scored (default: :func:`map_auc`, the separation AUC of the first output map for ``mask``);
    ``min_score``: the score some variant must reach before any setting is judged."""

    name: str
    image: np.ndarray
    mask: np.ndarray | None = None
    scorer: ProbeScore | None = None
    min_score: float = 0.75
    """Evidence floor: unless some variant scores at least this, the model does not respond to the probe
    and nothing is flagged (for the AUC scorer 0.5 is chance; 0.75 means a clear response)."""

    def score(self, outputs: Sequence[np.ndarray], mask: np.ndarray | None, layout: str) -> float | None:
        """The probe's score of ``outputs`` (see :data:`ProbeScore`)."""
        return (self.scorer or map_auc)(outputs, mask, layout)

    def __repr__(self) -> str:
        m = "" if self.mask is None else f", mask={self.mask.mean():.1%}"
        return f"Probe({self.name!r}, {self.image.shape[1]}x{self.image.shape[0]}{m})"


@dataclasses.dataclass(frozen=True)
class ProbeContext:
    """What a :data:`ProbeFactory` may look at: ``input_size`` ``(H, W)``, the fixed input shape, each
    output's shape after shape inference (ints, or None for unknown dims; None for unknown rank), the seed."""

    input_size: tuple[int, int]
    input_shape: tuple[int, ...]
    output_shapes: tuple[tuple[int | None, ...] | None, ...]
    seed: int = 0


ProbeFactory = Callable[[ProbeContext], "Probe | str"]
"""Returns a :class:`Probe` for the model, or a one-line reason why this probe does not apply."""

PROBES: dict[str, ProbeFactory] = {}
"""Registered probe factories by name, in registration order (``auto`` tries them in this order)."""


def register_probe(name: str, factory: ProbeFactory) -> ProbeFactory:
    """Register ``factory`` under ``name`` (a task adapter registers the probe for its task); returns it."""
    if not name or name in ("auto", "none"):
        raise ValueError(f"probe name {name!r} is reserved")
    PROBES[name] = factory
    return factory


def select_probe(name: str, ctx: ProbeContext) -> Probe | str:
    """The probe ``name`` (``auto``: the first registered one that applies) for ``ctx``, or why none applies.

    Raises:
        ConfigError: ``name`` is neither ``auto`` nor a registered probe.
    """
    if name != "auto" and name not in PROBES:
        raise ConfigError(f"intake.note_probe: {name!r} is not a registered probe; use auto or one of {', '.join(PROBES) or '(none)'}")
    reasons = []
    for key in ([name] if name != "auto" else list(PROBES)):
        got = PROBES[key](ctx)
        if isinstance(got, Probe):
            return got
        reasons.append(f"{key}: {got}")
    return "; ".join(reasons) or "no probe registered"


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


MIN_MAP_PROBE_PX = 32
"""Smallest input side the text probe is drawn at: below it the printed lines do not fit."""


def text_map_probe(ctx: ProbeContext) -> Probe | str:
    """The ``db_text`` probe (:func:`text_probe`) when the first output can be a per-pixel map of the input:
    rank 3 ``[N, h, w]`` or rank 4 with at most 4 channels, spatial sides >= 8 whose aspect is within 25 %
    of the input's (unknown dims are given the benefit of the doubt). Else the reason it does not apply."""
    h, w = ctx.input_size
    if min(h, w) < MIN_MAP_PROBE_PX:
        return f"input {h}x{w} is under {MIN_MAP_PROBE_PX} px, too small for the printed-text probe"
    shape = ctx.output_shapes[0] if ctx.output_shapes else None
    if shape is None:
        return text_probe((h, w), seed=ctx.seed)
    spatial = _spatial_dims(shape)
    if spatial is None:
        return f"first output {_fmt_shape(shape)} is not a per-pixel map (rank 3 [N,h,w] or rank 4 with <= 4 channels)"
    sh, sw = spatial
    if sh is not None and sw is not None and (min(sh, sw) < 8 or abs((sh / sw) / (h / w) - 1) > 0.25):
        return f"first output {_fmt_shape(shape)} is not a map of the {h}x{w} input (sides < 8 or another aspect ratio)"
    return text_probe((h, w), seed=ctx.seed)


def _spatial_dims(shape: Sequence[int | None]) -> tuple[int | None, int | None] | None:
    if len(shape) == 3:
        return shape[1], shape[2]
    if len(shape) == 4:
        if shape[1] is not None and shape[1] <= 4:
            return shape[2], shape[3]
        if shape[3] is not None and shape[3] <= 4:
            return shape[1], shape[2]
    return None


def _fmt_shape(shape: Sequence[int | None]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


register_probe("db_text", text_map_probe)


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


def _response_map(out: np.ndarray, layout: str) -> np.ndarray | None:
    """First image, first channel of a spatial output as ``(h, w)``; None when the output is not a map."""
    a = np.asarray(out)
    if a.ndim == 4:
        return a[0, 0] if layout == "NCHW" or a.shape[1] <= 4 else a[0, :, :, 0]
    if a.ndim == 3:
        return a[0]
    if a.ndim == 2 and min(a.shape) >= 8:
        return a
    return None


def map_auc(outputs: Sequence[np.ndarray], mask: np.ndarray | None, layout: str) -> float | None:
    """Default :data:`ProbeScore`: separation AUC of the first output map for ``mask`` (mask resized to the
    map, nearest neighbour); None when there is no mask, the output is not a map, or the resized mask has
    no pixels inside or outside."""
    import cv2

    resp = _response_map(outputs[0], layout) if outputs else None
    if mask is None or resp is None or resp.ndim != 2 or min(resp.shape) < 2:
        return None
    m = mask if resp.shape == mask.shape else cv2.resize(mask.astype(np.uint8), (resp.shape[1], resp.shape[0]), interpolation=cv2.INTER_NEAREST) > 0
    if m.all() or not m.any():
        return None
    return separation_auc(resp, m)

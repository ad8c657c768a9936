"""What to do about a drift finding: the one table from cause to action, shared by ``quantkit drift``, the shift
report's recommendation and the fleet check, report and badges.

Five actions (and watch, none): **register set** when the site's images are another kind than the calibration set's
(size and shape far apart: text-line crops against scenes); **recalibrate** when the light changed within what the camera can capture (brightness,
exposure, colour cast); **check the camera** when the camera is at fault (defocus or a blurred lens, sensor noise
without less light, a dark or blown-out camera whose exposure collapsed, exposure that keeps drifting); **retrain**
when FP32 itself fails on the images (content the model never saw); **quantization loss** when nothing in the
images moved but INT8 disagrees with FP32 (recover accuracy in the quantization, not the calibration set); **watch**
when the light changed but INT8 still agrees and the calibration set still covers the images.

:func:`diagnose` reads the medians of the image statistics (:mod:`quantkit.calibset.stats`) before and after, which
of them moved, and what the caller knows of the models; :data:`CAUSES` maps its cause to an :class:`Action`.
The constants below are the thresholds, each with its reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Action:
    """One action. ``name``: stable key (JSON, CSS class); ``badge``: two words for a badge; ``lead``: one sentence
    for a quality lead; ``fix``: what the engineer does."""

    name: str
    badge: str
    lead: str
    fix: str


RECALIBRATE = Action(
    "recalibrate", "recalibrate",
    "The light changed within what the camera can capture; the INT8 model needs calibrating on images of the new light.",
    "register images of the new condition as a set in the model's sets.calibration folder (params.yaml models.<name>.sets), "
    "run 'dvc repro' (the candidate is composed from that folder) and compare deployed and candidate in the shift report")
CHECK_CAMERA = Action(
    "check-camera", "check camera",
    "The camera itself is at fault, not the model: have it fixed rather than recalibrating on its faulty images.",
    "service the camera (focus, lens, exposure and gain settings, lamp), then confirm its next windows match its reference")
RETRAIN = Action(
    "retrain", "retrain",
    "The images show what the model never learned: FP32 itself fails, so neither calibration nor the camera fixes it.",
    "collect and label images of this content, retrain or fine-tune the FP32 model, and rerun the pipeline from intake")
QUANTIZATION_LOSS = Action(
    "quantization-loss", "quantization loss",
    "Nothing in the images changed, yet the INT8 model disagrees with FP32: the quantization itself loses accuracy here.",
    "recover accuracy in the quantization ('quantkit fallback' keeps the sensitive layers in float, or the recovery "
    "options); recalibrating on the same kind of images will not help")
WATCH = Action(
    "watch", "watch",
    "The images moved away from the calibration set, but the INT8 model still agrees with FP32: nothing to fix yet.",
    "keep the camera in the next checks; recalibrate if its agreement with FP32 falls")
NEW_SET = Action(
    "register-set", "register set",
    "These images are not the kind the calibration set holds (their size and shape differ far beyond what a camera or "
    "lighting change does): the model is judged on unlike images, not on a fault.",
    "register sets of these images in the model's own sets folders ('quantkit calibset register', then the model's "
    "sets.calibration / sets.reference in params.yaml), then 'dvc repro'")
NO_ACTION = Action("none", "no action", "Nothing to do: the images and the model's agreement with FP32 are as before.", "none")

ACTIONS: dict[str, Action] = {a.name: a for a in (CHECK_CAMERA, NEW_SET, RETRAIN, RECALIBRATE, QUANTIZATION_LOSS, WATCH, NO_ACTION)}
"""Every action by name, most urgent first (the order cameras are ranked in)."""

CAUSES: dict[str, tuple[str, Action]] = {
    "other_kind": ("these images are not the kind the calibration set holds (their size or shape is far from its images')", NEW_SET),
    "exposure_collapse": ("the exposure collapsed: most of the image is crushed to black or blown out", CHECK_CAMERA),
    "exposure_drift": ("the exposure keeps drifting window after window, as a failing auto-exposure or lamp does", CHECK_CAMERA),
    "defocus": ("the image lost more sharpness than its contrast explains: defocus or a blurred lens", CHECK_CAMERA),
    "sensor_noise": ("sensor noise rose while the light did not fall", CHECK_CAMERA),
    "optics": ("the camera or its optics changed", CHECK_CAMERA),
    "new_content": ("FP32 itself fails on these images: content the model never saw", RETRAIN),
    "lighting": ("the lighting changed", RECALIBRATE),
    "colour_cast": ("the colour of the light changed", RECALIBRATE),
    "clipping": ("activations leave the calibrated ranges", RECALIBRATE),
    "covered": ("the images moved away from the calibration set, but INT8 still agrees with FP32", WATCH),
    "quantization": ("no image statistic moved, yet INT8 disagrees with FP32", QUANTIZATION_LOSS),
    "none": ("no image statistic moved and INT8 still agrees with FP32", NO_ACTION),
}
"""THE table: cause -> (plain words, action). Every finding goes through it; nothing else picks an action."""

LIGHT = frozenset({"brightness_mean", "brightness_p5", "brightness_p50", "brightness_p95", "contrast_rms", "clip_dark",
                   "clip_bright", "saturation_mean"})
"""Statistics the light moves (a darker scene is also flatter, less saturated, with more crushed blacks)."""
BRIGHTNESS = frozenset({"brightness_mean", "brightness_p50"})
COLOUR = frozenset({"cast_rg", "cast_bg"})
OPTICS = frozenset({"sharpness_lapvar", "noise_sigma"})
KIND_AREA_RATIO = 4.0
"""Image area ratio (either way) at or beyond which, with the shape changed too, the site's images are another kind
than the calibration set's: twice the size per side. A camera swap on the same view changes the resolution but keeps
the shape (:data:`KIND_ASPECT_RATIO`), so it stays a camera finding."""
KIND_ASPECT_RATIO = 1.5
"""Aspect ratio (width / height) change, either way, at or beyond which the images are another kind: a camera of the
same view keeps its field of view's shape; a 4:3 camera against 48x192 text lines is a factor of about 3."""

COLLAPSE_SHARE = 0.5
"""Share of the pixels crushed to black (or blown out) in the median image above which the exposure collapsed: the
camera no longer records half the scene, so no calibration can recover it."""
COLLAPSE_BRIGHTNESS = 0.25
"""Brightness ratio (after / before) at or below which the exposure collapsed: a quarter of the gamma-encoded level is
about 5% of the light (2.2 gamma), beyond the range an auto-exposure is set to hold."""
DEFOCUS_RATIO = 0.5
"""Sharpness (variance of the Laplacian) over contrast squared (brightness squared when contrast is not measured), after / before, at or below which the image is blurred:
a change of light scales both the Laplacian and the contrast by the same gain, so their ratio stays put; a defocus
halves it (the demo's 3 px disc divides it by ~4)."""
NOISE_RATIO = 2.0
"""Noise ratio (after / before) at or above which, with the brightness unmoved, the sensor is at fault."""
DRIFT_WINDOWS = 3
DRIFT_CHANGE = 0.15
"""Exposure drift: the brightness median moves the same way in at least :data:`DRIFT_WINDOWS` consecutive windows and
by at least :data:`DRIFT_CHANGE` of the reference overall (a step to a new lighting moves once, then holds)."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """A diagnosis: ``cause`` (a key of :data:`CAUSES`), its plain ``words`` and the ``action``."""

    cause: str
    words: str
    action: Action

    @property
    def sentence(self) -> str:
        """``"check camera: the image lost sharpness ...; service the camera ..."``: badge, cause and fix in one line."""
        return f"{self.action.badge}: {self.words}" + (f"; {self.action.fix}" if self.action is not NO_ACTION else "")

    def to_dict(self) -> dict[str, str]:
        return {"cause": self.cause, "words": self.words, "action": self.action.name}


def _ratio(before: Mapping[str, float], after: Mapping[str, float], name: str) -> float | None:
    b, a = before.get(name), after.get(name)
    if b is None or a is None or not b > 0:
        return None
    return a / b


def finding(cause: str) -> Finding:
    """The :class:`Finding` of ``cause`` through :data:`CAUSES` (KeyError for an unknown cause: a bug)."""
    words, action = CAUSES[cause]
    return Finding(cause, words, action)


def is_drifting(brightness: list[float], reference: float) -> bool:
    """Whether per-window brightness medians (oldest first) drift (:data:`DRIFT_WINDOWS`, :data:`DRIFT_CHANGE`)."""
    best = run = sign = 0
    for a, b in zip(brightness, brightness[1:]):
        step = (b > a) - (b < a)
        run = run + 1 if step != 0 and step == sign else int(step != 0)
        sign = step
        best = max(best, run)
    total = abs(brightness[-1] - brightness[0]) / abs(reference) if brightness and reference else 0.0
    return best + 1 >= DRIFT_WINDOWS and total >= DRIFT_CHANGE


def diagnose(before: Mapping[str, float], after: Mapping[str, float], moved: Collection[str], *, agreement_low: bool = False,
             fp32_fails: bool = False, drifting: bool = False, covered: bool = False, clipping: bool = False) -> Finding:
    """The cause of a change and its action (:data:`CAUSES`), first match in the table's order of urgency.

    Args:
        before, after: medians of the image statistics (:mod:`quantkit.calibset.stats` units) before the change
            (calibration set, or the camera's reference windows) and after it; a statistic may be absent.
        moved: names of the statistics that moved beyond their thresholds (size alone is not a change).
        agreement_low: INT8 disagrees with FP32 here (fell, or below the report's bound).
        fp32_fails: FP32 itself fails against the labels (or finds most of its detections gone).
        drifting: the brightness keeps moving one way window after window (:func:`is_drifting`).
        covered: INT8 agreement with FP32 held (whether or not the images moved away from the calibration set); then a
            lighting or colour change is ``covered`` (watch), never "recalibrate" (:mod:`quantkit.decision`: one rule
            for every caller), and a camera fault is still a camera fault.
        clipping: INT8 activations clip beyond their calibration baseline (:mod:`quantkit.drift.clipping`).
    """
    if _other_kind(before, after):
        return finding("other_kind")
    moved = set(moved) - {"width", "height"}
    bright = _ratio(before, after, "brightness_mean")
    crushed = max(after.get("clip_dark", 0.0), after.get("clip_bright", 0.0))
    if moved & LIGHT and (crushed >= COLLAPSE_SHARE or (bright is not None and bright <= COLLAPSE_BRIGHTNESS)):
        return finding("exposure_collapse")
    if drifting and moved & LIGHT:
        return finding("exposure_drift")
    sharp = _ratio(before, after, "sharpness_lapvar")
    gain = _ratio(before, after, "contrast_rms") or bright or 1.0  # what the light alone does to the Laplacian (its square)
    if "sharpness_lapvar" in moved and sharp is not None and sharp / max(gain, 1e-9) ** 2 <= DEFOCUS_RATIO:
        return finding("defocus")
    noise = _ratio(before, after, "noise_sigma")
    if "noise_sigma" in moved and not moved & BRIGHTNESS and noise is not None and noise >= NOISE_RATIO:
        return finding("sensor_noise")
    if fp32_fails:
        return finding("new_content")
    if moved & (LIGHT | COLOUR):
        return finding("covered" if covered else "lighting" if moved & LIGHT else "colour_cast")
    if moved & OPTICS:
        return finding("optics")
    if clipping:
        return finding("clipping")
    return finding("quantization" if agreement_low else "none")


def _other_kind(before: Mapping[str, float], after: Mapping[str, float]) -> bool:
    """Whether the median image size moved by :data:`KIND_AREA_RATIO` and its shape by :data:`KIND_ASPECT_RATIO`, or its
    shape alone by twice that: another kind of image, not a change of the same camera's view."""
    w, h = _ratio(before, after, "width"), _ratio(before, after, "height")
    if w is None or h is None or not (w > 0 and h > 0):
        return False
    area, aspect = w * h, w / h
    far = lambda r, bound: r >= bound or r <= 1 / bound  # noqa: E731
    return (far(area, KIND_AREA_RATIO) and far(aspect, KIND_ASPECT_RATIO)) or far(aspect, KIND_ASPECT_RATIO ** 2)


def diagnose_result(drift: Any, *, agreement_low: bool = False, fp32_fails: bool = False, covered: bool = False) -> Finding:
    """:func:`diagnose` of a :class:`quantkit.artifacts.DriftResult` (calibration vs site medians, the statistics that
    moved, clipping), for ``quantkit drift`` and the shift report; the other arguments as :func:`diagnose`'s."""
    return diagnose({c.name: c.calibration_median for c in drift.changes}, {c.name: c.site_median for c in drift.changes},
                    drift.moved, agreement_low=agreement_low, fp32_fails=fp32_fails, covered=covered,
                    clipping=bool(drift.clipping and drift.clipping.moved) and not covered)

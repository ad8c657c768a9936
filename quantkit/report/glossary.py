"""The shift report's glossary: one plain sentence per term a quality lead meets in it.

General terms are here; the task's metrics (pixel IoU, box F1, top-1, exact text, ...) are explained by the task
adapter that defines them (each :class:`quantkit.artifacts.evaluation.MetricInfo` carries its ``description``), so this
module names no task.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import ModelReport

TERMS: tuple[tuple[str, str], ...] = (
    ("FP32", "The original model, computing in 32-bit floating point: the reference every quantized model is compared with."),
    ("INT8", "A quantized model that computes in 8-bit integers: smaller and faster than FP32, at the risk of small differences."),
    ("calibration", "Running sample images through the model to choose the 8-bit ranges (scales) of its values; images unlike "
                    "the calibration images can fall outside those ranges."),
    ("calibration set", "The images a model was calibrated on, versioned so that a calibration can be reproduced."),
    ("deployed", "The INT8 model on the line today."),
    ("runtime", "The software that runs the model on the device: onnxruntime (ONNX Runtime) or openvino (Intel's OpenVINO). "
                "Each gets its own INT8 file, checked on it; a model can be faster on one and slower on the other."),
    ("candidate", "A new INT8 model (calibrated on other images, or with some parts kept in float) that could replace the deployed one."),
    ("site set", "Images from one camera and condition (e.g. cam1 at night) on which every model is compared."),
    ("agreement with FP32", "How closely a quantized model's decisions match FP32's on the same images; the status colours "
                            "(green, amber, red) follow from it."),
    ("confidence interval (CI)", "The range the true value lies in with 95% confidence, given how many images were measured: "
                                 "few images give a wide interval."),
    ("paired bootstrap", "Resampling the same images for both models many times to see how much their difference could change "
                         "by the choice of images alone (Efron & Tibshirani 1993)."),
    ("material difference", "A difference whose 95% interval excludes 0, so the choice of images cannot explain it."),
    ("PSI", "Population stability index: how much a score histogram moved between two models or sets (above 0.25 is usually "
            "called significant; Siddiqi 2006)."),
    ("KS", "Kolmogorov-Smirnov statistic: the largest gap between two cumulative score distributions (0 = identical, 1 = disjoint)."),
    ("W1 / Wasserstein", "How far, on average, scores would have to move to turn one distribution into the other, in score units."),
    ("JS", "Jensen-Shannon divergence: a symmetric 0-to-1 distance between two score histograms."),
    ("drift", "A change in the images themselves (brightness, contrast, sharpness, noise) against the calibration images."),
    ("threshold", "The score above which the model reports a detection; the INT8 model compares it as an integer code."),
    ("decisions near the line", "FP32's decisions whose score lies within one INT8 step (one integer code) of the threshold: "
                                "a one-code change flips them, so a rising share warns that INT8 decisions are becoming fragile "
                                "before agreement with FP32 falls; compared with the same share on the images the thresholds were set on."),
    ("verification", "Running the packaged model (bundle) on each target runtime and checking that its decisions match FP32's."),
)


def glossary(models: Iterable[ModelReport]) -> list[tuple[str, str]]:
    """``(term, sentence)`` pairs: the general terms, then every metric the report's models show (label without
    " vs FP32", with the task adapter's description), each term once."""
    out = list(TERMS)
    seen = {t for t, _ in out}
    for m in models:
        for x in m.metrics:
            term = x.label.replace(" vs FP32", "")
            if term in seen or not x.description:
                continue
            seen.add(term)
            against = "compared with FP32's decisions" if x.kind == "agreement" else "compared with the labels"
            out.append((term, f"{x.description[0].upper()}{x.description[1:]} ({against})."))
    return out


__all__ = ["TERMS", "glossary"]

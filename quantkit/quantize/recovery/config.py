"""``RecoveryConfig``: accuracy-recovery techniques applied before the precision fallback searches.

Every technique is off by default and named; the fallback records what each one changed and the metric
of the all-8-bit model before and after it (``fallback.json: recovery``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from ...config import Config
from ...errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RecoveryConfig(Config):
    """params.yaml ``fallback.recovery``.

    Fields:
        fold_affine: fold constant ``Mul`` / ``Add`` after a ``Conv`` into its weights and bias (and before an
            unpadded ``Conv`` into its input channels), and rewrite
            hard-swish written as ``Add(3) -> Clip(0, 6) -> Mul -> Div(6)`` as ``x * HardSigmoid(x)``
            (:mod:`.fold`; the float model's outputs change by float rounding only): fewer quantized
            tensors (fewer rounding steps) and fewer element-wise kernels at run time.
        hardswish_op: what ``fold_affine`` writes a hard-swish chain as: ``HardSigmoid`` (``x * HardSigmoid(x)``,
            any opset) or ``HardSwish`` (one node; the model's ONNX opset is raised to 14 with onnx's version
            converter when lower). Choose by target runtime: OpenVINO's CPU plugin runs ``HardSigmoid`` with a
            reference kernel and a layout reorder on each side (the PP-OCR detector's candidate: 127 ms with
            ``HardSigmoid``, 32 ms with ``HardSwish`` at 1 thread), ONNX Runtime runs both at the same speed; a
            target whose operator list lacks one (``quantkit support --target``) needs the other.
        equalization: cross-layer equalization of ``Conv -> [Relu] -> Conv`` pairs (Nagel et al. 2019,
            "Data-Free Quantization Through Weight Equalization and Bias Correction", sec. 4.1; :mod:`.equalize`);
            the rescaled tensors between the layers get min-max ranges over ``images`` calibration images.
        range_search: per activation, the clipping range among ``range_candidates`` whose 8-bit
            quantization error (MSE over ``images`` calibration images) is smallest, passed to ORT as
            ``TensorQuantOverrides`` ``rmin`` / ``rmax`` (:mod:`.ranges`).
        range_candidates: candidate ranges: ``minmax`` (the calibrated range) and ``p<percentile>`` (the
            two-sided percentile of the activation values over the sample, e.g. ``p99.99``).
        adaround: round each convolution's weights up or down to minimise its output error on ``images``
            calibration images, scales frozen (Nagel et al. 2020, "Up or Down? Adaptive Rounding for Post-Training
            Quantization"; :mod:`.adaround`), ``adaround_iterations`` Adam steps per layer.
        bias_correction: subtract the expected output error that weight quantization adds to each
            convolution, ``(W_q - W) E[x]`` per output channel, from its bias (Nagel et al. 2019, sec. 4.2;
            ``E[x]`` from ``images`` calibration images; :mod:`.bias`).
        images: calibration images the data-driven techniques look at (the first N of the calibration set).
    """

    VERSIONED: ClassVar[bool] = False

    fold_affine: bool = False
    hardswish_op: Literal["HardSigmoid", "HardSwish"] = "HardSigmoid"
    equalization: bool = False
    range_search: bool = False
    range_candidates: tuple[str, ...] = ("minmax", "p99.99", "p99.999")
    adaround: bool = False
    adaround_iterations: int = 300
    bias_correction: bool = False
    images: int = 8

    def validate(self) -> None:
        if self.adaround_iterations < 1:
            raise ConfigError(f"fallback.recovery.adaround_iterations: {self.adaround_iterations} must be >= 1")
        if self.images < 1:
            raise ConfigError(f"fallback.recovery.images: {self.images} must be >= 1")
        for c in self.range_candidates:
            if c == "minmax":
                continue
            try:
                p = float(c[1:]) if c.startswith("p") else float("nan")
            except ValueError:
                p = float("nan")
            if not 50.0 < p <= 100.0:
                raise ConfigError(f"fallback.recovery.range_candidates: {c!r} must be 'minmax' or 'p<percentile>' with 50 < percentile <= 100, e.g. p99.99")
        if self.hardswish_op != "HardSigmoid" and not self.fold_affine:
            raise ConfigError(f"fallback.recovery.hardswish_op: {self.hardswish_op} is what fold_affine writes hard-swish as; "
                              "set fold_affine: true, or drop hardswish_op")
        if self.range_search and not self.range_candidates:
            raise ConfigError("fallback.recovery.range_candidates: give at least one candidate (e.g. [minmax, p99.99]) or set range_search: false")

    @property
    def any(self) -> bool:
        """Whether any technique is on."""
        return self.fold_affine or self.equalization or self.adaround or self.range_search or self.bias_correction

    @property
    def needs_images(self) -> bool:
        """Whether a technique reads calibration images."""
        return self.equalization or self.adaround or self.range_search or self.bias_correction


__all__ = ["RecoveryConfig"]

"""``params.yaml: report``: the status rule and what the shift report shows."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..config import Config
from ..decision import AgreementPolicy
from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ReportConfig(Config):
    """Options of ``quantkit report``.

    Attributes:
        min_agreement: lowest acceptable value of the task's primary agreement metric with FP32 (pooled over
            the site set: pixel IoU for map heads, box F1 for detectors, top-1 agreement for classifiers,
            exact-string agreement for recognizers) for a green status.
        amber_band: below ``min_agreement - amber_band`` is red.
        max_detection_change: largest acceptable relative change of detections per image vs FP32 (green).
        score_psi_alert: PSI of the score histogram vs FP32 that raises an alert (0.25 = "significant" in
            Siddiqi 2006's rule of thumb), when the scores also moved by more than ``score_wasserstein_alert``.
        score_ks_alert: KS statistic of the score CDF vs FP32 that raises an alert (same condition).
        score_wasserstein_alert: W1 between score distributions (score units, 0..1) that raises an alert; PSI and
            KS are marked only above it, since both fire on tiny moves of scores packed near 0 or 1.
        examples_per_site: thumbnails per site set (images where INT8 and FP32 disagree most).
        thumbnail_px: longest thumbnail side in pixels.
        top_tensors: tensors listed in "scales that moved most".
        fp32_min_accuracy: on a labelled site set, FP32's accuracy against the labels (the task's first accuracy
            metric where higher is better: exact text accuracy for recognizers, not their character error rate) below
            this says the model itself fails there: recalibration cannot fix it, and the verdict says so.
        fp32_min_detection_ratio: on an unlabelled site set, FP32's detections per image below this fraction of
            its detections per image under the calibration condition (the site set with the deployed calibration set's
            camera and lighting, else one whose images did not change) say the model itself goes blind there: the
            verdict says so, since agreement with FP32 cannot show it.
        near_line_rise: "decisions near the line" warns when the share of FP32's decisions within one integer step of
            a role's bound primary threshold on a site set exceeds the same share on the reference set the thresholds
            were bound on by at least this much (share units: 0.05 = 5 percentage points). Label-free: decisions that
            close flip when their integer code moves by one, so the share rises before agreement with FP32 falls.
        title: report title.
        candidate_latency: show the latency the fallback measured for the candidate (vs FP32 and deployed; from
            its ``fallback.json``). Machine-dependent: a re-run on another machine rewrites those figures, so it is
            off by default (the report is committed and should be the same bytes for the same models; "Speed on this
            machine" is filled in the browser from ``machine/``).
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True

    min_agreement: float = 0.9
    amber_band: float = 0.1
    max_detection_change: float = 0.2
    score_psi_alert: float = 0.25
    score_ks_alert: float = 0.1
    score_wasserstein_alert: float = 0.02
    examples_per_site: int = 3
    thumbnail_px: int = 240
    top_tensors: int = 10
    fp32_min_accuracy: float = 0.5
    fp32_min_detection_ratio: float = 0.5
    near_line_rise: float = 0.05
    title: str = "Quantization shift report"
    candidate_latency: bool = False

    def validate(self) -> None:
        if not 0.0 < self.min_agreement <= 1.0:
            raise ConfigError(f"report.min_agreement: {self.min_agreement} must be in (0, 1]")
        if not 0.0 <= self.amber_band < self.min_agreement:
            raise ConfigError(f"report.amber_band: {self.amber_band} must be in [0, min_agreement)")
        if self.max_detection_change <= 0:
            raise ConfigError(f"report.max_detection_change: {self.max_detection_change} must be > 0")
        if min(self.score_psi_alert, self.score_ks_alert, self.score_wasserstein_alert) <= 0:
            raise ConfigError("report: score_psi_alert, score_ks_alert and score_wasserstein_alert must be > 0")
        if not 0 <= self.examples_per_site <= 20:
            raise ConfigError(f"report.examples_per_site: {self.examples_per_site} must be 0..20 (keeps the HTML small)")
        if not 32 <= self.thumbnail_px <= 640:
            raise ConfigError(f"report.thumbnail_px: {self.thumbnail_px} must be 32..640")
        if not 0.0 <= self.fp32_min_accuracy <= 1.0:
            raise ConfigError(f"report.fp32_min_accuracy: {self.fp32_min_accuracy} must be in [0, 1]")
        if not 0.0 <= self.fp32_min_detection_ratio <= 1.0:
            raise ConfigError(f"report.fp32_min_detection_ratio: {self.fp32_min_detection_ratio} must be in [0, 1]")
        if not 0.0 < self.near_line_rise <= 1.0:
            raise ConfigError(f"report.near_line_rise: {self.near_line_rise} must be in (0, 1]")
        if self.top_tensors < 1:
            raise ConfigError(f"report.top_tensors: {self.top_tensors} must be >= 1")

    def policy(self, **stated: float) -> AgreementPolicy:
        """This report's :class:`quantkit.decision.AgreementPolicy` (the green line and amber band stated here; ``stated``:
        the other sections' numbers, ``floor`` = ``thresholds.min_agreement``, ``fleet_drop`` = ``fleet.check.agreement_drop``)."""
        return AgreementPolicy(green=self.min_agreement, amber_band=self.amber_band, **stated)

    def status(self, agreement: float, detection_change: float) -> str:
        """``green`` / ``amber`` / ``red`` for a quantized model on one site set (see :meth:`rule`)."""
        if agreement >= self.min_agreement and abs(detection_change) <= self.max_detection_change:
            return "green"
        if agreement < self.min_agreement - self.amber_band or abs(detection_change) > 2 * self.max_detection_change:
            return "red"
        return "amber"

    def rule(self, metric_label: str, item: str) -> str:
        """The status rule in plain words, with the values in force."""
        return (f"Rule: a quantized model passes a site set (green) when it agrees with the unquantized (FP32) model: "
                f"{metric_label} (pooled over the site set's images) >= {self.min_agreement:.2f} and its {item} count per image stays "
                f"within {100 * self.max_detection_change:.0f}% of FP32's; red below {self.min_agreement - self.amber_band:.2f} or beyond "
                f"{200 * self.max_detection_change:.0f}%; amber between. Switch to a candidate only when it is green on every site set "
                "and either green where the deployed model is not, or closer to FP32 on the same images by a paired 95% interval "
                "that excludes 0, significantly worse on none, and not slower than the deployed file on a measured runtime "
                "(else switch on the other runtimes, or keep) (params.yaml: report).")

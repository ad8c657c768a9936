"""Typed configs of the fleet commands: ``params.yaml: fleet`` (``score``, ``check``, ``report``, ``demo``).

Every default lives here; the CLI flags only override them. :class:`FleetConfig` is the whole section
(an unknown key anywhere in it is an error); the ``demo`` part is
:class:`quantkit.demo.fleet.FleetDemoConfig` (kept with the renderer).
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Literal

from ..calibset.stats import STAT_COLUMNS
from ..config import Config
from ..demo.fleet import FleetDemoConfig
from ..errors import ConfigError

FleetMetric = Literal["psi", "wasserstein", "ks"]


@dataclasses.dataclass(frozen=True)
class FleetScoreConfig(Config):
    """Options of ``quantkit fleet score`` (``params.yaml: fleet.score``).

    Attributes:
        window_hours: length of a shard's time window (a shard is one camera x one window); windows
            start at UTC midnight and divide the day (24, 12, 8, 6, 4, 3, 2 or 1).
        model_every: run FP32 + INT8 on every k-th image of a shard (its 1st, (k+1)-th, ...; shard rows
            are sorted by capture time, then URI); 1 = every image. Statistics run on every image.
        clip_fraction: share of images (0..1) whose INT8 activation clipping is measured, chosen by a
            hash of the image URI (the same images whatever the sharding); 0 = never. It costs a full
            FP32 run with every activation as an output (about 5x an inference).
        bins: fixed bins per image statistic between edges frozen from the calibration set.
        kll_k: accuracy parameter ``k`` of the DataSketches KLL quantile sketches (rank error about
            1.65 / k**0.96 at k=200, i.e. 1.65%; Karnin, Lang & Liberty 2016, "Optimal quantile
            approximation in streams", FOCS; DataSketches documentation).
        workers: Dask workers of the embedded ``LocalCluster``; ``None`` = one per CPU core; 0 = no
            cluster, the same tasks run synchronously in this process. Not part of any result.
        ort_threads: ONNX Runtime intra-op threads per worker; 0 = the cores a worker owns (CPU cores
            // workers on the embedded cluster; 1 on an attached cluster, whose workers should be
            started with ``--nthreads 1``). Not part of any result.
        log_every_s: seconds between progress log lines when stderr is not a terminal.
    """

    window_hours: int = 24
    model_every: int = 1
    clip_fraction: float = 0.0
    bins: int = 256
    kll_k: int = 200
    workers: int | None = None
    ort_threads: int = 0
    log_every_s: float = 30.0

    def validate(self) -> None:
        if self.window_hours not in (1, 2, 3, 4, 6, 8, 12, 24):
            raise ConfigError(f"fleet.score.window_hours: {self.window_hours} must divide a day (24, 12, 8, 6, 4, 3, 2 or 1)")
        if self.model_every < 1:
            raise ConfigError(f"fleet.score.model_every: {self.model_every} must be at least 1")
        if not 0.0 <= self.clip_fraction <= 1.0:
            raise ConfigError(f"fleet.score.clip_fraction: {self.clip_fraction} must be in 0..1")
        if not 8 <= self.bins <= 4096:
            raise ConfigError(f"fleet.score.bins: {self.bins} must be in 8..4096")
        if not 8 <= self.kll_k <= 65535:
            raise ConfigError(f"fleet.score.kll_k: {self.kll_k} must be in 8..65535 (DataSketches' range)")
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"fleet.score.workers: {self.workers} must be >= 0 (0 = synchronous, null = one per core)")
        if self.ort_threads < 0:
            raise ConfigError(f"fleet.score.ort_threads: {self.ort_threads} must be >= 0 (0 = the cores a worker owns)")

    def result_dict(self) -> dict[str, object]:
        """The options that change results (part of every shard's key); workers and threads do not."""
        return {k: v for k, v in self.to_dict().items() if k not in ("workers", "ort_threads", "log_every_s")}


@dataclasses.dataclass(frozen=True)
class FleetCheckConfig(Config):
    """Options of ``quantkit fleet check`` (``params.yaml: fleet.check``).

    A camera's first ``reference_windows`` windows are its reference. For each later window and
    statistic, each metric's effect against the reference is compared with a threshold derived for
    this camera, family-wise over its statistics: ``margin`` x the larger of (a) the ``quantile`` of the
    largest effect over the statistics of ``repeats`` windows of the same size drawn from the reference
    histograms (a parametric bootstrap: what sampling alone gives) and (b) every reference window
    against the other reference windows (day-to-day variation, W1 in the whole reference's spread), never
    below the metric's floor (:func:`quantkit.fleet.effects.camera_thresholds`). A statistic moved when at
    least ``min_metrics`` metrics exceed their thresholds, counting only metrics able to flag the change:
    one whose threshold not even a complete separation in the window's direction could exceed (PSI with 6
    images a window) abstains, and ``min_metrics`` is capped at the metrics left (:mod:`quantkit.fleet.camera`).

    Attributes:
        reference_windows: windows per camera that form its reference (>= 2).
        statistics: statistic columns judged; empty = every column of
            :data:`quantkit.calibset.stats.STAT_COLUMNS`.
        metrics, min_metrics: see above (``wasserstein`` is W1 over the reference's spread).
        psi_bins: PSI groups: the fixed bins merged into this many groups of about equal reference mass.
        repeats, quantile, margin, seed: the bootstrap null (seeded per camera and statistic).
        spread_floor: floor of the reference spread relative to ``|median|`` (constant statistics).
        psi_floor, wasserstein_floor, ks_floor: smallest thresholds (PSI 0.25 is Siddiqi's "significant").
        min_images: windows with fewer images (without errors) are shown but not judged.
        min_scored: windows with fewer images scored by both models are not judged on agreement,
            detections or clipping (one image's agreement is too noisy to act on).
        agreement_drop, agreement_windows: alert when the primary agreement with FP32 (pixel IoU for map
            heads) is below the camera's reference by more than ``agreement_drop`` (absolute) in
            ``agreement_windows`` consecutive windows (one image INT8 gets wrong is common; a run is not).
        detections_change, detections_alpha: alert when INT8 detections per image differ from the camera's
            reference by more than ``detections_change`` (a fraction) and a two-sided Poisson test gives
            p < ``detections_alpha``.
        clip_ratio, clip_floor: clipping alerts when a window's rate exceeds
            ``max(reference * clip_ratio, reference + clip_floor)`` (as ``quantkit drift``).
        calibration_margin: a changed camera is "further from the calibration set" when its window's
            PSI against the calibration set exceeds ``calibration_margin`` x its reference's.
        persistence: consecutive alerting windows needed before a camera alerts (1 = the first one).
    """

    reference_windows: int = 5
    statistics: tuple[str, ...] = ()
    metrics: tuple[FleetMetric, ...] = ("psi", "wasserstein", "ks")
    min_metrics: int = 2
    psi_bins: int = 5
    repeats: int = 2000
    quantile: float = 0.999
    margin: float = 1.0
    seed: int = 0
    spread_floor: float = 0.01
    psi_floor: float = 0.25
    wasserstein_floor: float = 0.5
    ks_floor: float = 0.3
    min_images: int = 3
    min_scored: int = 1
    agreement_drop: float = 0.15
    agreement_windows: int = 3
    detections_change: float = 0.5
    detections_alpha: float = 1e-4
    clip_ratio: float = 2.0
    clip_floor: float = 0.001
    calibration_margin: float = 1.5
    persistence: int = 1

    def validate(self) -> None:
        if self.reference_windows < 2:
            raise ConfigError(f"fleet.check.reference_windows: {self.reference_windows} must be at least 2 (thresholds need variation)")
        unknown = [s for s in self.statistics if s not in STAT_COLUMNS]
        if unknown:
            raise ConfigError(f"fleet.check.statistics: {unknown[0]!r} is not a statistic; use names from {', '.join(STAT_COLUMNS)}")
        if not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise ConfigError("fleet.check.metrics: list each of psi, wasserstein, ks at most once, at least one")
        if not 1 <= self.min_metrics <= len(self.metrics):
            raise ConfigError(f"fleet.check.min_metrics: {self.min_metrics} must be between 1 and {len(self.metrics)}")
        if self.psi_bins < 2 or self.repeats < 10 or not 0.5 <= self.quantile <= 1.0 or self.margin < 1.0:
            raise ConfigError("fleet.check: psi_bins >= 2, repeats >= 10, quantile in 0.5..1 and margin >= 1 are required")
        if min(self.psi_floor, self.wasserstein_floor, self.ks_floor, self.spread_floor, self.clip_floor) < 0:
            raise ConfigError("fleet.check: floors must be >= 0")
        if min(self.min_images, self.min_scored, self.persistence, self.agreement_windows) < 1:
            raise ConfigError("fleet.check: min_images, min_scored, agreement_windows and persistence must be at least 1")
        if not 0 < self.agreement_drop < 1 or self.detections_change <= 0 or not 0 < self.detections_alpha < 1:
            raise ConfigError("fleet.check: agreement_drop in (0, 1), detections_change > 0, detections_alpha in (0, 1)")
        if self.clip_ratio < 1.0 or self.calibration_margin < 1.0:
            raise ConfigError("fleet.check: clip_ratio and calibration_margin must be >= 1")

    def judged_statistics(self) -> tuple[str, ...]:
        """The statistics judged (``statistics`` or every known one)."""
        return self.statistics or STAT_COLUMNS


@dataclasses.dataclass(frozen=True)
class FleetReportConfig(Config):
    """Options of ``quantkit fleet report`` (``params.yaml: fleet.report``).

    ``examples``: example images per alerting camera (reference vs since the change);
    ``thumbnail_px``: longest side of embedded thumbnails; ``max_cameras``: alerting cameras given a
    section of their own (the ranked table lists all).
    """

    examples: int = 3
    thumbnail_px: int = 160
    max_cameras: int = 50

    def validate(self) -> None:
        if self.examples < 0 or not 32 <= self.thumbnail_px <= 1024 or self.max_cameras < 0:
            raise ConfigError("fleet.report: examples >= 0, thumbnail_px in 32..1024, max_cameras >= 0")


@dataclasses.dataclass(frozen=True)
class FleetConfig(Config):
    """``params.yaml: fleet``: the model scored, the demo fleet, scoring, check and report options (each optional).

    ``model`` names the one entry of ``params.yaml: models`` the fleet scores, with its intake (``work/models/<model>/intake``),
    deployed INT8 (``work/models/<model>/quantize/deployed``) and thresholds (``work/models/<model>/thresholds/deployed.json``),
    read through its task adapter (``models.<model>.task``).
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True  # no section: the defaults

    model: str = "ppocr_det"
    demo: FleetDemoConfig = dataclasses.field(default_factory=FleetDemoConfig)
    score: FleetScoreConfig = dataclasses.field(default_factory=FleetScoreConfig)
    check: FleetCheckConfig = dataclasses.field(default_factory=FleetCheckConfig)
    report: FleetReportConfig = dataclasses.field(default_factory=FleetReportConfig)


def load_fleet_config(params: str | os.PathLike[str] | None) -> FleetConfig:
    """The ``fleet`` section of a params file, checked whole (defaults when ``params`` is None).

    Raises:
        InputFileError: the params file is missing or not YAML.
        ConfigError: an option is unknown, mistyped or out of range (no section: the defaults).
    """
    from ..config import config_from_params, has_section, load_params

    cfg = config_from_params(FleetConfig, params, "fleet")
    if has_section(params, "fleet") and has_section(params, "models"):
        models = load_params(params, "models")
        if cfg.model not in models:
            raise ConfigError(f"{params}:fleet.model: {cfg.model!r} is not under 'models'; use one of {', '.join(sorted(models))}")
    return cfg


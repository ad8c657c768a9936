"""Camera/lighting change detection: is a site set still like the calibration set?

Two kinds of evidence, both compared against the calibration set the deployed INT8 model was
calibrated on:

1. **Image statistics** (brightness, contrast, colour cast, sharpness, noise, clipping, resolution;
   :mod:`quantkit.calibset.stats`). For each statistic and each effect-size metric (normalized
   Wasserstein-1, PSI, Jensen-Shannon distance; :mod:`quantkit.metrics`) the effect of the site set
   is compared with an **alert threshold derived from the calibration set's own variability**: the
   calibration set is shuffled ``repeats`` times and split into ``chunks`` chunks; each chunk is
   compared with the rest of the set with the same metric. These chunk-vs-rest effects are what
   sampling alone produces when nothing changed (a permutation null, cf. Good 2005, *Permutation,
   Parametric and Bootstrap Tests of Hypotheses*). The threshold is their ``quantile`` (default the
   maximum) times ``margin``. By default the chunk size matches the site set's size
   (``chunks = round(n_calibration / n_site)``, 2..10), so the null has the site's sampling noise.
   A statistic *moved* when at least ``min_metrics`` of its metrics exceed their thresholds.
2. **Activation clipping**: the fraction of FP32 activation values that fall outside the range the
   INT8 model can represent (``[(qmin - zp) * scale, (qmax - zp) * scale]`` from the calibration
   record), on a sample of site images versus a sample of calibration images (the baseline). It
   moved when ``rate > max(baseline * clip_ratio, baseline + clip_floor)``.

``recalibrate`` is true when any statistic or the clipping rate moved. It is a recommendation: the
person points ``params.yaml`` at a new calibration set and runs ``dvc repro``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import metrics
from ._io import atomic_write_json, read_json
from .calibset.stats import STAT_COLUMNS
from .config import Config
from .errors import CalibrationSetError, ConfigError, InputFileError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
Metric = Literal["wasserstein", "psi", "js"]

DEFAULT_STATISTICS: tuple[str, ...] = STAT_COLUMNS
"""Statistics compared by default: every column of the set's ``stats.csv``."""

PLAIN_NAMES = {
    "width": "image width",
    "height": "image height",
    "brightness_mean": "brightness",
    "brightness_p5": "shadow brightness (p5)",
    "brightness_p50": "median brightness",
    "brightness_p95": "highlight brightness (p95)",
    "contrast_rms": "contrast",
    "cast_rg": "red/green colour balance",
    "cast_bg": "blue/green colour balance",
    "saturation_mean": "colour saturation",
    "sharpness_lapvar": "sharpness",
    "noise_sigma": "noise",
    "clip_dark": "crushed-black pixels",
    "clip_bright": "blown-out pixels",
}


@dataclasses.dataclass(frozen=True)
class DriftConfig(Config):
    """Options of ``quantkit drift`` (``params.yaml: drift``).

    Attributes:
        statistics: per-image statistic columns to compare; empty = every known column present.
        metrics: effect sizes per statistic (``wasserstein`` is W1 / calibration spread).
        spread: calibration spread that normalizes W1: ``iqr`` (IQR/1.349, robust) or ``std``.
        spread_floor: floor on that spread relative to ``|median|`` (a constant statistic such as
            width still gets a finite effect).
        bins: quantile bins of the calibration sample for PSI and JS (5 keeps >= 5 expected images
            per bin for a 32-image site set, the usual chi-square rule).
        chunks: chunks per shuffle of the calibration set; 0 = auto (chunk size ~ site size).
        repeats: shuffles of the calibration set (the null has ``chunks * repeats`` effects).
        quantile: quantile of the null effects used as threshold (1.0 = max).
        margin: factor on that quantile.
        min_metrics: how many metrics must exceed their thresholds for a statistic to count as moved.
        seed: seed of the shuffles (same inputs, same result).
        clipping: measure activation clipping (needs ``--quantized`` and ``--fp32``).
        clip_images: images sampled (evenly) from each set for clipping, 0 = all.
        clip_ratio, clip_floor: clipping moved when ``rate > max(baseline*ratio, baseline+floor)``.
    """

    statistics: tuple[str, ...] = ()
    metrics: tuple[Metric, ...] = ("wasserstein", "psi", "js")
    spread: Literal["iqr", "std"] = "iqr"
    spread_floor: float = 0.01
    bins: int = 5
    chunks: int = 0
    repeats: int = 25
    quantile: float = 1.0
    margin: float = 1.5
    min_metrics: int = 2
    seed: int = 0
    clipping: bool = True
    clip_images: int = 8
    clip_ratio: float = 2.0
    clip_floor: float = 0.001

    def validate(self) -> None:
        if not self.metrics:
            raise ConfigError("drift.metrics: list at least one of wasserstein, psi, js")
        if len(set(self.metrics)) != len(self.metrics):
            raise ConfigError(f"drift.metrics: {list(self.metrics)} repeats a metric; list each once")
        if not 1 <= self.min_metrics <= len(self.metrics):
            raise ConfigError(f"drift.min_metrics: {self.min_metrics} must be between 1 and the number of metrics ({len(self.metrics)})")
        if self.bins < 2:
            raise ConfigError(f"drift.bins: {self.bins} must be at least 2")
        if self.chunks == 1 or self.chunks < 0:
            raise ConfigError(f"drift.chunks: {self.chunks} must be 0 (auto) or at least 2")
        if self.repeats < 1:
            raise ConfigError(f"drift.repeats: {self.repeats} must be at least 1")
        if not 0.5 <= self.quantile <= 1.0:
            raise ConfigError(f"drift.quantile: {self.quantile} must be in 0.5..1.0")
        if self.margin < 1.0:
            raise ConfigError(f"drift.margin: {self.margin} must be at least 1.0")
        if self.spread_floor < 0 or self.clip_floor < 0 or self.clip_ratio < 1.0 or self.clip_images < 0:
            raise ConfigError("drift: spread_floor and clip_floor must be >= 0, clip_ratio >= 1, clip_images >= 0")


# ------------------------------------------------------------------------------------------ records


@dataclasses.dataclass(frozen=True)
class StatisticEffect:
    """One statistic under one metric: site effect vs the calibration-derived threshold."""

    name: str
    metric: str
    effect: float
    threshold: float
    moved: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class StatisticChange:
    """How one statistic changed: medians of calibration and site set, relative change, verdict.

    ``separation`` is the Jensen-Shannon distance (base 2, 0..1) between the calibration and site
    values on the calibration quantile bins: bounded and unitless, so it ranks statistics of
    different units (reasons list the most separated first).
    """

    name: str
    calibration_median: float
    site_median: float
    relative_change: float
    metrics_moved: int
    moved: bool
    separation: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def describable(self) -> bool:
        """Whether the medians describe the change: false when the calibration median is 0 (no
        relative change is defined; "changed from 0 to 0" says nothing)."""
        return self.calibration_median != 0 and math.isfinite(self.calibration_median) and math.isfinite(self.site_median)

    @property
    def phrase(self) -> str:
        """Plain words, e.g. ``"brightness fell 68%"`` or ``"noise rose 2.1x"``."""
        label = PLAIN_NAMES.get(self.name, self.name)
        c, s = self.calibration_median, self.site_median
        if c == 0:
            return f"{label} changed from 0 to {s:.3g}"
        ratio = s / c
        if ratio >= 2.0:
            return f"{label} rose {ratio:.1f}x"
        if ratio <= 0.0:
            return f"{label} changed from {c:.3g} to {s:.3g}"
        pct = 100.0 * abs(ratio - 1.0)
        return f"{label} {'rose' if ratio > 1 else 'fell'} {pct:.0f}%"


@dataclasses.dataclass(frozen=True)
class Clipping:
    """Activation clipping of the INT8 model: fraction of activation values outside the INT8 range.

    ``rate`` (site) and ``baseline`` (calibration) are means over quantized activation tensors of the
    per-tensor clipped fraction (0..1); ``worst`` lists ``(tensor, site rate)`` of the top tensors.
    """

    rate: float
    baseline: float
    threshold: float
    moved: bool
    images: int
    baseline_images: int
    tensors: int
    worst: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["worst"] = [{"tensor": n, "rate": r} for n, r in self.worst]
        return d


@dataclasses.dataclass(frozen=True)
class DriftResult:
    """Outcome of a drift check (``work/drift/<site>.json``).

    ``statistics`` has one entry per (statistic, metric); ``changes`` one per statistic;
    ``clipping`` is ``None`` when not measured; ``reasons`` are plain sentences for a quality lead.
    """

    site_set: dict[str, Any]
    calibration_set: dict[str, Any]
    statistics: tuple[StatisticEffect, ...]
    changes: tuple[StatisticChange, ...]
    clipping: Clipping | None
    recalibrate: bool
    reasons: tuple[str, ...]
    config: dict[str, Any]

    @property
    def moved(self) -> list[str]:
        """Names of the statistics that moved."""
        return [c.name for c in self.changes if c.moved]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "site_set": dict(self.site_set),
            "calibration_set": dict(self.calibration_set),
            "statistics": [s.to_dict() for s in self.statistics],
            "changes": [c.to_dict() for c in self.changes],
            "clipping": self.clipping.to_dict() if self.clipping else None,
            "recalibrate": self.recalibrate,
            "reasons": list(self.reasons),
            "config": dict(self.config),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DriftResult:
        """Inverse of :meth:`to_dict` (raises KeyError/TypeError on a malformed dict)."""
        clip = d.get("clipping")
        return cls(
            site_set=d["site_set"],
            calibration_set=d["calibration_set"],
            statistics=tuple(StatisticEffect(**s) for s in d["statistics"]),
            changes=tuple(StatisticChange(**c) for c in d.get("changes", [])),
            clipping=None if clip is None else Clipping(**{**clip, "worst": tuple((w["tensor"], w["rate"]) for w in clip.get("worst", []))}),
            recalibrate=bool(d["recalibrate"]),
            reasons=tuple(d["reasons"]),
            config=d.get("config", {}),
        )

    def save(self, path: str | Path) -> Path:
        """Write the result as canonical JSON, atomically."""
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> DriftResult:
        """Read a drift JSON. Raises InputFileError naming the file when missing or malformed."""
        d = read_json(path, "drift result")
        try:
            return cls.from_dict(d)
        except (KeyError, TypeError) as e:
            raise InputFileError(f"{path}: not a drift result (bad or missing field {e}); rerun 'quantkit drift'") from None

    def __repr__(self) -> str:
        return f"DriftResult(site={self.site_set.get('name')!r}, recalibrate={self.recalibrate}, moved={self.moved})"


# ------------------------------------------------------------------------------------------ set IO


@dataclasses.dataclass(frozen=True)
class _Set:
    path: Path
    info: dict[str, Any]
    stats: Any  # pandas DataFrame
    images: tuple[Path, ...]


def _load_set(path: str | Path, role: str) -> _Set:
    """Read a set folder: manifest.json (optional fields), stats.csv or statistics computed now."""
    p = Path(path)
    if not p.is_dir():
        raise CalibrationSetError(f"{p}: {role} set folder not found; check the path or run 'dvc repro demo_set'")
    manifest_path = p / "manifest.json"
    manifest = read_json(manifest_path, f"{role} set manifest") if manifest_path.exists() else {}
    if manifest_path.exists() and not isinstance(manifest, dict):
        raise CalibrationSetError(f"{manifest_path}: manifest must be a JSON object; re-register the set")
    entries = manifest.get("images") or []
    if entries:
        images = tuple(p / e["file"] for e in entries if isinstance(e, dict) and "file" in e)
        _check_images(images, manifest_path, role)
    else:
        from .imageio import IMAGE_SUFFIXES

        images = tuple(sorted(f for f in (p / "images").glob("*") if f.suffix.lower() in IMAGE_SUFFIXES)) if (p / "images").is_dir() else ()
    stats_path = p / "stats.csv"
    if stats_path.exists():
        stats = _read_stats(stats_path)
    else:
        if not images:
            raise CalibrationSetError(f"{p}: {role} set has no images and no stats.csv; add images under {p / 'images'}")
        from .calibset.stats import compute_stats

        stats = compute_stats(list(images), root=p, desc=f"stats {p.name}")
    if len(stats) == 0:
        raise CalibrationSetError(f"{p}: {role} set is empty (0 rows in statistics); add images and re-register it")
    info = {
        "name": manifest.get("name") or p.name,
        "path": p.as_posix(),
        "set_id": manifest.get("set_id", ""),
        "camera": manifest.get("camera", ""),
        "lighting": manifest.get("lighting", ""),
        "count": len(stats),
    }
    return _Set(p, info, stats, images)


def _check_images(images: Sequence[Path], listed_in: Path, role: str) -> None:
    """Refuse a set whose listed images are gone: statistics read from a stale stats.csv would
    describe images that no longer exist.

    Raises:
        CalibrationSetError: naming the first missing file and how many are missing.
    """
    missing = [f for f in images if not f.is_file()]
    if missing:
        raise CalibrationSetError(
            f"{missing[0]}: image listed in {listed_in} is missing ({len(missing)} of {len(images)} missing in the {role} set); "
            "restore the images (dvc checkout / dvc pull) or re-register the set"
        )


def _read_stats(path: Path) -> Any:
    from .calibset.stats import read_stats_csv

    return read_stats_csv(path)


# ------------------------------------------------------------------------------------- statistics


def _effect(metric: str, ref: np.ndarray, cur: np.ndarray, cfg: DriftConfig) -> float:
    if metric == "wasserstein":
        floor = cfg.spread_floor * abs(float(np.median(ref)))
        return metrics.normalized_wasserstein(ref, cur, scale=metrics.spread(ref, cfg.spread, floor))
    if metric == "psi":
        return metrics.psi(ref, cur, bins=cfg.bins)
    return metrics.jensen_shannon(ref, cur, bins=cfg.bins)


def null_effects(values: np.ndarray, n_site: int, cfg: DriftConfig, metric: str) -> np.ndarray:
    """Chunk-vs-rest effects of one calibration statistic (the "nothing changed" distribution).

    Args:
        values: ``(n,)`` float64 calibration values of the statistic.
        n_site: site set size (sets the automatic chunk count).

    Returns:
        ``(chunks * repeats,)`` float64 effects.

    Raises:
        CalibrationSetError: the calibration set is too small to split.
    """
    n = values.size
    k = cfg.chunks or int(min(10, max(2, round(n / max(n_site, 1)))))
    if n < 2 * k or n < 4:
        raise CalibrationSetError(f"calibration set has {n} images, too few to split into {k} chunks; add images or lower drift.chunks")
    rng = np.random.default_rng(cfg.seed)
    out = []
    for _ in range(cfg.repeats):
        perm = rng.permutation(n)
        for chunk in np.array_split(perm, k):
            mask = np.zeros(n, dtype=bool)
            mask[chunk] = True
            out.append(_effect(metric, values[~mask], values[mask], cfg))
    return np.asarray(out, dtype=np.float64)


def compare_statistics(calibration: Any, site: Any, cfg: DriftConfig) -> tuple[list[StatisticEffect], list[StatisticChange]]:
    """Compare per-image statistic frames (calibration vs site) column by column.

    Returns one :class:`StatisticEffect` per (statistic, metric) and one :class:`StatisticChange`
    per statistic. Raises ConfigError when a requested statistic is absent from either frame.
    """
    names = list(cfg.statistics) or [c for c in DEFAULT_STATISTICS if c in calibration.columns and c in site.columns]
    for name in names:
        for frame, which in ((calibration, "calibration"), (site, "site")):
            if name not in frame.columns:
                raise ConfigError(f"drift.statistics: {name!r} is not a column of the {which} set's statistics; remove it or recompute stats.csv")
    effects: list[StatisticEffect] = []
    changes: list[StatisticChange] = []
    from .progress import progress

    for name in progress(names, total=len(names), desc="drift", unit="stat"):
        ref = calibration[name].to_numpy(dtype=np.float64)
        cur = site[name].to_numpy(dtype=np.float64)
        ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
        if ref.size == 0 or cur.size == 0:
            log.warning("statistic %s has no finite values; skipped", name)
            continue
        n_moved = 0
        for metric in cfg.metrics:
            effect = _effect(metric, ref, cur, cfg)
            null = null_effects(ref, cur.size, cfg, metric)
            threshold = float(np.quantile(null, cfg.quantile)) * cfg.margin
            moved = bool(effect > threshold)
            n_moved += moved
            effects.append(StatisticEffect(name, metric, _finite(effect), _finite(threshold), moved))
        cm, sm = float(np.median(ref)), float(np.median(cur))
        rel = (sm - cm) / abs(cm) if cm != 0 else (0.0 if sm == 0 else math.copysign(1e9, sm))
        changes.append(StatisticChange(name, cm, sm, _finite(rel), n_moved, n_moved >= cfg.min_metrics, metrics.jensen_shannon(ref, cur, bins=cfg.bins)))
    return effects, changes


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else (1e9 if x > 0 else -1e9)


# --------------------------------------------------------------------------------------- clipping


def _sample(paths: Sequence[Path], k: int) -> list[Path]:
    if k <= 0 or len(paths) <= k:
        return list(paths)
    idx = np.unique(np.linspace(0, len(paths) - 1, k).round().astype(int))
    return [paths[i] for i in idx]



def clipping_rates(fp32_dir: str | Path, record_dir: str | Path, images: Sequence[Path]) -> dict[str, float]:
    """Per-tensor fraction of FP32 activation values outside the INT8 range, over ``images``.

    Preprocesses each image with the FP32 model's export note (``fp32_dir/export_note.json`` or the
    note embedded in the model) and counts with :func:`quantkit.quantize.compare.clipping_rates`
    (every activation marked as an output on an ordinary FP32 run, range ``[(qmin - zp) * s,
    (qmax - zp) * s]`` per channel from the record); one image at a time, only counts are kept.

    Returns:
        ``{tensor name: clipped fraction (0..1)}`` for the record's activations present in the FP32 graph.

    Raises:
        ModelError / InputFileError: model, note or record missing, unusable or not matching.
    """
    from .artifacts.record import CalibrationRecord
    from .imageio import load_image
    from .quantize.compare import clipping_rates as clipping_table
    from .quantize.engine import load_intake

    _, model, note = load_intake(fp32_dir)
    record = CalibrationRecord.load(record_dir)
    batches = (note.preprocessing.apply(load_image(p))[0] for p in images)
    table = clipping_table(model, record, batches, total=len(images))
    return {str(t): float(r) for t, r in zip(table["tensor"], table["clipping_rate"])}


def _clipping(site: _Set, calib: _Set, fp32: Path, quantized: Path, cfg: DriftConfig) -> Clipping:
    site_imgs = _sample(site.images, cfg.clip_images)
    cal_imgs = _sample(calib.images, cfg.clip_images)
    if not site_imgs or not cal_imgs:
        empty = site.path if not site_imgs else calib.path
        raise CalibrationSetError(f"{empty}: no image files for the clipping check; add images or set drift.clipping: false")
    site_rates = clipping_rates(fp32, quantized, site_imgs)
    base_rates = clipping_rates(fp32, quantized, cal_imgs)
    rate = float(np.mean(list(site_rates.values())))
    baseline = float(np.mean(list(base_rates.values())))
    threshold = max(baseline * cfg.clip_ratio, baseline + cfg.clip_floor)
    worst = tuple(sorted(site_rates.items(), key=lambda kv: (-kv[1], kv[0]))[:5])
    return Clipping(rate, baseline, threshold, rate > threshold, len(site_imgs), len(cal_imgs), len(site_rates), worst)


# ------------------------------------------------------------------------------------------- verb


def describe_changes(changes: Sequence[StatisticChange]) -> list[str]:
    """Plain phrases (:attr:`StatisticChange.phrase`) of the statistics that moved, most separated
    first. A moved statistic whose medians cannot describe it (see :attr:`~StatisticChange.describable`)
    is skipped ("changed from 0 to 0" says nothing); only when no other statistic moved is it named,
    without numbers ("blown-out pixels shifted")."""
    moved = sorted((c for c in changes if c.moved), key=lambda c: (-c.separation, c.name))
    phrases = [c.phrase for c in moved if c.describable]
    return phrases or [f"{PLAIN_NAMES.get(c.name, c.name)} shifted" for c in moved]


def _reasons(changes: Sequence[StatisticChange], clipping: Clipping | None, calib_name: str) -> list[str]:
    phrases = describe_changes(changes)
    reasons = []
    if phrases:
        reasons.append(f"{phrases[0]} vs calibration ({calib_name})" + "".join(f"; {p}" for p in phrases[1:4]))
        if len(phrases) > 4:
            reasons[-1] += f"; {len(phrases) - 4} more statistics moved"
    if clipping is not None and clipping.moved:
        reasons.append(
            f"INT8 activations clip {100 * clipping.rate:.2f}% of values vs {100 * clipping.baseline:.2f}% on calibration images "
            f"(threshold {100 * clipping.threshold:.2f}%)"
        )
    if not reasons:
        reasons.append(f"no image statistic moved beyond calibration ({calib_name}) variability" + ("; clipping within baseline" if clipping else ""))
    return reasons


def check_drift(
    site_set: str | Path,
    calibration_set: str | Path,
    config: DriftConfig | None = None,
    *,
    quantized: str | Path | None = None,
    fp32: str | Path | None = None,
) -> DriftResult:
    """Compare a site set with a calibration set and recommend recalibration or not.

    Args:
        site_set, calibration_set: set folders (``manifest.json`` + ``stats.csv`` or ``images/``).
        config: options (defaults: :class:`DriftConfig`).
        quantized: folder with the deployed ``record.json`` (clipping check).
        fp32: folder with the FP32 ``model.onnx`` (+ ``export_note.json``) (clipping check).

    Raises:
        CalibrationSetError: a set is missing, empty or too small to split.
        ConfigError: bad options, or clipping enabled without ``quantized``/``fp32``.
        ModelError / InputFileError: model or record unusable.
    """
    cfg = config or DriftConfig()
    if cfg.clipping and (quantized is None or fp32 is None):
        raise ConfigError("drift.clipping is true but --quantized or --fp32 is missing; pass both or set drift.clipping: false")
    site = _load_set(site_set, "site")
    calib = _load_set(calibration_set, "calibration")
    effects, changes = compare_statistics(calib.stats, site.stats, cfg)
    clip = _clipping(site, calib, Path(fp32), Path(quantized), cfg) if cfg.clipping else None  # type: ignore[arg-type]
    recalibrate = any(c.moved for c in changes) or bool(clip and clip.moved)
    reasons = _reasons(changes, clip, calib.info["name"])
    log.info("drift %s vs %s: recalibrate=%s", site.info["name"], calib.info["name"], recalibrate)
    return DriftResult(site.info, calib.info, tuple(effects), tuple(changes), clip, recalibrate, tuple(reasons), cfg.to_dict())

"""The ``drift`` stage: is a site set still like the calibration set the deployed INT8 model was calibrated on?

Two kinds of evidence: image statistics against the calibration set's own variability
(:mod:`quantkit.drift.statistics`) and activation clipping of the INT8 model (:mod:`quantkit.drift.clipping`).
``changed`` is true when a statistic other than the image size, or the clipping rate, moved. It is evidence, not
an order: the report combines it with the model's agreement with FP32 to say whether to recalibrate, and a
person points ``params.yaml`` at a new calibration set and runs ``dvc repro``.

Both sets are read by the one image-set loader (:meth:`quantkit.calibset.CalibrationSet.load`) with every image
re-hashed, so a cached ``stats.csv`` is never trusted for images changed after registration.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..artifacts.drift import SIZE_STATISTICS, Clipping, DriftResult, StatisticChange
from ..artifacts.record import CalibrationRecord, SetRef
from ..calibset import CalibrationSet
from ..errors import CalibrationSetError, ConfigError
from .clipping import measure_clipping
from .config import DriftConfig
from .statistics import compare_statistics, describe_changes, small_calibration

log = logging.getLogger(__name__)


def _load(path: str | Path, role: str) -> tuple[Any, Any]:
    if not Path(path).is_dir():
        raise CalibrationSetError(f"{path}: {role} set folder not found; check the path or run 'dvc repro demo_set'")
    cset = CalibrationSet.load(path, verify=True)
    stats = cset.stats()
    if len(stats) != cset.count:
        raise CalibrationSetError(f"{Path(path) / 'stats.csv'}: {len(stats)} rows for {cset.count} images; re-register the set")
    return cset, stats


def _ref(cset: Any) -> SetRef:
    return SetRef(path=Path(cset.root).as_posix(), set_id=cset.set_id, name=cset.name, camera=cset.camera,
                  lighting=cset.lighting, count=cset.count)


def reasons(changes: Sequence[StatisticChange], clipping: Clipping | None, calib_name: str) -> list[str]:
    """Plain sentences: what moved (most separated first), clipping, or that nothing moved."""
    phrases = describe_changes(changes)
    out = []
    if phrases:
        out.append(f"{phrases[0]} vs calibration ({calib_name})" + "".join(f"; {p}" for p in phrases[1:4]))
        if len(phrases) > 4:
            out[-1] += f"; {len(phrases) - 4} more statistics moved"
    if clipping is not None and clipping.moved:
        out.append(f"INT8 activations clip {100 * clipping.rate:.2f}% of values vs {100 * clipping.baseline:.2f}% on calibration images "
                   f"(threshold {100 * clipping.threshold:.2f}%)")
    sizes = [c.label for c in changes if c.moved and c.name in SIZE_STATISTICS]
    if sizes and not any(c.moved and c.name not in SIZE_STATISTICS for c in changes):
        out.append(f"only the image size changed ({', '.join(sizes)}); the model input is resized, so this alone is no reason to recalibrate")
    if not out:
        out.append(f"no image statistic moved beyond calibration ({calib_name}) variability" + ("; clipping within baseline" if clipping else ""))
    return out


def is_changed(changes: Sequence[StatisticChange], clipping: Clipping | None) -> bool:
    """A statistic other than the image size moved, or the clipping rate moved (size alone is not a change:
    the model input is resized anyway; a real camera change also moves sharpness, noise or colour)."""
    return any(c.moved and c.name not in SIZE_STATISTICS for c in changes) or bool(clipping and clipping.moved)


def check_drift(site_set: str | Path, calibration_set: str | Path, config: DriftConfig | None = None, *,
                quantized: str | Path | None = None, fp32: str | Path | None = None) -> DriftResult:
    """Compare a site set with a calibration set.

    Args:
        site_set, calibration_set: registered set folders (``images/`` + ``manifest.json`` + ``stats.csv``).
        config: options (defaults: :class:`DriftConfig`).
        quantized: folder with the deployed ``record.json`` (clipping check).
        fp32: the intake folder with the FP32 ``model.onnx`` (+ ``export_note.json``) (clipping check).

    Raises:
        CalibrationSetError: a set is missing, unregistered, changed since registration, or too small to split.
            A set that can be split but is small for its thresholds is not an error: the result says so
            (``small_calibration``, ``warnings``) and a warning is logged.
        ConfigError: bad options, or clipping enabled without ``quantized``/``fp32``.
        ModelError / InputFileError: model or record unusable.
        BindingMismatchError: ``quantized`` was calibrated on another set than ``calibration_set``.
    """
    cfg = config or DriftConfig()
    if cfg.clipping and (quantized is None or fp32 is None):
        raise ConfigError("drift.clipping is true but --quantized or --fp32 is missing; pass both or set drift.clipping: false")
    site, site_stats = _load(site_set, "site")
    calib, calib_stats = _load(calibration_set, "calibration")
    record = None
    if quantized is not None:
        record = CalibrationRecord.load(quantized)
        record.check_calibrated_on(calib, CalibrationRecord.path_in(quantized))
    effects, changes = compare_statistics(calib_stats, site_stats, cfg)
    warning = small_calibration(len(calib_stats), len(site_stats), cfg, calib.name)
    if warning:
        log.warning("drift %s: %s", site.name, warning)
    clip = measure_clipping(site.paths(), calib.paths(), Path(fp32), Path(quantized), cfg) if cfg.clipping else None  # type: ignore[arg-type]
    changed = is_changed(changes, clip)
    record_fp = record.fingerprint if record is not None else ""
    log.info("drift %s vs %s: changed=%s", site.name, calib.name, changed)
    return DriftResult(site_set=_ref(site), calibration_set=_ref(calib), statistics=tuple(effects), changes=tuple(changes),
                       clipping=clip, changed=changed, reasons=tuple(reasons(changes, clip, calib.name)), config=cfg.to_dict(),
                       record_fingerprint=record_fp, small_calibration=bool(warning), warnings=(warning,) if warning else ())

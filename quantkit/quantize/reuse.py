"""Reuse a record's calibrated ranges, no images needed: :func:`replay` rebuilds the same model from its record
(``quantkit record replay``), :func:`quantize_with_ranges` quantizes with another record's ranges: one calibration,
several placements or weight settings (``quantkit quantize --ranges-from RECORD``), e.g. the ``ort`` and
``openvino`` placements of :mod:`quantkit.quantize.placement` from one set of ranges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._io import atomic_output_dir, sha256_file
from ..artifacts.record import CalibrationRecord
from ..errors import ConfigError, ModelError
from ..note import ExportNote
from . import outputs
from .config import StaticQuantConfig
from .engine import RECORD_FILE, _static, load_intake

#: Config fields that decide a calibration's ranges: a config that differs from a record's in one of them cannot use its ranges.
CALIBRATION_FIELDS = ("method", "calibration_symmetric", "percentile", "num_bins", "num_quantized_bins", "distribution_scenario",
                      "moving_average", "averaging_constant", "max_images", "calibration_graph")


def static_record_and_intake(record: CalibrationRecord | str | Path, intake: str | Path,
                             use: str) -> tuple[CalibrationRecord, Path, Any, ExportNote]:
    """``(record, model path, model, note)``: a static ``record`` (loaded when a path) and the intake model it was
    quantized from, for reusing its ranges (``use``: what is done with them, for the messages).

    Raises:
        ConfigError: a dynamic record (no ranges). ModelError: the intake model's digest differs from the record's.
    """
    rec = record if isinstance(record, CalibrationRecord) else CalibrationRecord.load(record)
    if rec.mode != "static":
        raise ConfigError(f"record {rec.fingerprint[:12]}: only a static record's ranges can be {use} (this one is {rec.mode})")
    if rec.config.get("engine", "ort") != "ort":
        raise ConfigError(f"record {rec.fingerprint[:12]}: written by engine {rec.config['engine']}, which keeps no calibrated ranges, so they "
                          f"cannot be {use}; quantize again with that engine")
    model_path, model, note = load_intake(intake)
    digest = sha256_file(model_path)
    if digest != rec.model_digest:
        raise ModelError(f"{model_path}: digest {digest[:12]} differs from the record's model_digest {rec.model_digest[:12]}; "
                         "use the intake of the float model the record was quantized from")
    return rec, model_path, model, note


def replay(record: CalibrationRecord | str | Path, intake: str | Path, *, out: str | Path) -> CalibrationRecord:
    """Rebuild the quantized model from a record alone (no calibration images): the record's config, its
    calibrated ranges, and every activation's scale/zero point as ``TensorQuantOverrides``.

    Returns the new record; its ``quantized_model_digest`` equals the original's when nothing else
    changed (same float model, same ORT version).

    Raises:
        ModelError: the intake model's digest differs from the record's ``model_digest``.
        ConfigError: the record is a dynamic one (nothing to replay).
    """
    rec, model_path, model, note = static_record_and_intake(record, intake, "replayed")
    cfg_dict = {k: v for k, v in rec.config.items()}
    config = StaticQuantConfig.from_dict(cfg_dict)
    out = Path(out)
    record_file = None if isinstance(record, CalibrationRecord) else record
    with atomic_output_dir(out, command="record replay", inputs=[intake, model_path, record_file]) as tmp:
        new = _static(model, model_path, note, config, None, tmp, None, rec)
        new.save(tmp / RECORD_FILE)
    return new


def quantize_with_ranges(record: CalibrationRecord | str | Path, intake: str | Path, config: StaticQuantConfig, *, out: str | Path,
                         levels_floor: float = outputs.DEFAULT_LEVELS_FLOOR) -> CalibrationRecord:
    """:func:`quantkit.quantize.quantize` with ``record``'s calibrated ranges instead of a calibration (no images).

    Args:
        record: a static record (or its folder / ``record.json``) of the same float model.
        config: must calibrate as the record's did (:data:`CALIBRATION_FIELDS`); the rest (placement, per-channel,
            weight symmetry ...) may differ.

    Returns:
        The new record, written to ``out`` with the model; ``calibration["ranges_from"]`` names ``record``'s fingerprint.

    Raises:
        ConfigError: a dynamic record, or a calibration field that differs. ModelError: another float model.
    """
    if config.engine != "ort":
        raise ConfigError(f"engine: {config.engine} estimates its ranges itself; --ranges-from reuses ORT's calibration: set engine: ort")
    rec, model_path, model, note = static_record_and_intake(record, intake, "reused for another placement")
    theirs = StaticQuantConfig.from_dict(rec.config)
    for f in CALIBRATION_FIELDS:
        if getattr(theirs, f) != getattr(config, f):
            raise ConfigError(f"{f}: {getattr(config, f)!r} differs from the record's {getattr(theirs, f)!r}, so its ranges are not "
                              f"this config's; set {f}: {getattr(theirs, f)!r} or calibrate anew")
    inputs = [intake, model_path, None if isinstance(record, CalibrationRecord) else record]
    with atomic_output_dir(Path(out), command="quantize", inputs=inputs) as tmp:
        new = _static(model, model_path, note, config, None, tmp, None, rec, replay_scales=False, levels_floor=levels_floor)
        new.save(tmp / RECORD_FILE)
    return new

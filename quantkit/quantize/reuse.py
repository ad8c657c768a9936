"""Quantize with another record's calibrated ranges: one calibration, several placements or weight settings
(``quantkit quantize --ranges-from RECORD``), e.g. the ``ort`` and ``openvino`` placements of
:mod:`quantkit.quantize.placement` from one set of ranges.
"""

from __future__ import annotations

from pathlib import Path

from .._io import atomic_output_dir
from ..artifacts.record import CalibrationRecord
from ..errors import ConfigError
from . import outputs
from .config import StaticQuantConfig
from .engine import RECORD_FILE, _static, static_record_and_intake

#: Config fields that decide a calibration's ranges: a config that differs from a record's in one of them cannot use its ranges.
CALIBRATION_FIELDS = ("method", "calibration_symmetric", "percentile", "num_bins", "num_quantized_bins", "distribution_scenario",
                      "moving_average", "averaging_constant", "max_images", "calibration_graph")


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

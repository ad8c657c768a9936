"""Reuse a record's calibrated ranges, no images needed: :func:`replay` rebuilds the same model from its record
(``quantkit record replay``), :func:`quantize_with_ranges` quantizes with another record's ranges: one calibration,
several placements or weight settings (``quantkit quantize --ranges-from RECORD``), e.g. the ``ort`` and
``openvino`` placements of :mod:`quantkit.quantize.placement` from one set of ranges.

A record of another engine (``engine: nncf``) keeps no calibrated ranges, only the scales of the tensors it quantized;
:func:`quantize_with_ranges` still serves the main job's per-runtime files from it (the ``place`` stage):

* a config of the same engine (``placement: nncf``): the engine's own file and record, unchanged but for
  ``calibration.ranges_from`` (the fingerprint stays the record's: same tensors, model, set and config);
* a config of ``engine: ort`` (an ORT placement such as ``ort`` or ``ort-float-decode``): ORT's quantizer on the
  engine's ranges, each quantized activation's represented range ``[(qmin - z) s, (qmax - z) s]`` fixed, with the
  tensors the engine left in float (ORT's placement quantizes more, e.g. every Conv output) calibrated on the record's
  own calibration set (its set id checked). NNCF's files carry Q/DQ on Conv inputs only, which ONNX Runtime cannot fuse
  into integer kernels; ORT's placement on NNCF's ranges can.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_output_dir, sha256_bytes, sha256_file
from ..artifacts.record import CalibrationRecord
from ..errors import CalibrationSetError, ConfigError, ModelError
from ..note import ExportNote
from . import outputs
from .config import StaticQuantConfig
from .depthwise import record_ranges
from .engine import MODEL_FILE, RECORD_FILE, RangeSource, load_intake, write_static

#: Config fields that decide a calibration's ranges: a config that differs from a record's in one of them cannot use its ranges.
CALIBRATION_FIELDS = ("method", "calibration_symmetric", "percentile", "num_bins", "num_quantized_bins", "distribution_scenario",
                      "moving_average", "averaging_constant", "max_images", "calibration_graph")


def static_record_and_intake(record: CalibrationRecord | str | Path, intake: str | Path,
                             use: str, engines: tuple[str, ...] = ("ort",)) -> tuple[CalibrationRecord, Path, Any, ExportNote]:
    """``(record, model path, model, note)``: a static ``record`` (loaded when a path) and the intake model it was
    quantized from, for reusing its ranges (``use``: what is done with them, for the messages).

    Raises:
        ConfigError: a dynamic record (no ranges). ModelError: the intake model's digest differs from the record's.
    """
    rec = record if isinstance(record, CalibrationRecord) else CalibrationRecord.load(record)
    if rec.mode != "static":
        raise ConfigError(f"record {rec.fingerprint[:12]}: only a static record's ranges can be {use} (this one is {rec.mode})")
    if rec.config.get("engine", "ort") not in engines:
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
        new = write_static(model, model_path, note, config, RangeSource(record=rec), tmp)
        new.save(tmp / RECORD_FILE)
    return new


def quantize_with_ranges(record: CalibrationRecord | str | Path, intake: str | Path, config: StaticQuantConfig, *, out: str | Path,
                         levels_floor: float = outputs.DEFAULT_LEVELS_FLOOR) -> CalibrationRecord:
    """:func:`quantkit.quantize.quantize` with ``record``'s calibrated ranges instead of a calibration (no images), or,
    for a record of another engine (``engine: nncf``), that engine's ranges (module docstring).

    Args:
        record: a static record (or its folder / ``record.json``) of the same float model.
        config: must calibrate as the record's did (:data:`CALIBRATION_FIELDS`); the rest (placement, per-channel,
            weight symmetry ...) may differ. With an NNCF record: ``engine: nncf`` (its own file) or ``engine: ort``.

    Returns:
        The new record, written to ``out`` with the model; ``calibration["ranges_from"]`` names ``record``'s fingerprint.

    Raises:
        ConfigError: a dynamic record, a calibration field that differs, an engine the record was not written by.
        ModelError: another float model. CalibrationSetError: an NNCF record's calibration set is gone or changed.
    """
    rec, model_path, model, note = static_record_and_intake(record, intake, "reused for another placement", engines=("ort", "nncf"))
    theirs = StaticQuantConfig.from_dict(rec.config)
    if config.engine != "ort" and theirs.engine != config.engine:
        raise ConfigError(f"record {rec.fingerprint[:12]} was written by engine {theirs.engine} but quantize.engine is {config.engine}; "
                          f"quantize the deployed model again with engine: {config.engine} (dvc repro) before placing it per runtime")
    for f in CALIBRATION_FIELDS:
        if getattr(theirs, f) != getattr(config, f):
            raise ConfigError(f"{f}: {getattr(config, f)!r} differs from the record's {getattr(theirs, f)!r}, so its ranges are not "
                              f"this config's; set {f}: {getattr(theirs, f)!r} or calibrate anew")
    inputs = [intake, model_path, None if isinstance(record, CalibrationRecord) else record]
    if config.engine != "ort":
        return _copy_own_file(rec, record, config, theirs, Path(out), inputs)
    fixed, cset = None, None
    if theirs.engine != "ort":
        fixed, cset = engine_ranges(rec), recorded_set(rec)
    with atomic_output_dir(Path(out), command="quantize", inputs=inputs) as tmp:
        source = RangeSource(cset, record=rec if fixed is None else None, replay_scales=False, fixed=fixed,
                             depthwise=record_ranges(rec) if fixed is not None else None)  # the engine's own per-channel pairs
        new = write_static(model, model_path, note, config, source, tmp, levels_floor=levels_floor)
        if fixed is not None:
            new = dataclasses.replace(new, calibration={**(new.calibration or {}), "ranges_from": rec.fingerprint,
                                                        "ranges_engine": theirs.engine})
        new.save(tmp / RECORD_FILE)
    return new


def engine_ranges(rec: CalibrationRecord) -> dict[str, tuple[float, float]]:
    """``{activation: (min, max)}``: the float range each quantized activation of ``rec`` represents,
    ``[(qmin - z) s, (qmax - z) s]`` (ONNX DequantizeLinear; per channel, the widest)."""
    out = {}
    for t in rec.tensors:
        if t.role == "activation":
            lo, hi = t.representable()
            out[t.name] = (float(np.min(lo)), float(np.max(hi)))
    return out


def recorded_set(rec: CalibrationRecord) -> Any:
    """The calibration set ``rec`` names, loaded from its recorded path and checked to be the same content.

    Raises:
        CalibrationSetError: the folder is gone or holds other images (its set id differs)."""
    from ..calibset import CalibrationSet

    ref = rec.calibration_set
    if ref is None or not Path(ref.path).is_dir():
        where = ref.path if ref is not None else "(none recorded)"
        raise CalibrationSetError(f"record {rec.fingerprint[:12]}: its calibration set {where} is not there; the tensors its engine left in "
                                  "float are calibrated on it for ONNX Runtime's placement: run from the folder the record was written in")
    cset = CalibrationSet.load(ref.path, verify=True)
    if cset.set_id != ref.set_id:
        raise CalibrationSetError(f"{ref.path}: set id {cset.set_id[:12]} differs from record {rec.fingerprint[:12]}'s {ref.set_id[:12]}; "
                                  "quantize the deployed model again on this set (dvc repro)")
    return cset


def _copy_own_file(rec: CalibrationRecord, record: Any, config: StaticQuantConfig, theirs: StaticQuantConfig, out: Path,
                   inputs: list[Any]) -> CalibrationRecord:
    """The record's own file and record, ``calibration.ranges_from`` added (the engine placed its own Q/DQ pairs)."""
    if config.config_hash() != theirs.config_hash():
        diff = next((f.name for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(theirs, f.name)), "config")
        raise ConfigError(f"{diff}: {getattr(config, diff, None)!r} differs from record {rec.fingerprint[:12]}'s "
                          f"{getattr(theirs, diff, None)!r}; engine {config.engine} places its own pairs, so its file is used as it is: "
                          "quantize the deployed model again with this config (dvc repro)")
    if isinstance(record, CalibrationRecord):
        raise ConfigError(f"record {rec.fingerprint[:12]}: engine {config.engine}'s own file is copied; pass the record's folder")
    folder = Path(record)
    folder = folder.parent if folder.is_file() else folder
    data = (folder / MODEL_FILE).read_bytes()
    if sha256_bytes(data) != rec.quantized_model_digest:
        raise ModelError(f"{folder / MODEL_FILE}: digest differs from the record's quantized_model_digest; the folder was changed "
                         "after it was written: quantize again (dvc repro)")
    new = dataclasses.replace(rec, calibration={**(rec.calibration or {}), "ranges_from": rec.fingerprint})
    with atomic_output_dir(out, command="quantize", inputs=inputs) as tmp:
        (tmp / MODEL_FILE).write_bytes(data)
        new.save(tmp / RECORD_FILE)
    return new

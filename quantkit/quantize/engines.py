"""Quantization engines as plug-ins, and the one verb :func:`quantize` that runs them.

The config picks the engine, as torchao's ``quantize_(model, config)`` picks its handler by the config: the registry is
keyed by :func:`engine_key` (a static config's ``engine``: ``ort``, ``nncf``; a dynamic config: ``ort-dynamic``). An
engine is a subclass of :class:`Engine` that registers itself (:func:`register_engine`) when its module is imported;
the built-in ones are named here as entry points (:data:`BUILTIN`, loaded on first use, so reading a record loads no
engine), user engines come from the entry point group ``quantkit.engines``.

What every engine shares, the contract:

* :func:`quantize` reads the intake, checks the output folder, hands the engine a :class:`StaticJob` and writes
  ``model_int8.onnx`` + ``record.json`` at once (:func:`quantkit._io.atomic_output_dir`), with the calibration
  checkpoint kept or removed for engines that keep one;
* an engine writes ``job.out/model_int8.onnx`` through :func:`.files.finish` (note embedded, loaded and run by ONNX
  Runtime at its deployment level) and returns the record from :func:`.files.make_record`;
* an engine that hands ranges to ONNX Runtime's quantizer does it through :func:`.engine.write_static`, the one core
  that ``quantize``, ``record replay``, ``--ranges-from`` (another engine's ranges too) and the fallback's candidates
  share.
"""

from __future__ import annotations

import dataclasses
import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from .._io import atomic_output_dir
from .._overwrite import check_output_dir, check_output_file, set_folder
from ..artifacts.record import CalibrationRecord
from ..errors import CalibrationSetError, ConfigError, QuantkitError
from ..modelio import check_one_image_batch
from ..note import ExportNote
from .calibration.checkpoint import FILE_KIND as CHECKPOINT_KIND
from .config import DynamicQuantConfig, StaticQuantConfig
from .files import RECORD_FILE, load_intake
from .outputs import DEFAULT_LEVELS_FLOOR

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "quantkit.engines"
"""Entry-point group for user engines: ``[project.entry-points."quantkit.engines"] mine = "pkg.mod:MyEngine"``."""
BUILTIN = {"ort": "quantkit.quantize.engine:OrtEngine", "ort-dynamic": "quantkit.quantize.engine:OrtDynamicEngine",
           "nncf": "quantkit.quantize.nncf_engine:NncfEngine"}
"""The built-in engines, as entry points: each module registers its engine when imported."""
ENGINES: dict[str, Engine] = {}


@dataclasses.dataclass(frozen=True)
class StaticJob:
    """What an engine is given: the intake model (``model``, ``model_path``, ``note``), the config, the calibration set
    (a folder or :class:`~quantkit.calibset.CalibrationSet`, None for dynamic), ``out`` (the output's temporary folder),
    the checkpoint file (engines with ``checkpoints``) and the collapsed-output floor."""

    model: Any
    model_path: Path
    note: ExportNote
    config: Any
    calibration_set: Any
    out: Path
    checkpoint: Path | None = None
    levels_floor: float = DEFAULT_LEVELS_FLOOR


class Engine(ABC):
    """A quantization engine. Class attributes: ``name`` (its :func:`engine_key`), ``checkpoints`` (keeps a resumable
    calibration checkpoint), ``calibrated`` (reads a calibration set; False: refuses one)."""

    name: ClassVar[str] = ""
    checkpoints: ClassVar[bool] = False
    calibrated: ClassVar[bool] = True

    def check(self, config: Any, calibration_set: Any, checkpoint: Any) -> None:
        """Raise a one-line :class:`~quantkit.errors.QuantkitError` for arguments this engine cannot take (before any work)."""
        if not self.calibrated and calibration_set is not None:
            raise ConfigError(f"engine {self.name} takes no calibration set; drop --calibration-set")
        if not self.checkpoints and checkpoint is not None:
            raise ConfigError(f"--checkpoint: engine {self.name} keeps no calibration checkpoint; drop it")

    @abstractmethod
    def write(self, job: StaticJob) -> CalibrationRecord:
        """Write ``job.out/model_int8.onnx`` and return its record (the caller saves it)."""


def register_engine(engine: Engine) -> Engine:
    """Make ``engine`` the handler of configs whose :func:`engine_key` is ``engine.name``; returns it."""
    if not engine.name:
        raise TypeError(f"{type(engine).__name__} must set a class attribute 'name'")
    ENGINES[engine.name] = engine
    return engine


def engine_key(config: Any) -> str:
    """The registry key of ``config``: its ``engine`` (static configs), ``ort-dynamic`` for a dynamic config."""
    if isinstance(config, DynamicQuantConfig):
        return "ort-dynamic"
    if isinstance(config, StaticQuantConfig):
        return config.engine
    raise TypeError(f"config must be StaticQuantConfig or DynamicQuantConfig, not {type(config).__name__}")


def _load(name: str) -> None:
    from importlib.metadata import EntryPoint, entry_points

    eps = [EntryPoint(name, BUILTIN[name], ENTRY_POINT_GROUP)] if name in BUILTIN else \
        [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    for ep in eps:
        try:
            loaded = ep.load()  # the module registers its engine
        except Exception as e:  # a broken plug-in must not break the built-in engines
            if name in BUILTIN:
                raise
            log.warning("engine entry point %r (%s) failed to load: %s", ep.name, ep.value, e)
            continue
        if name not in ENGINES and isinstance(loaded, type) and issubclass(loaded, Engine):
            register_engine(loaded())


def engine_for(config: Any) -> Engine:
    """The registered engine of ``config``.

    Raises:
        ConfigError: no engine of that name (names the registered ones). TypeError: not a quantization config.
    """
    key = engine_key(config)
    if key not in ENGINES:
        _load(key)
    if key not in ENGINES:
        raise ConfigError(f"quantize.engine: {key!r} is not registered; use one of {', '.join(sorted(set(BUILTIN) - {'ort-dynamic'}))} "
                          f"or register your own (entry point group {ENTRY_POINT_GROUP!r})")
    return ENGINES[key]


def checkpoint_path(out: str | Path, checkpoint: str | Path | None = None) -> Path:
    """The calibration checkpoint file a static :func:`quantize` into ``out`` uses: ``checkpoint`` when given, else
    ``<out parent>/.<out name>.calib-checkpoint``."""
    out = Path(out)
    return Path(checkpoint) if checkpoint is not None else out.parent / f".{out.name}.calib-checkpoint"


def quantize(
    intake: str | Path,
    config: Any,
    *,
    out: str | Path,
    calibration_set: Any = None,
    checkpoint: str | Path | None = None,
    levels_floor: float = DEFAULT_LEVELS_FLOOR,
) -> CalibrationRecord:
    """Quantize the intake model with the engine the config names (:func:`engine_for`).

    Args:
        intake: ``work/intake`` folder (``model.onnx`` with fixed input shape + ``export_note.json``) or a
            model file carrying an embedded note.
        config: :class:`StaticQuantConfig` (``engine: ort``, or ``nncf``: :mod:`.nncf_engine`, the ``nncf`` extra, no
            checkpoint) or :class:`DynamicQuantConfig` (``ort-dynamic``, no calibration set).
        out: output folder; gets ``model_int8.onnx`` and ``record.json`` all at once, or nothing.
        calibration_set: set folder or :class:`quantkit.calibset.CalibrationSet` (static only).
        checkpoint: calibration checkpoint file (``.npz``); default ``<out parent>/.<out name>.calib-checkpoint``,
            kept when the run is interrupted or an image is unreadable (the next run resumes from it), removed
            when it succeeds or fails with another error (its fix changes the model or config, hence the key).
        levels_floor: a channel of a quantized graph output spanning fewer quantization steps is flagged
            (record ``calibration["collapsed_outputs"]``, a warning); see :mod:`quantkit.quantize.outputs`.

    Returns:
        The :class:`CalibrationRecord` written to ``out/record.json``. Its ``calibration`` also lists every
        graph output (``outputs``) and, when there are any, ``range_changes``, ``collapsed_outputs``,
        ``outputs_pinned``, ``unobserved``, ``variable_shape`` and ``warnings`` (:mod:`.outputs`, :mod:`.calibration.calibrate`).

    Raises:
        ModelError, CalibrationSetError, ConfigError, UnsupportedOptionError: one-line, naming the file or
            field; ``out`` is left as it was. A calibration set is re-hashed first: a missing or changed image
            raises :class:`CalibrationSetError` naming it (register the changed set as a new version).
        TargetSupportError: ONNX Runtime's CPU provider cannot load or run the quantized model at its default
            optimization level (e.g. 4-bit activations with 8-bit weights); nothing is written.
        InputFileError: ``out`` is, holds or lies inside the intake or the calibration set, or is a folder
            another command wrote; ``checkpoint`` is an input or a file that is not a calibration checkpoint.
    """
    engine = engine_for(config)
    model_path, model, note = load_intake(intake)
    out = Path(out)
    inputs = [intake, model_path, set_folder(calibration_set)]
    engine.check(config, calibration_set, checkpoint)
    if engine.calibrated:
        check_one_image_batch(model, note.preprocessing.input_name, model_path, batch_axis=note.preprocessing.batch_axis)
    ckpt = checkpoint_path(out, checkpoint) if engine.checkpoints else None
    if ckpt is not None:
        check_output_dir(out, "quantize", inputs=inputs)  # these two now, not after calibrating
        check_output_file(ckpt, CHECKPOINT_KIND, inputs=inputs, flag="--checkpoint")  # it is replaced, then removed
    try:
        with atomic_output_dir(out, command="quantize", inputs=inputs) as tmp:
            rec = engine.write(StaticJob(model, model_path, note, config, calibration_set, tmp, ckpt, levels_floor))
            rec.save(tmp / RECORD_FILE)
    except QuantkitError as e:
        if ckpt is not None and not isinstance(e, CalibrationSetError):  # the fix changes the model or config: no resume
            ckpt.unlink(missing_ok=True)
        raise
    if ckpt is not None:
        ckpt.unlink(missing_ok=True)
    return rec


__all__ = ["BUILTIN", "ENGINES", "ENTRY_POINT_GROUP", "Engine", "StaticJob", "checkpoint_path", "engine_for", "engine_key", "quantize",
           "register_engine"]

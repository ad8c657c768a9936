"""One verb: :func:`quantize` (the config's type picks static or dynamic), plus :func:`replay`.

Static path (what ``onnxruntime.quantization.quantize_static`` does, split so calibration is bounded):

1. read ``model.onnx`` + ``export_note.json`` from the intake folder; check the config against the model
   (:mod:`.adapter`: exclusions exist, opset fits the format);
2. prepare: ``Constant`` nodes become initializers (ORT quantizes weights only when they are
   initializers; PP-OCR's exporter emits them as Constant nodes, which ORT would treat as activations);
3. collect ranges chunk by chunk with ORT's own calibrator (:mod:`.calibrate`), resumable;
4. hand the ranges to ``quantize_static`` through its ``calibration_cache_path`` (ORT then skips its own
   calibration and runs ``QDQQuantizer`` / ``ONNXQuantizer`` exactly as usual);
5. embed the export note, check ORT loads the result, read every scale/zero point back from it
   (:func:`.record.extract_scales`) and write ``model_int8.onnx`` + ``record.json`` into ``out`` at once
   (:func:`quantkit._io.atomic_output_dir`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_output_dir, fingerprint, sha256_bytes, sha256_file
from ..artifacts.record import CalibrationRecord, SetRef, TensorScale
from ..dtypes import INT_TYPES
from ..errors import ConfigError, ModelError, QuantkitError, UnsupportedOptionError
from ..modelio import load_model, opset_of
from ..note import ExportNote
from ..versions import tool_versions
from . import adapter
from .calibrate import CalibrationRun, collect_ranges, quiet_ort
from .config import DynamicQuantConfig, StaticQuantConfig
from .scales import extract_scales

log = logging.getLogger(__name__)

MODEL_FILE = "model_int8.onnx"
RECORD_FILE = "record.json"


class _DropOrtNags(logging.Filter):
    """ORT root-logger warnings a quantkit user cannot act on: the pre-processing advice (intake did it),
    per-channel axis notes for rank-1 BatchNormalization weights (ORT falls back to per-tensor), and the
    automatic opset bump for 16-bit types (recorded as opset_after)."""

    _NAGS = ("pre-process", "is out-of-range for weight", "does not support 16-bit integer quantization natively")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self._NAGS)


@contextlib.contextmanager
def _ort_logging() -> Iterator[None]:
    """Silence ORT's "Please consider pre-processing" root-logger warning for the duration of a call."""
    root = logging.getLogger()
    f = _DropOrtNags()
    root.addFilter(f)
    try:
        with quiet_ort():
            yield
    finally:
        root.removeFilter(f)


def load_intake(intake: str | Path) -> tuple[Path, Any, ExportNote]:
    """Resolve an intake folder (or a model file) to ``(model_path, ModelProto, ExportNote)``.

    Raises:
        ModelError: model missing, not ONNX, or without a note.
    """
    p = Path(intake)
    model_path = p / "model.onnx" if p.is_dir() else p
    if not model_path.is_file():
        raise ModelError(f"{model_path}: model not found; run 'quantkit intake MODEL --out {p}' first")
    model = load_model(model_path)
    sidecar = model_path.parent / "export_note.json"
    note = ExportNote.load(sidecar) if sidecar.is_file() else ExportNote.from_model(model, path=str(model_path))
    return model_path, model, note


def constants_to_initializers(model: Any) -> int:
    """Move ``Constant`` nodes with a tensor ``value`` into the initializer list, in place; returns how many."""
    import onnx

    keep, moved = [], 0
    for n in model.graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            model.graph.initializer.append(t)
            moved += 1
        else:
            keep.append(n)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return moved


def _finish(tmp_model: Path, note: ExportNote, dest: Path) -> tuple[Any, bytes]:
    """Embed the note, check ORT loads the model, write it to ``dest``; returns (ModelProto, bytes)."""
    import onnx

    from ..runner import OrtRunner

    q = onnx.load(str(tmp_model))
    note.embed(q)
    data = q.SerializeToString()
    try:
        with OrtRunner(data, graph_optimization_level="disable", name=dest.name):
            pass
    except ModelError as e:
        raise ModelError(f"{dest.name}: ONNX Runtime wrote a model it cannot load ({e}); change format/types or run 'quantkit intake' to upgrade the opset") from None
    dest.write_bytes(data)
    return q, data


def _ranges_from_record(record: CalibrationRecord, method: str) -> Any:
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorData, TensorsData

    pairs: dict[str, tuple[Any, Any]]
    if record.calibrated_ranges:
        pairs = {k: (v[0], v[1]) for k, v in record.calibrated_ranges.items()}
    else:
        pairs = {t.name: (t.range_min, t.range_max) for t in record.tensors if t.role == "activation" and t.range_min is not None}
    data = {k: TensorData(lowest=np.array(lo, np.float32), highest=np.array(hi, np.float32)) for k, (lo, hi) in sorted(pairs.items())}
    return TensorsData(getattr(CalibrationMethod, adapter.METHODS[method]), data)


def _static(model: Any, model_path: Path, note: ExportNote, config: StaticQuantConfig, calibration_set: Any,
            out: Path, checkpoint: Path | None, record: CalibrationRecord | None, replay_scales: bool = True) -> CalibrationRecord:
    from onnxruntime.quantization import quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data

    model_digest = sha256_file(model_path)
    adapter.check_opset(config, opset_of(model), str(model_path))
    op_types, excluded = adapter.resolve_exclusions(config, model, config.format)
    cs_info: SetRef | None = None
    set_id = None
    if record is None:
        if calibration_set is None:
            raise ConfigError("static quantization needs --calibration-set DIR (or use --dynamic)")
        if config.method == "distribution":
            # ORT's DistributionCalibrater computes mean/std for float 8 types; integer types get its
            # histogram edges as the range, i.e. the symmetric (-max|x|, max|x|) (ORT calibrate.py,
            # compute_distribution): on the demo detector, pixel IoU vs FP32 0.02 (bench/bench_calibration.py).
            log.warning("method 'distribution' is ORT's float 8 calibrator: with %s activations its range is the symmetric "
                        "(-max|x|, max|x|), which wastes half of an unsigned grid; prefer minmax, percentile or entropy",
                        config.activation_type)
        from ..calibset import CalibrationSet, CalibrationSetReader

        # Re-hash every image: a set whose image was overwritten after registration must not be calibrated
        # under its old set id (the record would then name content it was not calibrated on).
        if isinstance(calibration_set, (str, Path)):
            cset = CalibrationSet.load(calibration_set, verify=True)
        else:
            cset = calibration_set
            cset.verify()
        set_id = cset.set_id
        cs_info = SetRef(path=str(cset.root), set_id=cset.set_id, name=cset.name, camera=cset.camera,
                        lighting=cset.lighting, count=cset.count)
    else:
        cs_info = record.calibration_set
        set_id = record.set_id
    prepared = type(model)()
    prepared.CopyFrom(model)
    moved = constants_to_initializers(prepared)
    if moved:
        log.info("moved %d Constant nodes to initializers before quantization", moved)
    with tempfile.TemporaryDirectory(prefix="quantkit-quantize-") as work_s:
        work = Path(work_s)
        prep_path = work / "prepared.onnx"
        import onnx

        onnx.save(prepared, str(prep_path))
        calib: dict[str, Any] = {}
        extra_overrides = None
        if record is None:
            reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
            key = fingerprint({"model": model_digest, "set": set_id, "config": config.config_hash()})
            run: CalibrationRun = collect_ranges(prep_path, reader, config, workdir=work, op_types=op_types, checkpoint=checkpoint, key=key)
            ranges = run.tensors
            calib = run.to_dict()
        else:
            ranges = _ranges_from_record(record, config.method)
            extra_overrides = replay_overrides(record) if replay_scales else None
            calib = {"replayed_from" if replay_scales else "ranges_from": record.fingerprint}
        cache = work / "ranges.json"
        save_tensors_data(ranges, cache)
        kwargs = adapter.static_kwargs(config, op_types, excluded, extra_overrides)
        raw = work / "quantized.onnx"
        try:
            with _ort_logging():
                quantize_static(str(prep_path), str(raw), None, calibration_cache_path=str(cache), **kwargs)
        except QuantkitError:
            raise
        except Exception as e:  # ORT raises ValueError/AttributeError/RuntimeError on models it cannot handle
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ModelError(f"{model_path}: ONNX Runtime could not quantize the model ({type(e).__name__}: {first}); run 'quantkit intake' on it or exclude the failing nodes") from None
        q, data = _finish(raw, note, out / MODEL_FILE)
    tensors = extract_scales(q, prepared, ranges=ranges, calibrator=config.method)
    rec = _record(tensors, model_digest, sha256_bytes(data), cs_info, config, opset_of(model), opset_of(q), "static", calib)
    full = {k: (float(np.min(ranges[k].range_value[0])), float(np.max(ranges[k].range_value[1]))) for k in sorted(ranges.data)}
    return dataclasses.replace(rec, calibrated_ranges=full)


def _record(tensors: tuple[TensorScale, ...], model_digest: str, qdigest: str, cs_info: SetRef | None, config: Any,
            opset_before: int, opset_after: int, mode: str, calib: dict[str, Any]) -> CalibrationRecord:
    set_id = cs_info.set_id if cs_info else None
    chash = config.config_hash()
    return CalibrationRecord(
        fingerprint=CalibrationRecord.compute_fingerprint(tensors, model_digest, set_id, chash), model_digest=model_digest,
        quantized_model_digest=qdigest, calibration_set=cs_info, config=config.to_dict(), config_hash=chash,
        opset_before=opset_before, opset_after=opset_after, versions=tool_versions(), tensors=tensors, mode=mode,
        calibration={k: v for k, v in calib.items() if k != "seconds"})


def _dynamic(model: Any, model_path: Path, note: ExportNote, config: DynamicQuantConfig, out: Path) -> CalibrationRecord:
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    model_digest = sha256_file(model_path)
    op_types, excluded = adapter.resolve_exclusions(config, model, "dynamic")
    prepared = type(model)()
    prepared.CopyFrom(model)
    constants_to_initializers(prepared)
    with tempfile.TemporaryDirectory(prefix="quantkit-quantize-") as work_s:
        work = Path(work_s)
        prep_path, raw = work / "prepared.onnx", work / "quantized.onnx"
        onnx.save(prepared, str(prep_path))
        try:
            with _ort_logging():
                quantize_dynamic(str(prep_path), str(raw), **adapter.dynamic_kwargs(config, op_types, excluded))
        except QuantkitError:
            raise
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ModelError(f"{model_path}: ONNX Runtime could not quantize the model dynamically ({type(e).__name__}: {first}); run 'quantkit intake' on it") from None
        q, data = _finish(raw, note, out / MODEL_FILE)
    tensors = extract_scales(q, prepared, calibrator="dynamic")
    return _record(tensors, model_digest, sha256_bytes(data), None, config, opset_of(model), opset_of(q), "dynamic", {})


def quantize(
    intake: str | Path,
    config: StaticQuantConfig | DynamicQuantConfig,
    *,
    out: str | Path,
    calibration_set: Any = None,
    checkpoint: str | Path | None = None,
) -> CalibrationRecord:
    """Quantize the intake model; the config's type selects static (calibrated) or dynamic.

    Args:
        intake: ``work/intake`` folder (``model.onnx`` with fixed input shape + ``export_note.json``) or a
            model file carrying an embedded note.
        config: :class:`StaticQuantConfig` or :class:`DynamicQuantConfig`.
        out: output folder; gets ``model_int8.onnx`` and ``record.json`` all at once, or nothing.
        calibration_set: set folder or :class:`quantkit.calibset.CalibrationSet` (static only).
        checkpoint: calibration checkpoint file; default ``<out parent>/.<out name>.calib-checkpoint``,
            kept when the run fails (the next run resumes from it), removed when it succeeds.

    Returns:
        The :class:`CalibrationRecord` written to ``out/record.json``.

    Raises:
        ModelError, CalibrationSetError, ConfigError, UnsupportedOptionError: one-line, naming the file or
            field; ``out`` is left as it was. A calibration set is re-hashed first: a missing or changed image
            raises :class:`CalibrationSetError` naming it (register the changed set as a new version).
    """
    model_path, model, note = load_intake(intake)
    out = Path(out)
    if isinstance(config, DynamicQuantConfig):
        if calibration_set is not None:
            raise UnsupportedOptionError("dynamic quantization takes no calibration set (activations are quantized at run time); drop --calibration-set or drop --dynamic")
        with atomic_output_dir(out) as tmp:
            rec = _dynamic(model, model_path, note, config, tmp)
            rec.save(tmp / RECORD_FILE)
        return rec
    if not isinstance(config, StaticQuantConfig):
        raise TypeError(f"config must be StaticQuantConfig or DynamicQuantConfig, not {type(config).__name__}")
    ckpt = Path(checkpoint) if checkpoint is not None else out.parent / f".{out.name}.calib-checkpoint"
    with atomic_output_dir(out) as tmp:
        rec = _static(model, model_path, note, config, calibration_set, tmp, ckpt, None)
        rec.save(tmp / RECORD_FILE)
    ckpt.unlink(missing_ok=True)
    return rec


def replay_overrides(record: CalibrationRecord) -> dict[str, list[dict[str, Any]]]:
    """ORT ``TensorQuantOverrides`` fixing every activation's scale and zero point to the record's."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in record.tensors:
        if t.role != "activation" or len(t.scale) != 1:
            continue
        it = INT_TYPES.get(t.dtype)
        if it is None or it.bits not in (8, 16):
            continue
        out[t.name] = [{"scale": np.array(t.scale[0], np.float32), "zero_point": np.array(t.zero_point[0], it.numpy),
                        "quant_type": adapter.quant_type(t.dtype)}]
    return out


def replay(record: CalibrationRecord | str | Path, intake: str | Path, *, out: str | Path) -> CalibrationRecord:
    """Rebuild the quantized model from a record alone (no calibration images): the record's config, its
    calibrated ranges, and every activation's scale/zero point as ``TensorQuantOverrides``.

    Returns the new record; its ``quantized_model_digest`` equals the original's when nothing else
    changed (same float model, same ORT version).

    Raises:
        ModelError: the intake model's digest differs from the record's ``model_digest``.
        ConfigError: the record is a dynamic one (nothing to replay).
    """
    rec = record if isinstance(record, CalibrationRecord) else CalibrationRecord.load(record)
    if rec.mode != "static":
        raise ConfigError(f"record {rec.fingerprint[:12]}: only static records can be replayed (this one is {rec.mode})")
    model_path, model, note = load_intake(intake)
    digest = sha256_file(model_path)
    if digest != rec.model_digest:
        raise ModelError(f"{model_path}: digest {digest[:12]} differs from the record's model_digest {rec.model_digest[:12]}; "
                         "replay needs the same float model")
    cfg_dict = {k: v for k, v in rec.config.items()}
    config = StaticQuantConfig.from_dict(cfg_dict)
    out = Path(out)
    with atomic_output_dir(out) as tmp:
        new = _static(model, model_path, note, config, None, tmp, None, rec)
        new.save(tmp / RECORD_FILE)
    return new

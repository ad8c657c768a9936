"""ONNX Runtime's engines (``quantize.engine: ort`` and dynamic), registered with :mod:`.engines`, and
:func:`write_static`, the core every path that hands ranges to ORT's quantizer shares.

Static path (what ``onnxruntime.quantization.quantize_static`` does, split so calibration is bounded):

1. read ``model.onnx`` + ``export_note.json`` from the intake folder; check the config against the model
   (:mod:`.ort_bridge`: exclusions exist, opset fits the format);
2. prepare: ``Constant`` nodes become initializers (ORT quantizes weights only when they are
   initializers; PP-OCR's exporter emits them as Constant nodes, which ORT would treat as activations);
3. collect ranges image by image, reproducing ORT's calibrators (:mod:`.calibration.calibrate`), resumable; tensors
   that never held a value (data-dependent shapes) keep their nodes in float, named in the record;
4. pin graph outputs that feed a Relu/Clip to their own range (ORT would give them the Relu's,
   :func:`.outputs.relu_fed_outputs`) and hand the ranges to ``quantize_static`` through its
   ``calibration_cache_path`` (:mod:`.ort_bridge`; ORT then runs ``QDQQuantizer`` / ``ONNXQuantizer`` as usual);
5. embed the export note, load and run the result at the deployment optimization level
   (:func:`.runtime_check.check_runs`: a runtime that refuses the model stops here, nothing written), read
   every scale/zero point back from it (:func:`.scales.extract_scales`), describe what the written model
   computes at its outputs (:mod:`.outputs`: every graph output, ranges that changed, collapsed channels) and
   write ``model_int8.onnx`` + ``record.json`` into ``out`` at once (:func:`quantkit._io.atomic_output_dir`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._io import sha256_bytes, sha256_file
from ..artifacts.record import CalibrationRecord
from ..calibset import CalibrationSetReader
from ..errors import (
    ModelError,
    QuantkitError,
    TargetSupportError,
    UnsupportedOptionError,
)
from ..modelio import opset_of
from ..note import ExportNote
from . import depthwise, ort_bridge, outputs
from .calibration.calibrate import CalibrationRun, collect_ranges
from .calibration.checkpoint import CheckpointKey
from .config import DynamicQuantConfig, StaticQuantConfig
from .engines import Engine, StaticJob, register_engine
from .files import (
    MODEL_FILE,
    RECORD_FILE,
    constants_to_initializers,
    load_intake,
    set_ref,
)
from .files import finish as _finish
from .files import load_set as _load_set
from .files import make_record as _record
from .placement import placement_recipe, plan_placement
from .scales import extract_scales
from .._io import scratch_dir

log = logging.getLogger(__name__)

def _exclude_unobserved(model: Any, unobserved: tuple[str, ...], excluded: list[str]) -> list[str]:
    """Names of the nodes that read or write a tensor which held no value on any calibration image (a
    data-dependent shape, empty each time): they stay in float, one log line per tensor.

    Raises:
        ModelError: such a node has no name (ORT excludes nodes by name); run 'quantkit intake' to name them.
    """
    more: list[str] = []
    for t in unobserved:
        nodes = [n for n in model.graph.node if t in n.input or t in n.output]
        if any(not n.name for n in nodes):
            raise ModelError(f"tensor {t!r} held no value on any calibration image and a node using it has no name; "
                             "run 'quantkit intake' to name the nodes, or calibrate on images where it is not empty")
        names = [n.name for n in nodes if n.name not in excluded and n.name not in more]
        log.warning("tensor %r held no value on any calibration image (its shape depends on the data); nodes %s stay in float",
                    t, ", ".join(names) or "(already excluded)")
        more += names
    return more


@dataclasses.dataclass(frozen=True)
class RangeSource:
    """Where :func:`write_static` takes its ranges from: calibrated on ``calibration_set`` (resumable at ``checkpoint``),
    with ``fixed`` ``{tensor: (min, max)}`` replacing the calibrated range of those tensors (another engine's ranges,
    :func:`.reuse.quantize_with_ranges`); or ``record``'s calibrated ranges (no images), with every activation's
    scale and zero point too when ``replay_scales`` (``quantkit record replay``). ``depthwise``: per-channel ranges of
    depthwise inputs ``{tensor: (lo, hi)}`` that replace the calibrated ones (another engine's per-channel pairs,
    :func:`.depthwise.record_ranges`), for a placement that quantizes them per channel."""

    calibration_set: Any = None
    checkpoint: Path | None = None
    record: CalibrationRecord | None = None
    replay_scales: bool = True
    fixed: Mapping[str, tuple[float, float]] | None = None
    depthwise: Mapping[str, tuple[Any, Any]] | None = None


def write_static(model: Any, model_path: Path, note: ExportNote, config: StaticQuantConfig, source: RangeSource, out: Path,
                 levels_floor: float = outputs.DEFAULT_LEVELS_FLOOR) -> CalibrationRecord:
    """The core every path that writes an ONNX Runtime-quantized INT8 file shares (``quantize``, ``record replay``,
    ``--ranges-from`` incl. another engine's ranges, the fallback's candidates): ranges from ``source``, the placement
    planned, ``quantize_static`` run and checked (module docstring, steps 2-5); writes ``out/model_int8.onnx``
    (``out``: the output's temporary folder) and returns the record (the caller saves it).

    Raises:
        ModelError, CalibrationSetError, ConfigError, UnsupportedOptionError, TargetSupportError: as :func:`.engines.quantize`.
    """
    import onnx

    calibration_set, checkpoint, record, replay_scales, fixed = (source.calibration_set, source.checkpoint, source.record,
                                                                  source.replay_scales, source.fixed)

    model_digest = sha256_file(model_path)
    ort_bridge.check_opset(config, opset_of(model), str(model_path))
    op_types, excluded = ort_bridge.resolve_exclusions(config, model, config.format)
    if record is None:
        cset = _load_set(calibration_set)
        cs_info = set_ref(cset)
    else:
        cs_info = record.calibration_set
    prepared = type(model)()
    prepared.CopyFrom(model)
    moved = constants_to_initializers(prepared)
    if moved:
        log.info("moved %d Constant nodes to initializers before quantization", moved)
    channels: Any = ()  # a replay has no per-channel ranges (a record keeps none): its outputs are checked per tensor
    with scratch_dir("quantize") as work_s:
        work = Path(work_s)
        prep_path = work / "prepared.onnx"
        onnx.save(prepared, str(prep_path))
        overrides: dict[str, list[dict[str, Any]]] = {}
        if record is None:
            ranges, calib, channels, excluded = _calibrate(prep_path, prepared, cset, note, config, work, op_types, excluded, checkpoint, model_digest)
            if fixed:
                pairs = {k: (float(np.min(ranges[k].range_value[0])), float(np.max(ranges[k].range_value[1]))) for k in ranges.data}
                ranges = ort_bridge.ranges_from_pairs(config.method, {**pairs, **{k: v for k, v in fixed.items() if k in pairs}})
                calib["fixed_ranges"] = sorted(k for k in fixed if k in pairs)
        else:
            ranges = ort_bridge.ranges_from_pairs(config.method, _recorded_pairs(record))
            overrides = ort_bridge.replay_overrides(record.tensors) if replay_scales else {}
            calib = {"replayed_from" if replay_scales else "ranges_from": record.fingerprint}
            for k in ("float_nodes", "variable_shape", "outputs_pinned"):  # what the recorded run decided, and why
                if record.calibration.get(k):
                    calib[k] = list(record.calibration[k])
            if record.calibration.get("depthwise_ranges"):
                calib["depthwise_ranges"] = dict(record.calibration["depthwise_ranges"])
            excluded = excluded + [n for n in calib.get("float_nodes", []) if n not in excluded]
        plan = plan_placement(placement_recipe(config.placement), prepared, op_types, excluded)  # calibration covered every op type; this is what gets Q/DQ
        q_types, q_excluded = list(plan.op_types), list(plan.nodes_to_exclude)
        pinned = [n for n in outputs.relu_fed_outputs(prepared, ranges, q_types, q_excluded) if n not in config.tensor_overrides and n not in overrides]
        overrides.update(ort_bridge.range_overrides(ranges, pinned))
        per_channel = None
        if placement_recipe(config.placement).per_channel_depthwise:
            if source.depthwise:  # another engine's pairs; the record says which ranges its per-channel pairs came from
                calib["depthwise_ranges"] = depthwise.entry_of(dict(source.depthwise))
            # else this calibration's (or the record's, copied above) per-channel ranges; a record without them: its own pairs
            pc = dict(source.depthwise or {}) or depthwise.entry_ranges(calib.get("depthwise_ranges", {})) or \
                (depthwise.record_ranges(record) if record is not None else {})
            per_channel = (depthwise.depthwise_inputs(prepared), pc) if pc else None
        job = _Quantization(model_path, prep_path, ranges, config, q_types, overrides, note, out / MODEL_FILE, work, plan.no_output_op_types,
                            per_channel)
        q, data, floated = job.run_checked(prepared, q_excluded, set(calib.get("variable_shape", ())))
        if floated:
            calib["float_nodes"] = sorted(set(calib.get("float_nodes", [])) | set(floated))
    tensors = extract_scales(q, prepared, ranges=ranges, calibrator=config.method)
    calib.update(outputs.findings(prepared, tensors, ranges, config.symmetric_activations, channels, pinned, levels_floor, q))
    rec = _record(tensors, model_digest, sha256_bytes(data), cs_info, config, opset_of(model), opset_of(q), "static", calib)
    full = {k: (float(np.min(ranges[k].range_value[0])), float(np.max(ranges[k].range_value[1]))) for k in sorted(ranges.data)}
    return dataclasses.replace(rec, calibrated_ranges=full)


@dataclasses.dataclass(frozen=True)
class _Quantization:
    """One ``quantize_static`` run and its runtime check, for a given set of nodes kept in float."""

    source: Path  # the intake model, for messages
    prep_path: Path
    ranges: Any
    config: StaticQuantConfig
    op_types: list[str]
    overrides: dict[str, Any]
    note: ExportNote
    dest: Path
    work: Path
    no_output_op_types: tuple[str, ...] = ()
    per_channel: tuple[dict[str, str], dict[str, Any]] | None = None  # depthwise inputs and their per-channel ranges

    def run(self, excluded: list[str]) -> tuple[Any, bytes]:
        raw = self.work / "quantized.onnx"
        kwargs = ort_bridge.static_kwargs(self.config, self.op_types, excluded, self.overrides or None, self.no_output_op_types)
        try:
            ort_bridge.run_static(self.prep_path, raw, self.ranges, kwargs, self.work)
        except QuantkitError:
            raise
        except Exception as e:  # ORT raises ValueError/AttributeError/RuntimeError on models it cannot handle
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ModelError(f"{self.source}: ONNX Runtime could not quantize the model ({type(e).__name__}: {first}); "
                             "run 'quantkit intake' on it or exclude the failing nodes") from None
        if self.per_channel is not None:
            import onnx

            m = onnx.load(str(raw))
            done = depthwise.per_channel_inputs(m, *self.per_channel, symmetric=self.config.symmetric_activations)
            if done:
                onnx.save(m, str(raw))
                log.info("%d depthwise inputs quantized per channel (placement %s)", len(done), self.config.placement)
        return _finish(raw, self.note, self.dest, self.config)

    def run_checked(self, model: Any, excluded: list[str], variable: Any) -> tuple[Any, bytes, list[str]]:
        """:meth:`run`; when the runtime refuses the result and the model has tensors whose shape depends on the
        data (``variable``), once more with the nodes reading or writing them in float (ORT 1.32 crashes on a
        quantized ``Mul`` fed by an empty ``GatherND``). Returns (ModelProto, bytes, the nodes floated)."""
        try:
            return (*self.run(excluded), [])
        except TargetSupportError as e:
            around = sorted({n.name for n in model.graph.node if n.name and n.name not in excluded
                             and any(t in variable for t in (*n.input, *n.output))})
            if not around:
                raise
            log.warning("%s -- retrying with the nodes around tensors whose shape depends on the data (%s) in float: %s",
                        str(e).split("; ")[0], ", ".join(sorted(variable)), ", ".join(around))
            return (*self.run(excluded + around), around)


def _calibrate(prep_path: Path, prepared: Any, cset: Any, note: ExportNote, config: StaticQuantConfig, work: Path, op_types: list[str],
               excluded: list[str], checkpoint: Path | None, model_digest: str) -> tuple[Any, dict[str, Any], Any, list[str]]:
    """Collect ranges on ``cset``; returns (ranges, the record's calibration entries, output channel ranges,
    nodes to exclude, now including those around tensors that never held a value)."""
    if config.method == "distribution":
        # ORT's DistributionCalibrater computes mean/std for float 8 types; integer types get its histogram
        # edges as the range, i.e. the symmetric (-max|x|, max|x|) (ORT calibrate.py, compute_distribution):
        # on the demo detector, pixel IoU vs FP32 0.02 (bench/bench_calibration.py).
        log.warning("method 'distribution' is ORT's float 8 calibrator: with %s activations its range is the symmetric "
                    "(-max|x|, max|x|), which wastes half of an unsigned grid; prefer minmax, percentile or entropy",
                    config.activation_type)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    key = CheckpointKey.for_run(model_digest, cset.set_id, config.config_hash())
    graph_outputs = {o.name for o in prepared.graph.output}
    dw = set(depthwise.depthwise_inputs(prepared)) - graph_outputs
    per_channel = {**{t: (1,) for t in dw},  # depthwise inputs: per-channel ranges for the record
                   **{o: outputs.channel_axes(prepared, o) for o in graph_outputs}}
    run: CalibrationRun = collect_ranges(prep_path, reader, config, workdir=work, op_types=op_types, checkpoint=checkpoint, key=key,
                                         outputs=per_channel)
    for w in run.warnings:
        log.warning("%s", w)
    calib = run.to_dict()
    unobserved = _exclude_unobserved(prepared, run.unobserved, excluded)
    if unobserved:
        calib["float_nodes"] = unobserved
    entry = depthwise.ranges_entry(run.channel_means, dw)
    if entry:  # NNCF's estimator per channel, for a placement that quantizes these inputs per channel
        calib["depthwise_ranges"] = entry
    return run.tensors, calib, tuple(c for c in run.channel_ranges if c.tensor not in entry), excluded + unobserved


def _recorded_pairs(record: CalibrationRecord) -> dict[str, tuple[float, float]]:
    if record.calibrated_ranges:
        return {k: (v[0], v[1]) for k, v in record.calibrated_ranges.items()}
    return {t.name: (t.range_min, t.range_max) for t in record.tensors if t.role == "activation" and t.range_min is not None}


def _dynamic(model: Any, model_path: Path, note: ExportNote, config: DynamicQuantConfig, out: Path) -> CalibrationRecord:
    import onnx

    model_digest = sha256_file(model_path)
    op_types, excluded = ort_bridge.resolve_exclusions(config, model, "dynamic")
    prepared = type(model)()
    prepared.CopyFrom(model)
    constants_to_initializers(prepared)
    with scratch_dir("quantize") as work_s:
        work = Path(work_s)
        prep_path, raw = work / "prepared.onnx", work / "quantized.onnx"
        onnx.save(prepared, str(prep_path))
        try:
            ort_bridge.run_dynamic(prep_path, raw, ort_bridge.dynamic_kwargs(config, op_types, excluded))
        except QuantkitError:
            raise
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ModelError(f"{model_path}: ONNX Runtime could not quantize the model dynamically ({type(e).__name__}: {first}); run 'quantkit intake' on it") from None
        q, data = _finish(raw, note, out / MODEL_FILE, config)
    tensors = extract_scales(q, prepared, calibrator="dynamic")
    calib = {"outputs": outputs.output_summary(prepared, tensors, {}, q)}
    return _record(tensors, model_digest, sha256_bytes(data), None, config, opset_of(model), opset_of(q), "dynamic", calib)


class OrtEngine(Engine):
    """``quantize.engine: ort``: quantkit's calibration and ONNX Runtime's ``quantize_static`` (:func:`write_static`)."""

    name = "ort"
    checkpoints = True

    def write(self, job: StaticJob) -> CalibrationRecord:
        return write_static(job.model, job.model_path, job.note, job.config, RangeSource(job.calibration_set, job.checkpoint), job.out,
                            levels_floor=job.levels_floor)


class OrtDynamicEngine(Engine):
    """A :class:`DynamicQuantConfig`: ONNX Runtime's ``quantize_dynamic`` (activations quantized at run time)."""

    name = "ort-dynamic"
    calibrated = False

    def check(self, config: Any, calibration_set: Any, checkpoint: Any) -> None:
        if calibration_set is not None:
            raise UnsupportedOptionError("dynamic quantization takes no calibration set (activations are quantized at run time); "
                                         "drop --calibration-set or drop --dynamic")

    def write(self, job: StaticJob) -> CalibrationRecord:
        return _dynamic(job.model, job.model_path, job.note, job.config, job.out)


register_engine(OrtEngine())
register_engine(OrtDynamicEngine())

__all__ = ["MODEL_FILE", "RECORD_FILE", "OrtDynamicEngine", "OrtEngine", "RangeSource", "load_intake", "write_static"]

"""Binding thresholds to a quantized model: integer-domain values from its graph, and the append-only history.

The threshold set itself is :class:`quantkit.artifacts.ThresholdSet`. The integer-domain values come from the quantized model itself: the QuantizeLinear feeding the
adapter's graph output (``... -> QuantizeLinear -> DequantizeLinear -> output``); the record's entry
for that tensor, when present, must agree with the model.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .._io import atomic_write_bytes
from ..artifacts.record import CalibrationRecord
from ..artifacts.thresholds import IntegerThreshold, ThresholdSet
from ..dtypes import int_type
from ..errors import BindingMismatchError, InputFileError, ModelError, ThresholdRangeError
from ..tasks import TaskAdapter
from .integer_domain import dequantize_linear, integer_threshold

log = logging.getLogger(__name__)

QUANT_MODEL = "model_int8.onnx"


# -- integer domain from the quantized graph ---------------------------------------------------------


def output_qdq(model_path: str | os.PathLike[str], output: str = "") -> dict[str, Any] | None:
    """Scale, zero point and dtype of the QuantizeLinear feeding graph output ``output`` (first if "").

    Follows ``output <- DequantizeLinear <- QuantizeLinear``. Returns ``None`` when the output is not
    produced by a QDQ pair (e.g. dynamic quantization) or is quantized per axis.

    Raises:
        ModelError: the model cannot be read or has no such output.
    """
    from onnx import numpy_helper

    from ..modelio import load_model

    model = load_model(model_path, load_external_data=False)
    g = model.graph
    names = [o.name for o in g.output]
    name = output or (names[0] if names else "")
    if name not in names:
        raise ModelError(f"{model_path}: no graph output {name!r} (outputs: {', '.join(names)}); fix thresholds.options.output")
    producer = {o: n for n in g.node for o in n.output}
    inits = {i.name: i for i in g.initializer}
    dq = producer.get(name)
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    q = producer.get(dq.input[0])
    if q is None or q.op_type != "QuantizeLinear" or dq.input[1] not in inits:
        return None
    scale = numpy_helper.to_array(inits[dq.input[1]]).reshape(-1)
    if scale.size != 1:
        return None
    if len(dq.input) > 2 and dq.input[2] in inits:
        zp_arr = numpy_helper.to_array(inits[dq.input[2]])
        dtype, zp = str(zp_arr.dtype), int(zp_arr.reshape(-1)[0])
    else:
        dtype, zp = "uint8", 0  # ONNX default when the zero point is omitted
    return {"output": name, "quantized_input": q.input[0], "scale": float(scale[0]), "zero_point": zp, "dtype": dtype}


def integer_domain_for(task: TaskAdapter, values: Mapping[str, float], model_path: str | os.PathLike[str],
                       record: CalibrationRecord | None = None, record_path: str = "record") -> dict[str, IntegerThreshold]:
    """Integer-domain form of each threshold the task compares with a (QDQ-quantized, per-tensor) output.

    Raises:
        BindingMismatchError: the record's scale/zero point for that tensor differ from the model's.
        ThresholdRangeError: a threshold outside the tensor's representable range (:func:`check_representable`).
    """
    out = {}
    for spec in task.THRESHOLDS:
        if not (spec.on_output and spec.name in values):
            continue
        value = task.tensor_value(spec, values[spec.name])
        if value is None:
            log.info("threshold %s has no single value on its tensor (task %s); it stays float only", spec.name, task.name)
            continue
        qdq = output_qdq(model_path, task.threshold_tensor(spec))
        if qdq is None:
            log.info("%s: output of threshold %s is not QDQ-quantized per tensor; it stays float only", model_path, spec.name)
            continue
        tensor = _record_tensor(qdq, model_path, record, record_path)
        it = integer_threshold(value, tensor=tensor, scale=qdq["scale"], zero_point=qdq["zero_point"],
                               dtype=qdq["dtype"], comparison=spec.comparison, reduction=spec.reduction)  # type: ignore[arg-type]
        check_representable(spec.name, values[spec.name], it, model_path)
        out[spec.name] = it
    return out


def check_representable(name: str, value: float, it: IntegerThreshold, model_path: str | os.PathLike[str]) -> None:
    """Refuse a threshold outside the float range its tensor represents, ``[scale*(qmin-zp), scale*(qmax-zp)]``
    (the ``DequantizeLinear`` values of the type's end codes, ONNX operator spec): above it, no code passes and
    the integer decision ``q >= qmax + 1`` never fires; below it, every code passes and it always fires.

    ``name`` / ``value``: the threshold as the task states it (``score_thresh`` 0.4); ``it.float_value`` is the
    same threshold on the tensor's own scale (a logit where the task applies a sigmoid).

    Raises:
        ThresholdRangeError: one line naming the threshold, the tensor, its representable range and the fix.
    """
    t = int_type(it.dtype)
    lo, hi = (float(v) for v in dequantize_linear(np.array([t.qmin, t.qmax]), it.scale, it.zero_point))
    never = it.decision_value > t.qmax
    if not never and not it.float_value < lo:
        return
    on = f" ({it.float_value:.4g} on the tensor's scale)" if not np.isclose(it.float_value, value) else ""
    what = (f"its integer form q >= {it.decision_value} can never fire" if never
            else f"its integer form q >= {it.decision_value} fires on every value")
    widen = f"rmax: {it.float_value:.4g}" if never else f"rmin: {it.float_value:.4g}"
    raise ThresholdRangeError(
        f"{model_path}: threshold {name} {value:g}{on} is outside the float range [{lo:.4g}, {hi:.4g}] that tensor {it.tensor!r} "
        f"({it.dtype}, scale {it.scale:.4g}, zero point {it.zero_point}) represents, so {what}; set task.options.{name} inside "
        f"that range, or widen the tensor's range with quantize.tensor_overrides.{it.tensor}: {{{widen}}} and re-run quantize")


def _record_tensor(qdq: Mapping[str, Any], model_path: str | os.PathLike[str], record: CalibrationRecord | None, record_path: str) -> str:
    """The record's name for the quantized output, after checking its scale and zero point are the model's."""
    tensor = str(qdq["output"])
    if record is not None:
        entry = record.find(qdq["output"]) or record.find(qdq["quantized_input"])
        if entry is not None:
            sc = float(np.float32(entry.scale[0]))
            zp = int(entry.zero_point[0])
            if sc != float(np.float32(qdq["scale"])) or zp != qdq["zero_point"]:
                raise BindingMismatchError(
                    f"{record_path}: tensor {entry.name!r} has scale {sc:g}/zero point {zp} "
                    f"but {model_path} uses {qdq['scale']:g}/{qdq['zero_point']}; the record is not this model's, re-run 'quantkit quantize'")
            tensor = entry.name
    return tensor


# -- append-only history -----------------------------------------------------------------------------


def history_entry(ts: ThresholdSet, previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """One history line: values, integer codes, binding, and why values changed since ``previous``."""
    b = ts.binding
    entry: dict[str, Any] = {
        "threshold_fingerprint": ts.fingerprint or ts.content_fingerprint(),
        "adapter": ts.adapter,
        "values": dict(sorted(ts.values.items())),
        "fp32_values": dict(sorted(ts.fp32_values.items())),
        "integer_values": {k: v.decision_value for k, v in sorted(ts.integer_domain.items())},
        "mode": ts.operating_point.mode if ts.operating_point else "",
        "reference_set_id": ts.operating_point.reference_set.set_id if ts.operating_point else "",
        "record_fingerprint": b.record_fingerprint,
        "calibration_set_id": b.calibration_set_id,
        "calibration_set_name": b.calibration_set_name,
        "model_digest": b.model_digest,
    }
    reasons: list[str] = []
    if previous is None:
        reasons.append("first binding")
    else:
        if previous.get("calibration_set_id") != b.calibration_set_id:
            reasons.append(f"calibration set changed: {previous.get('calibration_set_name')} "
                           f"({str(previous.get('calibration_set_id'))[:12]}) -> {b.calibration_set_name} ({b.calibration_set_id[:12]})")
        if previous.get("record_fingerprint") != b.record_fingerprint:
            reasons.append(f"calibration record changed: {str(previous.get('record_fingerprint'))[:12]} -> {b.record_fingerprint[:12]}")
        if previous.get("model_digest") != b.model_digest:
            reasons.append("FP32 model changed")
        if previous.get("mode") != entry["mode"]:
            reasons.append(f"operating point mode changed: {previous.get('mode')} -> {entry['mode']}")
        if previous.get("fp32_values") != entry["fp32_values"]:
            reasons.append("FP32 thresholds changed in params")
        if previous.get("reference_set_id", entry["reference_set_id"]) != entry["reference_set_id"]:
            reasons.append(f"reference set changed: {str(previous.get('reference_set_id'))[:12]} -> {entry['reference_set_id'][:12]}")
        if previous.get("adapter") != entry["adapter"]:
            reasons.append(f"task changed: {previous.get('adapter')} -> {entry['adapter']}")
        if not reasons:
            reasons.append("re-derived with the same inputs")
    entry["changed"] = {k: [(previous or {}).get("values", {}).get(k), v] for k, v in entry["values"].items()
                        if previous is None or previous.get("values", {}).get(k) != v}
    entry["reason"] = "; ".join(reasons)
    return entry


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All entries of a history file (JSON Lines); ``[]`` when it does not exist.

    Raises:
        InputFileError: a line is not valid JSON (names the line).
    """
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                raise InputFileError(f"{p}:{i}: not a JSON line; restore the history file from git") from None
    return out


def append_history(path: str | os.PathLike[str], ts: ThresholdSet) -> dict[str, Any] | None:
    """Append one line for ``ts`` unless the last line already records the same threshold fingerprint.

    Earlier lines are never changed: the new file is the old bytes plus one line, swapped in atomically.
    Returns the entry written, or ``None`` when nothing changed (a re-run with identical inputs).
    """
    p = Path(path)
    entries = read_history(p)
    last = entries[-1] if entries else None
    fp = ts.fingerprint or ts.content_fingerprint()
    if last is not None and last.get("threshold_fingerprint") == fp:
        return None
    entry = history_entry(ts, last)
    old = p.read_bytes() if p.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    line = json.dumps(entry, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    atomic_write_bytes(p, old + line.encode("utf-8"))
    return entry

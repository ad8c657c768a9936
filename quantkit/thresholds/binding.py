"""Threshold sets bound to a calibration record, and their append-only history.

A :class:`ThresholdSet` exists only together with the calibration record it was derived for: its
``binding`` holds the FP32 model digest, the record fingerprint and the calibration-set id, and
:meth:`ThresholdSet.check_binding` refuses any other record with :class:`BindingMismatchError`.

The integer-domain values come from the quantized model itself: the QuantizeLinear feeding the
adapter's graph output (``... -> QuantizeLinear -> DequantizeLinear -> output``); the record's entry
for that tensor, when present, must agree with the model.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .._io import atomic_write_bytes, atomic_write_json, canonical_json, fingerprint, read_json, sha256_file
from ..config import Config
from ..errors import BindingMismatchError, ConfigError, InputFileError, ModelError
from .adapters import Adapter, make_adapter
from .integer_domain import IntegerThreshold, integer_threshold

log = logging.getLogger(__name__)

RECORD = "record.json"
QUANT_MODEL = "model_int8.onnx"


# -- calibration record access (thin; swaps to quantkit.quantize.record when it exists) ---------------


@dataclasses.dataclass(frozen=True, repr=False)
class RecordView:
    """The fields of a CalibrationRecord that binding needs. ``tensors``: name -> dict(dtype, scale, zero_point)."""

    path: Path
    fingerprint: str
    model_digest: str
    quantized_model_digest: str
    calibration_set: dict[str, Any]
    tensors: dict[str, dict[str, Any]]

    @property
    def set_name(self) -> str:
        return str(self.calibration_set.get("name", "?"))

    @property
    def set_id(self) -> str:
        return str(self.calibration_set.get("set_id", ""))

    def tensor(self, name: str) -> dict[str, Any] | None:
        return self.tensors.get(name)

    def __repr__(self) -> str:
        return f"RecordView({self.path}, fingerprint={self.fingerprint[:12]}, set={self.set_name})"


def load_record(path: str | os.PathLike[str]) -> RecordView:
    """Read a calibration record (``record.json`` or the quantized folder holding it) into a :class:`RecordView`.

    Raises:
        InputFileError: the record is missing, not JSON, or malformed (from ``CalibrationRecord.load``).
    """
    from ..quantize.record import CalibrationRecord

    p = Path(path)
    if p.is_dir():
        p = p / RECORD
    rec = CalibrationRecord.load(p)
    tensors = {t.name: t.to_dict() for t in rec.tensors}
    return RecordView(p, rec.fingerprint, rec.model_digest, rec.quantized_model_digest, dict(rec.calibration_set or {}), tensors)


# -- integer domain from the quantized graph ---------------------------------------------------------


def output_qdq(model_path: str | os.PathLike[str], output: str = "") -> dict[str, Any] | None:
    """Scale, zero point and dtype of the QuantizeLinear feeding graph output ``output`` (first if "").

    Follows ``output <- DequantizeLinear <- QuantizeLinear``. Returns ``None`` when the output is not
    produced by a QDQ pair (e.g. dynamic quantization) or is quantized per axis.

    Raises:
        ModelError: the model cannot be read or has no such output.
    """
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError/OSError
        raise ModelError(f"{model_path}: cannot read the ONNX model ({type(e).__name__}); re-run 'quantkit quantize'") from None
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


def integer_domain_for(adapter: Adapter, values: Mapping[str, float], model_path: str | os.PathLike[str],
                       record: RecordView | None = None) -> dict[str, IntegerThreshold]:
    """Integer-domain form of each threshold that applies to the adapter's (QDQ-quantized) output.

    Raises:
        BindingMismatchError: the record's scale/zero point for that tensor differ from the model's.
    """
    qdq = output_qdq(model_path, adapter.output)
    if qdq is None:
        log.info("%s: output is not QDQ-quantized per tensor; thresholds stay float only", model_path)
        return {}
    tensor = qdq["output"]
    if record is not None:
        entry = record.tensor(qdq["output"]) or record.tensor(qdq["quantized_input"])
        if entry is not None:
            sc = float(np.float32(np.ravel(entry["scale"])[0]))
            zp = int(np.ravel(entry["zero_point"])[0])
            if sc != float(np.float32(qdq["scale"])) or zp != qdq["zero_point"]:
                raise BindingMismatchError(
                    f"{record.path}: tensor {entry['name'] if 'name' in entry else tensor!r} has scale {sc:g}/zero point {zp} "
                    f"but {model_path} uses {qdq['scale']:g}/{qdq['zero_point']}; the record is not this model's, re-run 'quantkit quantize'")
            tensor = str(entry.get("name", tensor))
    out = {}
    for spec in adapter.THRESHOLDS:
        if spec.on_output and spec.name in values:
            out[spec.name] = integer_threshold(values[spec.name], tensor=tensor, scale=qdq["scale"], zero_point=qdq["zero_point"],
                                               dtype=qdq["dtype"], comparison=spec.comparison, reduction=spec.reduction)  # type: ignore[arg-type]
    return out


# -- the threshold set ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Binding(Config):
    """What a threshold set is bound to: FP32 model digest, record fingerprint, calibration set id/name,
    and the digest of the quantized model file."""

    model_digest: str = ""
    record_fingerprint: str = ""
    calibration_set_id: str = ""
    calibration_set_name: str = ""
    quantized_model_digest: str = ""


@dataclasses.dataclass(frozen=True, repr=False)
class ThresholdSet(Config):
    """Thresholds for one quantized model, bound to its calibration record (docs/ARCHITECTURE.md).

    ``values``: deployed float thresholds for this model; ``fp32_values``: those of the FP32 model;
    ``options``: the adapter's other settings; ``integer_domain``: name -> :class:`IntegerThreshold`
    dict; ``operating_point``: how ``values`` were chosen and what they achieve (see
    :mod:`quantkit.thresholds.operating_point`); ``fingerprint``: SHA-256 of everything else.
    """

    adapter: str = "db_text"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    values: dict[str, float] = dataclasses.field(default_factory=dict)
    fp32_values: dict[str, float] = dataclasses.field(default_factory=dict)
    integer_domain: dict[str, Any] = dataclasses.field(default_factory=dict)
    binding: Binding = dataclasses.field(default_factory=Binding)
    operating_point: dict[str, Any] = dataclasses.field(default_factory=dict)
    fingerprint: str = ""

    def validate(self) -> None:
        for name, entry in self.integer_domain.items():
            IntegerThreshold.from_dict(entry)
            if name not in self.values:
                raise ConfigError(f"threshold set: integer_domain.{name} has no float value in values")

    def content_fingerprint(self) -> str:
        d = self.to_dict()
        d.pop("fingerprint")
        return fingerprint(d)

    def sealed(self) -> "ThresholdSet":
        """Copy with ``fingerprint`` set to :meth:`content_fingerprint`."""
        return dataclasses.replace(self, fingerprint=self.content_fingerprint())

    def make_adapter(self, *, fp32: bool = False) -> Adapter:
        """The adapter at this set's thresholds (``fp32=True``: at the FP32 thresholds)."""
        return make_adapter(self.adapter, {**self.options, **(self.fp32_values if fp32 else self.values)})

    def integer(self, name: str) -> IntegerThreshold:
        return IntegerThreshold.from_dict(self.integer_domain[name])

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write canonical JSON atomically (sealing the fingerprint first)."""
        return atomic_write_json(path, self.sealed().to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "ThresholdSet":
        """Read and verify a threshold set file.

        Raises:
            InputFileError: missing, not JSON, or its fingerprint does not match its content (edited by hand).
            ConfigError: a field is unknown or mistyped.
        """
        data = read_json(path, "threshold set")
        try:
            ts = cls.from_dict(data, where=f"{path}: threshold set")
        except ConfigError as e:  # name the file once: field errors already start with it, validate() errors do not
            msg = str(e)
            raise ConfigError(msg if msg.startswith(f"{path}: ") else f"{path}: {msg}") from None
        if ts.fingerprint != ts.content_fingerprint():
            raise InputFileError(f"{path}: fingerprint does not match the content (edited by hand?); re-derive it with 'quantkit bind'")
        return ts

    def check_binding(self, record: RecordView | str | os.PathLike[str], *, model_path: str | os.PathLike[str] | None = None,
                      source: str = "threshold set") -> None:
        """Refuse a record (and optionally a quantized model file) this set was not derived for.

        Raises:
            BindingMismatchError: record fingerprint, model digest or calibration set differ, or the
                model file's SHA-256 differs from the bound ``quantized_model_digest``. The message names
                the calibration the set was derived for and the ``quantkit bind`` command that re-derives it.
        """
        rec = record if isinstance(record, RecordView) else load_record(record)
        b = self.binding
        folder = rec.path.parent
        how = (f"re-derive with: quantkit bind {folder} --fp32 work/intake --reference REFERENCE_SET "
               f"--params params.yaml --out THRESHOLDS.json")
        ours = f"calibration '{b.calibration_set_name}' (set {b.calibration_set_id[:12]}, record {b.record_fingerprint[:12]})"
        theirs = f"calibration '{rec.set_name}' (set {rec.set_id[:12]}, record {rec.fingerprint[:12]})"
        if b.record_fingerprint != rec.fingerprint or b.calibration_set_id != rec.set_id or b.model_digest != rec.model_digest:
            raise BindingMismatchError(f"{source} was derived for {ours} but {rec.path} is {theirs}; {how}")
        if model_path is not None and b.quantized_model_digest:
            digest = sha256_file(model_path)
            if digest != b.quantized_model_digest:
                raise BindingMismatchError(f"{source} was derived for {ours} but {model_path} has digest {digest[:12]} "
                                           f"(expected {b.quantized_model_digest[:12]}); {how}")

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v:g}" for k, v in sorted(self.values.items()))
        return (f"ThresholdSet({self.adapter}, {vals}, set={self.binding.calibration_set_name!r}, "
                f"record={self.binding.record_fingerprint[:12]})")


def load_threshold_set(path: str | os.PathLike[str], record: RecordView | str | os.PathLike[str] | None = None,
                       *, model_path: str | os.PathLike[str] | None = None) -> ThresholdSet:
    """Load a threshold set; with ``record`` (a RecordView, record.json or quantized folder) check its binding.

    Raises:
        InputFileError, ConfigError: see :meth:`ThresholdSet.load`.
        BindingMismatchError: see :meth:`ThresholdSet.check_binding`.
    """
    ts = ThresholdSet.load(path)
    if record is not None:
        ts.check_binding(record, model_path=model_path, source=str(path))
    return ts


# -- append-only history -----------------------------------------------------------------------------


def history_entry(ts: ThresholdSet, previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """One history line: values, integer codes, binding, and why values changed since ``previous``."""
    b = ts.binding
    entry: dict[str, Any] = {
        "threshold_fingerprint": ts.fingerprint or ts.content_fingerprint(),
        "adapter": ts.adapter,
        "values": dict(sorted(ts.values.items())),
        "fp32_values": dict(sorted(ts.fp32_values.items())),
        "integer_values": {k: v["decision_value"] for k, v in sorted(ts.integer_domain.items())},
        "mode": ts.operating_point.get("mode", ""),
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

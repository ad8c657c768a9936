"""The calibration record: every quantized tensor's scale and zero point, and where they came from.

``record.json`` (schema in ``docs/ARCHITECTURE.md``) is canonical JSON. Scales are float32 values
stored as Python floats (exact: every float32 is a float64), zero points as integers. The
``fingerprint`` is SHA-256 over the tensors table, the float model digest, the calibration set id and
the config hash (:func:`quantkit._io.fingerprint`), so a threshold set or bundle can prove which
calibration it was derived for.

Scales are read from the quantized model itself, not from the calibrator: ONNX Runtime names every
quantization parameter ``<tensor>_scale`` / ``<tensor>_zero_point`` (biases: ``<bias>_quantized_scale``),
used by QuantizeLinear/DequantizeLinear (QDQ), QLinear* (QOperator) and ConvInteger/MatMulInteger
(dynamic) nodes alike, so one reader covers all three formats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_json, fingerprint, read_json
from ..errors import InputFileError

SCHEMA_VERSION = 1

_DTYPES = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 21: "uint4", 22: "int4"}
#: (qmin, qmax) per integer type name (ONNX QuantizeLinear saturation ranges).
QRANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
          "uint4": (0, 15), "int4": (-8, 7), "int32": (-(2**31), 2**31 - 1)}


@dataclasses.dataclass(frozen=True)
class TensorScale:
    """Quantization parameters of one tensor.

    ``role``: ``activation`` | ``weight`` | ``bias``. ``dtype``: integer type name. ``axis``: channel axis
    of per-channel parameters or None. ``scale`` / ``zero_point``: one entry per channel (or one).
    ``range_min`` / ``range_max``: the calibrated float range for activations, the float value range
    for weights/biases (None where unknown). ``calibrator``: method name, ``"weights"`` or ``"dynamic"``.
    The represented float range of channel c is ``[(qmin - zp[c]) * s[c], (qmax - zp[c]) * s[c]]``.
    """

    name: str
    role: str
    dtype: str
    axis: int | None
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    range_min: float | None = None
    range_max: float | None = None
    calibrator: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["scale"], d["zero_point"] = list(self.scale), list(self.zero_point)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorScale:
        return cls(name=d["name"], role=d["role"], dtype=d["dtype"], axis=d.get("axis"), scale=tuple(float(s) for s in d["scale"]),
                   zero_point=tuple(int(z) for z in d["zero_point"]), range_min=d.get("range_min"), range_max=d.get("range_max"),
                   calibrator=d.get("calibrator", ""))

    def representable(self) -> tuple[np.ndarray, np.ndarray]:
        """Float ``(lo, hi)`` arrays (one per channel) the integer type can represent."""
        qmin, qmax = QRANGE[self.dtype]
        s = np.asarray(self.scale, np.float64)
        z = np.asarray(self.zero_point, np.float64)
        return (qmin - z) * s, (qmax - z) * s

    def __repr__(self) -> str:
        s = f"{self.scale[0]:.4g}" if len(self.scale) == 1 else f"[{len(self.scale)} ch]"
        return f"TensorScale({self.name!r}, {self.role}, {self.dtype}, scale={s}, zp={self.zero_point[0] if len(self.zero_point) == 1 else '...'})"


@dataclasses.dataclass(frozen=True)
class CalibrationRecord:
    """The ``record.json`` artifact. Build with :func:`quantkit.quantize.quantize`; read with :meth:`load`.

    Beyond the contract's fields: ``mode`` (static | dynamic), ``calibration`` (images, chunks, resumed
    batches) and ``calibrated_ranges`` (``{tensor: [min, max]}`` for every tensor the calibrator saw,
    quantized or not: ORT's QDQ quantizer also reads ranges of tensors it then folds, e.g. the input of a
    removed Clip, so replay needs them all).
    """

    fingerprint: str
    model_digest: str
    quantized_model_digest: str
    calibration_set: dict[str, Any] | None
    config: dict[str, Any]
    config_hash: str
    opset_before: int
    opset_after: int
    versions: dict[str, str]
    tensors: tuple[TensorScale, ...]
    mode: str = "static"
    calibration: dict[str, Any] = dataclasses.field(default_factory=dict)
    calibrated_ranges: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @staticmethod
    def compute_fingerprint(tensors: Sequence[TensorScale], model_digest: str, set_id: str | None, config_hash: str) -> str:
        """SHA-256 over the tensors table, model digest, calibration set id and config hash."""
        return fingerprint({"tensors": [t.to_dict() for t in tensors], "model_digest": model_digest,
                            "calibration_set_id": set_id, "config_hash": config_hash})

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["tensors"] = [t.to_dict() for t in self.tensors]
        return d

    def save(self, path: str | Path) -> Path:
        """Write canonical JSON atomically."""
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> CalibrationRecord:
        """Read ``record.json`` (or a folder holding one).

        Raises:
            InputFileError: missing, malformed, wrong schema version, or tampered (fingerprint mismatch).
        """
        p = Path(path)
        if p.is_dir():
            p = p / "record.json"
        d = read_json(p, "calibration record")
        try:
            if d.get("schema_version") != SCHEMA_VERSION:
                raise InputFileError(f"{p}: schema_version {d.get('schema_version')} is not {SCHEMA_VERSION}; re-run 'quantkit quantize'")
            tensors = tuple(TensorScale.from_dict(t) for t in d["tensors"])
            rec = cls(fingerprint=d["fingerprint"], model_digest=d["model_digest"], quantized_model_digest=d["quantized_model_digest"],
                      calibration_set=d.get("calibration_set"), config=d["config"], config_hash=d["config_hash"],
                      opset_before=int(d["opset_before"]), opset_after=int(d["opset_after"]), versions=dict(d["versions"]),
                      tensors=tensors, mode=d.get("mode", "static"), calibration=d.get("calibration", {}),
                      calibrated_ranges={k: [float(v[0]), float(v[1])] for k, v in d.get("calibrated_ranges", {}).items()})
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise InputFileError(f"{p}: malformed calibration record (field {e}); re-run 'quantkit quantize'") from None
        set_id = (rec.calibration_set or {}).get("set_id")
        if cls.compute_fingerprint(rec.tensors, rec.model_digest, set_id, rec.config_hash) != rec.fingerprint:
            raise InputFileError(f"{p}: fingerprint does not match the tensors table (edited by hand?); re-run 'quantkit quantize'")
        return rec

    def tensor(self, name: str) -> TensorScale:
        """The entry for ``name``. Raises KeyError naming the tensor."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"tensor {name!r} is not quantized in this record")

    def table(self) -> Any:
        """A pandas DataFrame, one row per tensor: name, role, dtype, axis, channels, scale (first or
        only; float units per step), scale_min/scale_max over channels, zero_point (first), range_min/max,
        calibrator."""
        import pandas as pd

        rows = [{"name": t.name, "role": t.role, "dtype": t.dtype, "axis": t.axis, "channels": len(t.scale),
                 "scale": t.scale[0], "scale_min": min(t.scale), "scale_max": max(t.scale), "zero_point": t.zero_point[0],
                 "range_min": t.range_min, "range_max": t.range_max, "calibrator": t.calibrator} for t in self.tensors]
        return pd.DataFrame(rows, columns=["name", "role", "dtype", "axis", "channels", "scale", "scale_min", "scale_max",
                                           "zero_point", "range_min", "range_max", "calibrator"])

    def __repr__(self) -> str:
        cs = (self.calibration_set or {}).get("name")
        return f"CalibrationRecord({self.mode}, {len(self.tensors)} tensors, set={cs!r}, fingerprint={self.fingerprint[:12]})"


def scale_diff(a: CalibrationRecord, b: CalibrationRecord) -> Any:
    """Rank tensors by how much their scale moved from record ``a`` to record ``b``.

    ``rel_change = max over channels |s_b - s_a| / s_a`` (dimensionless); ``log2_ratio`` of the first
    channel's scales shows the direction (+1 = doubled). Tensors in only one record are listed with
    ``status`` ``only_a`` / ``only_b`` and NaN changes; zero points are compared too (``zp_changed``).

    Returns:
        DataFrame sorted by ``rel_change`` descending (NaN last): name, role, scale_a, scale_b,
        rel_change, log2_ratio, zp_a, zp_b, zp_changed, status.
    """
    import pandas as pd

    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    rows = []
    for name in sorted(set(ta) | set(tb)):
        x, y = ta.get(name), tb.get(name)
        if x is None or y is None:
            t = x if x is not None else y
            assert t is not None
            rows.append({"name": name, "role": t.role, "scale_a": x.scale[0] if x else np.nan, "scale_b": y.scale[0] if y else np.nan,
                         "rel_change": np.nan, "log2_ratio": np.nan, "zp_a": x.zero_point[0] if x else None,
                         "zp_b": y.zero_point[0] if y else None, "zp_changed": None, "status": "only_a" if x else "only_b"})
            continue
        sa, sb = np.asarray(x.scale, np.float64), np.asarray(y.scale, np.float64)
        if sa.shape != sb.shape:
            rel = np.nan
            status = "shape_changed"
        else:
            rel = float(np.max(np.abs(sb - sa) / np.maximum(sa, np.finfo(np.float32).tiny)))
            status = "both"
        rows.append({"name": name, "role": x.role, "scale_a": float(sa[0]), "scale_b": float(sb[0]), "rel_change": rel,
                     "log2_ratio": float(np.log2(sb[0] / sa[0])) if sa[0] > 0 and sb[0] > 0 else np.nan,
                     "zp_a": x.zero_point[0], "zp_b": y.zero_point[0], "zp_changed": x.zero_point != y.zero_point, "status": status})
    df = pd.DataFrame(rows, columns=["name", "role", "scale_a", "scale_b", "rel_change", "log2_ratio", "zp_a", "zp_b", "zp_changed", "status"])
    return df.sort_values("rel_change", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def extract_scales(qmodel: Any, fp32_model: Any, *, ranges: Any = None, calibrator: str = "") -> tuple[TensorScale, ...]:
    """Read every quantized tensor's parameters from a quantized ``onnx.ModelProto``.

    Args:
        qmodel: the model ORT wrote (QDQ, QOperator or dynamic).
        fp32_model: the float model it came from (to tell weights from activations and read weight ranges).
        ranges: ORT ``TensorsData`` from calibration (activation ``range_min/max``), or None.
        calibrator: method name written into activation rows.

    Returns:
        Tensors sorted by name.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in qmodel.graph.initializer}
    fp_inits = {i.name: i for i in fp32_model.graph.initializer}
    axis_of: dict[str, int] = {}
    for n in qmodel.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) >= 2:
            for a in n.attribute:
                if a.name == "axis":
                    axis_of[n.input[1]] = int(a.i)
        if n.op_type == "QLinearConv" and len(n.input) >= 5:
            axis_of.setdefault(n.input[4], 0)
    out = []
    for sname in sorted(inits):
        if not sname.endswith("_scale"):
            continue
        base = sname[: -len("_scale")]
        zname = base + "_zero_point"
        if zname not in inits:
            continue
        scale = numpy_helper.to_array(inits[sname]).astype(np.float32).reshape(-1)
        zp_init = inits[zname]
        zp = numpy_helper.to_array(zp_init).reshape(-1)
        dtype = _DTYPES.get(zp_init.data_type, str(zp_init.data_type))
        name = base[: -len("_quantized")] if base.endswith("_quantized") and base[: -len("_quantized")] in fp_inits else base
        rmin = rmax = None
        if name in fp_inits:
            w = numpy_helper.to_array(fp_inits[name])
            role = "bias" if dtype == "int32" else "weight"
            rmin, rmax = (float(w.min()), float(w.max())) if w.size else (None, None)
            cal = "weights"
        else:
            role = "activation"
            cal = calibrator
            if ranges is not None and name in ranges:
                lo, hi = ranges[name].range_value
                rmin, rmax = float(np.min(lo)), float(np.max(hi))
        axis = axis_of.get(sname) if scale.size > 1 else None
        out.append(TensorScale(name=name, role=role, dtype=dtype, axis=axis, scale=tuple(float(s) for s in scale),
                               zero_point=tuple(int(z) for z in zp), range_min=rmin, range_max=rmax, calibrator=cal))
    return tuple(sorted(out, key=lambda t: t.name))

"""The calibration record (``record.json``): every quantized tensor's scale and zero point, and their origin.

Scales are float32 values stored as Python floats (exact: every float32 is a float64), zero points as
integers. ``fingerprint`` is SHA-256 over the tensors table, the float model digest, the calibration set
id and the config hash (:meth:`CalibrationRecord.compute_fingerprint`), so a threshold set or bundle can
prove which calibration it was derived for. Written by ``quantkit quantize`` / ``fallback`` / ``record
replay``; read by bind, evaluate, drift, report, bundle and verify.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .._io import fingerprint, sha256_file
from ..config import Config
from ..dtypes import int_type
from ..errors import BindingMismatchError, InputFileError
from .base import Artifact


@dataclasses.dataclass(frozen=True)
class SetRef(Config):
    """Which image set an artifact was derived from: folder as given, content id, name and metadata."""

    VERSIONED: ClassVar[bool] = False

    path: str = ""
    set_id: str = ""
    name: str = ""
    camera: str = ""
    lighting: str = ""
    count: int = 0


@dataclasses.dataclass(frozen=True)
class TensorScale(Config):
    """Quantization parameters of one tensor.

    ``role``: ``activation`` | ``weight`` | ``bias``. ``dtype``: integer type name
    (:data:`quantkit.dtypes.INT_TYPES`). ``axis``: channel axis of per-channel parameters or None.
    ``scale`` / ``zero_point``: one entry per channel (or one). ``range_min`` / ``range_max``: the
    calibrated float range for activations, the float value range for weights/biases (None where
    unknown). ``calibrator``: method name, ``"weights"`` or ``"dynamic"``. The represented float range of
    channel c is ``[(qmin - zp[c]) * s[c], (qmax - zp[c]) * s[c]]``.
    """

    VERSIONED: ClassVar[bool] = False

    name: str
    role: str
    dtype: str
    axis: int | None
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    range_min: float | None = None
    range_max: float | None = None
    calibrator: str = ""

    def representable(self) -> tuple[np.ndarray, np.ndarray]:
        """Float ``(lo, hi)`` arrays (one per channel, float64) the integer type can represent."""
        t = int_type(self.dtype)
        s = np.asarray(self.scale, np.float64)
        z = np.asarray(self.zero_point, np.float64)
        return (t.qmin - z) * s, (t.qmax - z) * s

    def __repr__(self) -> str:
        s = f"{self.scale[0]:.4g}" if len(self.scale) == 1 else f"[{len(self.scale)} ch]"
        return f"TensorScale({self.name!r}, {self.role}, {self.dtype}, scale={s}, zp={self.zero_point[0] if len(self.zero_point) == 1 else '...'})"


@dataclasses.dataclass(frozen=True)
class CalibrationRecord(Artifact):
    """The ``record.json`` artifact. Build with :func:`quantkit.quantize.quantize`; read with :meth:`load`.

    Beyond the scales: ``mode`` (static | dynamic), ``calibration`` (images, batches, chunks, and
    what the engine noticed) and ``calibrated_ranges`` (``{tensor: [min, max]}`` for every tensor the
    calibrator saw, quantized or not: ORT's QDQ quantizer also reads ranges of tensors it then folds, e.g.
    the input of a removed Clip, so replay needs them all).
    """

    KIND: ClassVar[str] = "calibration record"
    FILENAME: ClassVar[str] = "record.json"
    PRODUCER: ClassVar[str] = "quantkit quantize"

    fingerprint: str
    model_digest: str
    quantized_model_digest: str
    calibration_set: SetRef | None
    config: dict[str, Any]
    config_hash: str = dataclasses.field()  # field() shadows Config.config_hash(): no default
    opset_before: int
    opset_after: int
    versions: dict[str, str]
    tensors: tuple[TensorScale, ...]
    mode: str = "static"
    calibration: dict[str, Any] = dataclasses.field(default_factory=dict)
    calibrated_ranges: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    @staticmethod
    def compute_fingerprint(tensors: Sequence[TensorScale], model_digest: str, set_id: str | None, config_hash: str) -> str:
        """SHA-256 over the tensors table, model digest, calibration set id and config hash."""
        return fingerprint({"tensors": [t.to_dict() for t in tensors], "model_digest": model_digest,
                            "calibration_set_id": set_id, "config_hash": config_hash})

    @property
    def set_id(self) -> str | None:
        """Content id of the calibration set (None for dynamic quantization)."""
        return self.calibration_set.set_id if self.calibration_set else None

    @property
    def set_name(self) -> str:
        """Name of the calibration set, or ``dynamic (no calibration set)``."""
        return self.calibration_set.name if self.calibration_set else f"{self.mode} (no calibration set)"

    def check_quantized_from(self, model_path: str | Path, record_path: str | Path, *, digest: str | None = None, flag: str = "--fp32") -> None:
        """Refuse ``model_path`` (an FP32 ``.onnx``; ``digest``: its SHA-256 when already computed) as the model this
        record was quantized from unless its SHA-256 is the record's ``model_digest``.

        Raises:
            BindingMismatchError: another file (one line naming both digests and the fix, ``flag`` the option to pass).
        """
        if (digest := digest or sha256_file(model_path)) != self.model_digest:
            raise BindingMismatchError(f"{model_path}: sha256 {digest[:12]} is not the model {record_path} was quantized from "
                                       f"({self.model_digest[:12]}); pass that model's own intake folder" + (f" as {flag}" if flag else ""))

    def check_calibrated_on(self, cset: Any, record_path: str | Path) -> None:
        """Refuse ``cset`` (a :class:`~quantkit.calibset.CalibrationSet`) as this record's calibration set unless its
        content id is the one the record was calibrated on (a dynamic record has none: any set passes).

        Raises:
            BindingMismatchError: another set (one line naming both and the fix).
        """
        if self.calibration_set is not None and self.calibration_set.set_id != cset.set_id:
            raise BindingMismatchError(f"{cset.root}: set {cset.name} ({cset.set_id[:12]}) is not the set {record_path} was calibrated on "
                                       f"({self.calibration_set.name}, {self.calibration_set.set_id[:12]}); pass that set as --calibration-set")

    def sealed(self) -> "CalibrationRecord":
        """Copy with the fingerprint recomputed from the tensors, model digest, set id and config hash."""
        return dataclasses.replace(self, fingerprint=self.compute_fingerprint(self.tensors, self.model_digest, self.set_id, self.config_hash))

    def check(self, path: Path) -> None:
        if self.compute_fingerprint(self.tensors, self.model_digest, self.set_id, self.config_hash) != self.fingerprint:
            raise InputFileError(f"{path}: fingerprint does not match the tensors table (edited by hand?); re-run 'quantkit quantize'")

    @classmethod
    def is_sealed(cls) -> bool:
        return False  # the fingerprint is over the scales, not the whole file (see compute_fingerprint)

    def tensor(self, name: str) -> TensorScale:
        """The entry for ``name``. Raises KeyError naming the tensor."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"tensor {name!r} is not quantized in this record")

    def find(self, name: str) -> TensorScale | None:
        """The entry for ``name``, or None."""
        return next((t for t in self.tensors if t.name == name), None)

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
        return f"CalibrationRecord({self.mode}, {len(self.tensors)} tensors, set={self.set_name!r}, fingerprint={self.fingerprint[:12]})"


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
            t = x or y
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

"""The threshold set (``thresholds.json``): a task's thresholds for one quantized model, bound to its record.

A :class:`ThresholdSet` exists only together with the calibration record it was derived for: ``binding``
holds the FP32 model digest, the record fingerprint, the calibration-set id and the quantized model's
digest, and :meth:`ThresholdSet.check_binding` refuses anything else with
:class:`quantkit.errors.BindingMismatchError` (exit 3). ``integer_domain`` holds, per threshold that is
compared with a quantized tensor, its :class:`IntegerThreshold` (the rule is in
:mod:`quantkit.thresholds.integer_domain`). Written by ``quantkit bind``; read by evaluate, report,
bundle and verify.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .._io import fingerprint, sha256_file
from ..config import Config
from ..errors import BindingMismatchError, ConfigError, InputFileError
from .base import Artifact
from .record import CalibrationRecord, SetRef

ROUNDING_RULE = (
    "value = clamp(round_half_to_even(t / scale) + zero_point, qmin, qmax) (ONNX QuantizeLinear); "
    "decide with q >= decision_value, the smallest code q whose float32 (q - zero_point) * scale "
    "passes the comparison (ONNX DequantizeLinear)"
)


@dataclasses.dataclass(frozen=True)
class IntegerThreshold(Config):
    """A float threshold expressed in a quantized tensor's integer domain.

    Fields: ``tensor`` (name of the quantized tensor the threshold applies to), ``dtype``
    (``uint8|int8|uint16|int16``), ``scale`` (float, per-tensor), ``zero_point`` (int), ``float_value``
    (the float threshold), ``comparison`` (``>`` or ``>=`` on dequantized values), ``reduction``
    (``none``: compared per element; ``mean``: compared on a region mean), ``value``
    (QuantizeLinear code), ``decision_value`` (smallest code whose dequantized value passes),
    ``mean_code_threshold`` (``t / scale + zero_point``), ``rounding`` (the rule, in words).
    """

    VERSIONED: ClassVar[bool] = False

    tensor: str
    dtype: str
    scale: float
    zero_point: int
    float_value: float
    comparison: str
    reduction: str
    value: int
    decision_value: int
    mean_code_threshold: float
    rounding: str = ROUNDING_RULE

    def decide(self, codes: np.ndarray) -> np.ndarray:
        """Apply the decision to integer codes (element-wise): ``codes >= decision_value`` (bool array)."""
        return np.asarray(codes) >= self.decision_value

    def __repr__(self) -> str:
        return (f"IntegerThreshold({self.tensor!r}, x{self.comparison}{self.float_value} <=> q>={self.decision_value} "
                f"[{self.dtype}, scale={self.scale:.6g}, zp={self.zero_point}])")


NEAR_LINE_STEPS = 8
"""How many integer steps from the line :class:`NearLineCounts` counts (``within[0]`` .. ``within[7]``): the largest
``thresholds.near_line_steps`` a report can ask for."""


@dataclasses.dataclass(frozen=True)
class NearLineCounts(Config):
    """How close FP32's decisions on a set of images lie to one bound threshold, in integer steps.

    A decision is one item the task's primary threshold keeps or drops (:meth:`quantkit.tasks.TaskAdapter.near_line_values`:
    a text region's mean probability, a box's score, a class's probability), with its value on the scale of the tensor
    the threshold's integer form compares against. One integer step is that tensor's ``scale``: ONNX
    ``DequantizeLinear`` gives ``(q - zero_point) * scale``, so neighbouring codes lie ``scale`` apart in the tensor's own
    float units (https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html). A decision whose value lies within one
    step of the line can flip when its code moves by one, which a small change of the input or the calibration does.

    Fields: ``threshold`` (the threshold's name, the task's ``PRIMARY``), ``step`` (the tensor's scale, float units of
    the tensor), ``line`` (the threshold on the tensor's scale, :attr:`IntegerThreshold.float_value`), ``decisions``
    (how many FP32 decisions were counted) and ``within``: ``within[i]`` decisions with ``|value - line| <= (i + 1) *
    step``, for ``i`` in ``0 .. NEAR_LINE_STEPS - 1`` (non-decreasing, each ``<= decisions``).
    """

    VERSIONED: ClassVar[bool] = False

    threshold: str
    step: float
    line: float
    decisions: int
    within: tuple[int, ...]

    def validate(self) -> None:
        if not (self.step > 0 and np.isfinite(self.step)):
            raise ConfigError(f"near_line.step: {self.step} must be a positive finite scale")
        w = list(self.within)
        if len(w) != NEAR_LINE_STEPS or any(b < a for a, b in itertools.pairwise(w)) or (w and (w[0] < 0 or w[-1] > self.decisions)):
            raise ConfigError(f"near_line.within: {w} must hold {NEAR_LINE_STEPS} non-decreasing counts between 0 and "
                              f"decisions ({self.decisions})")

    def share(self, k: int = 1) -> float:
        """Share (0..1) of the decisions within ``k`` integer steps of the line; 0.0 when there were none.

        Raises:
            ConfigError: ``k`` outside ``1 .. NEAR_LINE_STEPS``.
        """
        if not 1 <= k <= NEAR_LINE_STEPS:
            raise ConfigError(f"near-line steps {k} must be in 1..{NEAR_LINE_STEPS}")
        return self.within[k - 1] / self.decisions if self.decisions else 0.0

    def __repr__(self) -> str:
        return f"NearLineCounts({self.threshold}, {self.within[0]}/{self.decisions} within 1 step of {self.line:.4g} (step {self.step:.4g}))"


@dataclasses.dataclass(frozen=True)
class Binding(Config):
    """What a threshold set is bound to: FP32 model digest, record fingerprint, calibration set id/name,
    and the digest of the quantized model file."""

    model_digest: str = ""
    record_fingerprint: str = ""
    calibration_set_id: str = ""
    calibration_set_name: str = ""
    quantized_model_digest: str = ""

    @classmethod
    def of(cls, record: CalibrationRecord, quantized_model_digest: str) -> "Binding":
        """The binding to ``record`` and the quantized model file with digest ``quantized_model_digest``."""
        return cls(model_digest=record.model_digest, record_fingerprint=record.fingerprint,
                   calibration_set_id=record.set_id or "", calibration_set_name=record.set_name,
                   quantized_model_digest=quantized_model_digest)

    def describe(self) -> str:
        """``calibration 'NAME' (set ID12, record FP12)``."""
        return f"calibration '{self.calibration_set_name}' (set {self.calibration_set_id[:12]}, record {self.record_fingerprint[:12]})"


@dataclasses.dataclass(frozen=True)
class Estimate(Config):
    """A metric pooled over a set (ratio of sums over images) with its confidence interval
    (:func:`quantkit.thresholds.stats.bootstrap_ratio`: Clopper-Pearson for proportions of images, else a BCa
    bootstrap over images): ``value``, ``ci`` = (low, high) at the set's confidence, ``n`` images."""

    VERSIONED: ClassVar[bool] = False

    value: float
    ci: tuple[float, float]
    n: int

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.ci[0]:.3f}, {self.ci[1]:.3f}]"


@dataclasses.dataclass(frozen=True)
class Significance(Config):
    """Whether a search moved a threshold away from FP32's: ``best`` candidate, its in-sample ``gain`` in the
    objective over FP32's value, ``gain_ci`` the out-of-bag bootstrap interval of the search's gain on images it
    did not see (:func:`quantkit.thresholds.stats.pick_significant`), and ``moved`` (that interval above zero)."""

    VERSIONED: ClassVar[bool] = False

    best: float
    gain: float
    gain_ci: tuple[float, float]
    moved: bool


@dataclasses.dataclass(frozen=True)
class SearchRecord(Config):
    """One threshold's search: number of ``candidates`` on the grid over ``range``, the ``objective`` (metric
    name or rule in words) and, for objective searches, the :class:`Significance` of moving."""

    VERSIONED: ClassVar[bool] = False

    candidates: int
    range: tuple[float, float]
    objective: str
    significance: Significance | None = None


@dataclasses.dataclass(frozen=True)
class Bootstrap(Config):
    """How confidence intervals were computed."""

    VERSIONED: ClassVar[bool] = False

    method: str
    resamples: int
    seed: int
    confidence: float


@dataclasses.dataclass(frozen=True)
class OperatingPoint(Config):
    """How a threshold set's values were chosen and what they achieve on the reference set.

    ``thresholds``: values by label (``chosen``, ``fp32_thresholds``, ``previous_thresholds`` when a previous
    calibration's thresholds exist); ``agreement`` / ``accuracy``: label -> metric name -> :class:`Estimate`
    (agreement with FP32's decisions; accuracy against ground truth where the set is labelled);
    ``false_alarm_rate``: label -> share of images with at least one item (mode ``fixed_far``);
    ``primary_metric``: the task's primary agreement metric, the one ``min_agreement`` applies to.
    """

    VERSIONED: ClassVar[bool] = False

    mode: str
    images: int
    grid_step: float
    primary_metric: str
    bootstrap: Bootstrap
    reference_set: SetRef
    search: dict[str, SearchRecord] = dataclasses.field(default_factory=dict)
    thresholds: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    agreement: dict[str, dict[str, Estimate]] = dataclasses.field(default_factory=dict)
    accuracy: dict[str, dict[str, Estimate]] = dataclasses.field(default_factory=dict)
    false_alarm_rate: dict[str, Estimate] = dataclasses.field(default_factory=dict)

    def primary(self, label: str = "chosen") -> Estimate | None:
        """The primary agreement metric at the ``label`` thresholds (None when not measured)."""
        return self.agreement.get(label, {}).get(self.primary_metric)


@dataclasses.dataclass(frozen=True, repr=False)
class ThresholdSet(Artifact):
    """Thresholds for one quantized model, bound to its calibration record (docs/ARCHITECTURE.md).

    ``values``: deployed float thresholds for this model; ``fp32_values``: those of the FP32 model;
    ``options``: the adapter's other settings; ``integer_domain``: name -> :class:`IntegerThreshold`;
    ``operating_point``: how ``values`` were chosen and what they achieve (see
    :mod:`quantkit.thresholds.operating_point`); ``near_line``: how close FP32's decisions on the reference set lie to
    the primary threshold, in integer steps (:class:`NearLineCounts`; the calibration-side baseline of "decisions near
    the line"; None when the primary threshold has no integer form, or in a set bound before quantkit counted it:
    re-run ``quantkit bind``); ``fingerprint``: SHA-256 of everything else.
    """

    SCHEMA_VERSION: ClassVar[int] = 2
    KIND: ClassVar[str] = "threshold set"
    FILENAME: ClassVar[str] = "thresholds.json"
    PRODUCER: ClassVar[str] = "quantkit bind"

    adapter: str = "db_text"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    values: dict[str, float] = dataclasses.field(default_factory=dict)
    fp32_values: dict[str, float] = dataclasses.field(default_factory=dict)
    integer_domain: dict[str, IntegerThreshold] = dataclasses.field(default_factory=dict)
    binding: Binding = dataclasses.field(default_factory=Binding)
    operating_point: OperatingPoint | None = None
    near_line: NearLineCounts | None = None
    fingerprint: str = ""

    def validate(self) -> None:
        for name in self.integer_domain:
            if name not in self.values:
                raise ConfigError(f"threshold set: integer_domain.{name} has no float value in values")

    @classmethod
    def migrate(cls, data: dict[str, Any], version: Any, path: Path) -> dict[str, Any]:
        """Schema 1 (quantkit 0.1) -> 2: the operating point became typed. The version-1 fingerprint is checked
        first (a hand-edited file stays refused); the untyped operating point is dropped (re-run ``quantkit
        bind`` to get its estimates), everything the binding needs is kept."""
        if version != 1:
            return super().migrate(data, version, path)
        old = dict(data)
        claimed = old.pop("fingerprint", "")
        if fingerprint(old) != claimed:
            raise InputFileError(f"{path}: fingerprint does not match the content of this {cls.KIND} (edited by hand?){cls._rerun()}")
        new = {k: v for k, v in data.items() if k not in ("operating_point", "fingerprint", "schema_version")}
        new["schema_version"] = cls.SCHEMA_VERSION
        obj = cls.from_dict(new, where=str(path)).sealed()
        return obj.to_dict()

    def content_fingerprint(self) -> str:
        """SHA-256 over ``to_dict()`` without ``fingerprint``; ``near_line`` enters only when set, so a threshold set bound
        before quantkit counted it keeps its fingerprint (the evaluations, verifications and bundles that name it still
        match; a bundle's manifest pins it)."""
        d = self.to_dict()
        d.pop("fingerprint", None)
        if d.get("near_line") is None:
            d.pop("near_line", None)
        return fingerprint(d)

    def adapter_options(self, *, fp32: bool = False) -> dict[str, Any]:
        """The task adapter's options at this set's thresholds (``fp32=True``: at the FP32 thresholds):
        ``quantkit.tasks.make_adapter(ts.adapter, ts.adapter_options())`` builds the adapter."""
        return {**self.options, **(self.fp32_values if fp32 else self.values)}

    def integer(self, name: str) -> IntegerThreshold:
        return self.integer_domain[name]

    def check_binding(self, record: CalibrationRecord | str | os.PathLike[str], *, model_path: str | os.PathLike[str] | None = None,
                      source: str = "threshold set", record_path: str | os.PathLike[str] | None = None) -> None:
        """Refuse a record (and optionally a quantized model file) this set was not derived for.

        ``record`` is a :class:`CalibrationRecord` (then ``record_path`` names it in messages) or the path of
        ``record.json`` / the quantized folder holding it.

        Raises:
            BindingMismatchError: record fingerprint, model digest or calibration set differ, or the
                model file's SHA-256 differs from the bound ``quantized_model_digest``. The message names
                the calibration the set was derived for and the ``quantkit bind`` command that re-derives it.
            InputFileError: the record cannot be read.
        """
        if isinstance(record, CalibrationRecord):
            rec, rpath = record, Path(record_path) if record_path is not None else Path("record.json")
        else:
            rpath = CalibrationRecord.path_in(record)
            rec = CalibrationRecord.load(rpath)
        b = self.binding
        intake = rpath.parent.parent.parent / "intake"  # the pipeline's layout: work/models/<model>/{intake,quantize/<role>}
        fp32 = intake if (intake / "model.onnx").is_file() else "INTAKE_DIR"
        how = (f"re-derive with: quantkit bind {rpath.parent} --fp32 {fp32} --reference REFERENCE_SET "
               f"--params params.yaml --out THRESHOLDS.json")
        theirs = Binding.of(rec, "").describe()
        if b.record_fingerprint != rec.fingerprint or b.calibration_set_id != (rec.set_id or "") or b.model_digest != rec.model_digest:
            raise BindingMismatchError(f"{source} was derived for {b.describe()} but {rpath} is {theirs}; {how}")
        if model_path is not None and b.quantized_model_digest:
            digest = sha256_file(model_path)
            if digest != b.quantized_model_digest:
                raise BindingMismatchError(f"{source} was derived for {b.describe()} but {model_path} has digest {digest[:12]} "
                                           f"(expected {b.quantized_model_digest[:12]}); {how}")

    @classmethod
    def load_bound(cls, path: str | os.PathLike[str], record: CalibrationRecord | str | os.PathLike[str] | None = None,
                   *, model_path: str | os.PathLike[str] | None = None) -> "ThresholdSet":
        """Load a threshold set; with ``record`` (a record, ``record.json`` or quantized folder) check its binding.

        Raises:
            InputFileError: see :meth:`Artifact.load`.
            BindingMismatchError: see :meth:`check_binding`.
        """
        ts = cls.load(path)
        if record is not None:
            ts.check_binding(record, model_path=model_path, source=str(path))
        return ts

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v:g}" for k, v in sorted(self.values.items()))
        return (f"ThresholdSet({self.adapter}, {vals}, set={self.binding.calibration_set_name!r}, "
                f"record={self.binding.record_fingerprint[:12]})")

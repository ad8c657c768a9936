"""The ONE module that talks to ``onnxruntime.quantization``: configs become ORT arguments (habit 3 of
STYLE.md), calibrator parameters and tensor selection, ranges become ORT ``TensorsData``, and ORT's quantizers
are called here. No other quantkit module imports ``onnxruntime.quantization`` (a structure test checks it).

ORT's entry points take a string-keyed ``extra_options`` bag whose unknown keys are silently ignored,
and ``create_calibrator`` reads only a few of them. Here every :class:`StaticQuantConfig` /
:class:`DynamicQuantConfig` field maps to exactly one ORT argument, key or ``TensorQuantOverrides``
entry, and a combination ORT would ignore or reject raises
:class:`~quantkit.errors.UnsupportedOptionError` naming the field.

Checked against ``onnxruntime/quantization/{quantize,calibrate,base_quantizer}.py`` of ORT 1.32:
``check_static_quant_arguments`` (int8 activations with uint8 weights; 16-bit only in QDQ),
``create_calibrator`` (which ``Calib*`` keys each method reads), ``compute_distribution``
(``num_bins >= 512``), ``MinMaxCalibrater`` (``averaging_constant`` in [0, 1]); the model-independent
checks live with the configs (:func:`quantkit.quantize.config.check_static`). ``quantize_static``'s
``calibration_cache_path`` and ``save_tensors_data`` first appear in ORT 1.27: the floor in ``pyproject.toml``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import INT_TYPES
from ..errors import UnsupportedOptionError
from .config import DynamicQuantConfig, StaticQuantConfig, TensorOverride
from .placement import placement_recipe

if TYPE_CHECKING:  # pragma: no cover
    import onnx

log = logging.getLogger(__name__)

#: ORT CalibrationMethod member per quantkit method name.
METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile", "distribution": "Distribution"}
#: First opset whose QuantizeLinear/DequantizeLinear take ``axis`` (per-channel QDQ), ONNX operator docs.
MIN_OPSET_PER_CHANNEL_QDQ = 13
#: Op types whose dynamic (IntegerOps) quantizer honours per_channel (onnxruntime/quantization/operators/matmul.py).
DYNAMIC_PER_CHANNEL_OPS = frozenset({"MatMul", "Attention", "LSTM"})


def quant_type(name: str) -> Any:
    """ORT ``QuantType`` for a quantkit type name (``"int8"`` -> ``QuantType.QInt8``)."""
    from onnxruntime.quantization import QuantType

    return getattr(QuantType, str(INT_TYPES[name].ort_name))


def default_op_types(fmt: str) -> list[str]:
    """The op types ORT quantizes when ``op_types_to_quantize`` is empty (sorted, deterministic)."""
    from onnxruntime.quantization.registry import (
        IntegerOpsRegistry,
        QDQRegistry,
        QLinearOpsRegistry,
    )

    if fmt == "dynamic":
        return sorted(IntegerOpsRegistry)
    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


def resolve_exclusions(c: StaticQuantConfig | DynamicQuantConfig, model: onnx.ModelProto, fmt: str) -> tuple[list[str], list[str]]:
    """Check exclusions against ``model`` and return ``(op_types_to_quantize, nodes_to_exclude)``.

    Raises:
        UnsupportedOptionError: a node name, pattern, op type or override tensor that matches nothing in
            the model (ORT would silently ignore it).
    """
    names = [n.name for n in model.graph.node]
    ops = {n.op_type for n in model.graph.node}
    known = set(names)
    for n in c.nodes_to_exclude:
        if n not in known:
            raise UnsupportedOptionError(f"nodes_to_exclude: node {n!r} is not in the model; check the name with 'quantkit inspect'")
    excluded = list(c.nodes_to_exclude)
    for p in c.node_patterns_to_exclude:
        hits = [n for n in names if re.fullmatch(p, n)]
        if not hits:
            raise UnsupportedOptionError(f"node_patterns_to_exclude: {p!r} matches no node of the model; fix the pattern")
        excluded += [h for h in hits if h not in excluded]
    for t in c.op_types_to_exclude:
        if t not in ops:
            raise UnsupportedOptionError(f"op_types_to_exclude: the model has no {t!r} node; remove it")
    base = list(c.op_types_to_quantize) or default_op_types(fmt)
    unknown = [t for t in c.op_types_to_quantize if t not in ops]
    if unknown:
        raise UnsupportedOptionError(f"op_types_to_quantize: the model has no {unknown[0]!r} node; remove it")
    op_types = sorted(t for t in base if t not in set(c.op_types_to_exclude))
    if fmt == "dynamic" and c.per_channel and not (ops & set(op_types) & DYNAMIC_PER_CHANNEL_OPS):
        raise UnsupportedOptionError("per_channel: dynamic quantization ignores it for this model (ConvInteger is per-tensor; "
                                     "only MatMul/Attention/LSTM weights go per channel); set per_channel: false")
    tensors = {v for n in model.graph.node for v in (*n.input, *n.output)} | {i.name for i in model.graph.input}
    for t in getattr(c, "tensor_overrides", {}):
        if t not in tensors:
            raise UnsupportedOptionError(f"tensor_overrides: tensor {t!r} is not in the model; check the name with 'quantkit inspect'")
    return op_types, sorted(excluded)


def check_opset(c: StaticQuantConfig | DynamicQuantConfig, opset: int, model_path: str) -> None:
    """Per-channel QDQ at opset < 13: ORT 1.32 writes ``DequantizeLinear(axis=...)`` it then refuses to load."""
    fmt = getattr(c, "format", "qoperator")
    if c.per_channel and fmt == "qdq" and opset < MIN_OPSET_PER_CHANNEL_QDQ:
        raise UnsupportedOptionError(
            f"{model_path}: opset {opset} is too old for per-channel QDQ (DequantizeLinear axis needs opset >= 13); "
            "run 'quantkit intake' to upgrade the opset to 13, or set per_channel: false")


def override_dict(ov: TensorOverride) -> dict[str, Any]:
    """One ORT ``TensorQuantOverrides`` entry (``{"quant_type": QuantType, "scale": np.float32, ...}``)."""
    d: dict[str, Any] = {}
    if ov.quant_type is not None:
        d["quant_type"] = quant_type(ov.quant_type)
    if ov.scale is not None:
        d["scale"] = np.array(ov.scale, dtype=np.float32)
        d["zero_point"] = np.array(ov.zero_point, dtype=_np_int(ov.quant_type))
    for k in ("symmetric", "reduce_range"):
        if getattr(ov, k) is not None:
            d[k] = getattr(ov, k)
    for k in ("rmin", "rmax"):
        if getattr(ov, k) is not None:
            d[k] = np.array(getattr(ov, k), dtype=np.float32)
    return d


def _np_int(qtype: str | None) -> Any:
    return INT_TYPES[qtype or "int32"].numpy


def calibrator_options(c: StaticQuantConfig) -> dict[str, Any]:
    """``extra_options`` for ``create_calibrator`` (its own lower-case keys), only keys it reads."""
    opts: dict[str, Any] = {}
    if c.method == "minmax":
        if c.calibration_symmetric is not None:
            opts["symmetric"] = c.calibration_symmetric
        if c.moving_average:
            opts["moving_average"] = True
            if c.averaging_constant is not None:
                opts["averaging_constant"] = c.averaging_constant
    elif c.method in ("entropy", "percentile"):
        if c.calibration_symmetric is not None:
            opts["symmetric"] = c.calibration_symmetric
        if c.num_bins is not None:
            opts["num_bins"] = c.num_bins
        if c.method == "entropy" and c.num_quantized_bins is not None:
            opts["num_quantized_bins"] = c.num_quantized_bins
        if c.method == "percentile" and c.percentile is not None:
            opts["percentile"] = c.percentile
    else:
        if c.num_bins is not None:
            opts["num_bins"] = c.num_bins
        if c.distribution_scenario is not None:
            opts["scenario"] = c.distribution_scenario
    return opts


def static_kwargs(c: StaticQuantConfig, op_types: list[str], nodes_to_exclude: list[str],
                  extra_overrides: dict[str, list[dict[str, Any]]] | None = None, no_output_op_types: Sequence[str] = ()) -> dict[str, Any]:
    """Keyword arguments for ``onnxruntime.quantization.quantize_static`` (model, output and the
    calibration reader/cache are added by the caller). ``extra_overrides`` are ready-made
    ``TensorQuantOverrides`` entries (record replay) merged under the config's own. ``no_output_op_types``: op types
    whose outputs get no Q/DQ of their own (``OpTypesToExcludeOutputQuantization``, from :func:`quantkit.quantize.placement.plan_placement`).
    The placement recipe's weight symmetry becomes ``WeightSymmetric`` where the config leaves it unset.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat

    extra: dict[str, Any] = {"ActivationSymmetric": c.symmetric_activations}
    symmetric_weights = c.symmetric_weights if c.symmetric_weights is not None else placement_recipe(c.placement).symmetric_weights
    if symmetric_weights is not None:
        extra["WeightSymmetric"] = symmetric_weights
    if no_output_op_types:
        extra["OpTypesToExcludeOutputQuantization"] = sorted(no_output_op_types)
    overrides = dict(extra_overrides or {})
    overrides.update({k: [override_dict(v)] for k, v in sorted(c.tensor_overrides.items())})
    if overrides:
        extra["TensorQuantOverrides"] = overrides
    return {
        "quant_format": QuantFormat.QDQ if c.format == "qdq" else QuantFormat.QOperator,
        "op_types_to_quantize": op_types,
        "per_channel": c.per_channel,
        "reduce_range": c.reduce_range,
        "activation_type": quant_type(c.activation_type),
        "weight_type": quant_type(c.weight_type),
        "nodes_to_exclude": nodes_to_exclude,
        "calibrate_method": getattr(CalibrationMethod, METHODS[c.method]),
        "extra_options": extra,
    }


def dynamic_kwargs(c: DynamicQuantConfig, op_types: list[str], nodes_to_exclude: list[str]) -> dict[str, Any]:
    """Keyword arguments for ``onnxruntime.quantization.quantize_dynamic``."""
    extra: dict[str, Any] = {}
    if c.symmetric_weights is not None:
        extra["WeightSymmetric"] = c.symmetric_weights
    return {
        "op_types_to_quantize": op_types,
        "per_channel": c.per_channel,
        "reduce_range": c.reduce_range,
        "weight_type": quant_type(c.weight_type),
        "nodes_to_exclude": nodes_to_exclude,
        "extra_options": extra,
    }


# -- ORT's console output --------------------------------------------------------------------------------------
class _DropOrtNags(logging.Filter):
    """ORT root-logger warnings a quantkit user cannot act on: the pre-processing advice (intake did it),
    per-channel axis notes for rank-1 BatchNormalization weights (ORT falls back to per-tensor), and the
    automatic opset bump / ``com.microsoft`` domain for 16- and 4-bit types (recorded as opset_after)."""

    _NAGS = ("pre-process", "is out-of-range for weight", "does not support 16-bit integer quantization natively",
             "integer quantization types prior to opset 21")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self._NAGS)


@contextlib.contextmanager
def quiet_ort() -> Iterator[None]:
    """Send ORT's ``print`` calls (``HistogramCollector``) to the debug log and drop the root-logger nags
    :class:`_DropOrtNags` names, for the duration of the block."""
    root = logging.getLogger()
    f = _DropOrtNags()
    root.addFilter(f)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        root.removeFilter(f)
        if buf.getvalue().strip():
            log.debug("onnxruntime: %s", buf.getvalue().strip().replace("\n", " | "))


# -- calibration -------------------------------------------------------------------------------------------------
#: ``create_calibrator``'s defaults per method (ORT 1.27-1.32, ``onnxruntime/quantization/calibrate.py``); a test
#: builds ORT's calibrators and checks these against their attributes.
CALIBRATOR_DEFAULTS: dict[str, dict[str, Any]] = {
    "minmax": {"symmetric": False, "moving_average": False, "averaging_constant": 0.01},
    "entropy": {"symmetric": False, "num_bins": 128, "num_quantized_bins": 128},
    "percentile": {"symmetric": True, "num_bins": 2048, "percentile": 99.999},
    "distribution": {"symmetric": False, "num_bins": 2048, "scenario": "same"},
}
#: ``HistogramCalibrater``'s constructor values for the attributes a method does not set (unused by its compute).
_HISTOGRAM_FILL = {"num_quantized_bins": 2048, "percentile": 99.999, "scenario": "same"}


@dataclasses.dataclass(frozen=True)
class CalibratorParams:
    """The calibrator ORT would build for a config: ``create_calibrator``'s defaults + the config's options."""

    method: str
    symmetric: bool
    num_bins: int = 0
    num_quantized_bins: int = 0
    percentile: float = 0.0
    scenario: str = ""
    moving_average: bool = False
    averaging_constant: float = 0.0

    @property
    def absolute(self) -> bool:
        """Histograms of ``|x|`` (ORT's ``collect_absolute_value``): percentile with ``symmetric``."""
        return self.method == "percentile" and self.symmetric

    @property
    def tail_fraction(self) -> float:
        """Fraction of elements beyond the percentile threshold, per side (0.0 for other methods)."""
        if self.method != "percentile":
            return 0.0
        return (100.0 - self.percentile) / (100.0 if self.absolute else 200.0)


def calibrator_params(c: StaticQuantConfig) -> CalibratorParams:
    """Resolve ``c``'s calibrator as ``create_calibrator`` would (:data:`CALIBRATOR_DEFAULTS` + :func:`calibrator_options`)."""
    merged = {**(_HISTOGRAM_FILL if c.method != "minmax" else {}), **CALIBRATOR_DEFAULTS[c.method], **calibrator_options(c)}
    return CalibratorParams(method=c.method, **merged)


@dataclasses.dataclass(frozen=True)
class CalibrationPlan:
    """What to calibrate: the tap model (every calibrated tensor also a graph output) and those tensors, sorted;
    ``graph_outputs``: the model's own outputs, in order."""

    tap_model: Path
    tensors: tuple[str, ...]
    params: CalibratorParams
    graph_outputs: tuple[str, ...] = ()


def calibration_plan(model_path: str | Path, config: StaticQuantConfig, op_types: list[str], workdir: str | Path) -> CalibrationPlan:
    """Select the tensors ORT's calibrator would calibrate (``CalibraterBase.select_tensors_to_calibrate``: inputs
    and outputs of nodes of ``op_types``, float, not initializers, on the shape-inferred model) and write the tap
    model as ``HistogramCalibrater.augment_graph`` does, to ``workdir/tap_model.onnx`` (``workdir`` is made when missing).
    No session is created."""
    import onnx
    from onnxruntime.quantization.calibrate import CalibraterBase

    tap = Path(workdir) / "tap_model.onnx"
    tap.parent.mkdir(parents=True, exist_ok=True)
    base = CalibraterBase(Path(model_path), op_types_to_calibrate=op_types, augmented_model_path=str(tap))
    tensors, value_infos = base.select_tensors_to_calibrate(base.model)
    model = base.model
    graph_outputs = tuple(o.name for o in model.graph.output)
    for name in sorted(tensors):
        if name not in graph_outputs:
            model.graph.output.append(value_infos[name])
    onnx.save(model, str(tap))
    return CalibrationPlan(tap, tuple(sorted(tensors)), calibrator_params(config), graph_outputs)


def _tensors_data(method: str, data: dict[str, Any]) -> Any:
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorsData

    return TensorsData(getattr(CalibrationMethod, METHODS[method]), data)


def minmax_ranges(pairs: dict[str, tuple[Any, Any]]) -> Any:
    """ORT ``TensorsData`` (MinMax) from ``{tensor: (lowest, highest)}`` float arrays."""
    return _tensors_data("minmax", dict(sorted(pairs.items())))


def histogram_ranges(params: CalibratorParams, histogram_dict: dict[str, tuple[Any, ...]]) -> Any:
    """ORT ``TensorsData`` from histograms in ORT's one-call ``HistogramCollector`` layout, computed by ORT's
    own ``compute_collection_result`` (percentile, entropy, distribution)."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    collector = HistogramCollector(method=params.method, symmetric=params.symmetric, num_bins=params.num_bins,
                                   num_quantized_bins=params.num_quantized_bins, percentile=params.percentile, scenario=params.scenario)
    collector.histogram_dict = histogram_dict
    with quiet_ort():
        return _tensors_data(params.method, collector.compute_collection_result())


def ranges_from_pairs(method: str, pairs: dict[str, tuple[float, float]]) -> Any:
    """ORT ``TensorsData`` from recorded ``{tensor: (min, max)}`` floats (record replay)."""
    from onnxruntime.quantization.calibrate import TensorData

    return _tensors_data(method, {k: TensorData(lowest=np.array(lo, np.float32), highest=np.array(hi, np.float32))
                                  for k, (lo, hi) in sorted(pairs.items())})


def range_overrides(ranges: Any, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``TensorQuantOverrides`` pinning each of ``names`` to its own calibrated range (``rmin``/``rmax`` taken
    from ``ranges``, ORT ``TensorsData``, unchanged), which ORT prefers over any range it would adjust."""
    return {n: [{"rmin": ranges[n].range_value[0], "rmax": ranges[n].range_value[1]}] for n in names}


def replay_overrides(tensors: Any) -> dict[str, list[dict[str, Any]]]:
    """ORT ``TensorQuantOverrides`` fixing every per-tensor 8/16-bit activation's scale and zero point to those of
    ``tensors`` (a record's :class:`~quantkit.artifacts.TensorScale` rows)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in tensors:
        if t.role != "activation" or len(t.scale) != 1:
            continue
        it = INT_TYPES.get(t.dtype)
        if it is None or it.bits not in (8, 16):
            continue
        out[t.name] = [{"scale": np.array(t.scale[0], np.float32), "zero_point": np.array(t.zero_point[0], it.numpy),
                        "quant_type": quant_type(t.dtype)}]
    return out


# -- the quantizers ----------------------------------------------------------------------------------------------
def run_static(prepared: Path, dest: Path, ranges: Any, kwargs: dict[str, Any], workdir: Path) -> None:
    """ORT ``quantize_static`` on ``prepared`` with ``ranges`` handed over as its calibration cache (ORT then
    skips its own calibration); ``kwargs`` from :func:`static_kwargs`. ORT's exceptions propagate."""
    from onnxruntime.quantization import quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data

    cache = workdir / "ranges.json"
    save_tensors_data(ranges, cache)
    with quiet_ort():
        quantize_static(str(prepared), str(dest), None, calibration_cache_path=str(cache), **kwargs)


def pre_process(src: Path, dst: Path) -> None:
    """ORT's ``quant_pre_process`` (graph optimizations + ONNX shape inference, symbolic inference skipped: shapes
    are fixed by intake) from ``src`` to ``dst``."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)


def run_dynamic(prepared: Path, dest: Path, kwargs: dict[str, Any]) -> None:
    """ORT ``quantize_dynamic``; ``kwargs`` from :func:`dynamic_kwargs`. ORT's exceptions propagate."""
    from onnxruntime.quantization import quantize_dynamic

    with quiet_ort():
        quantize_dynamic(str(prepared), str(dest), **kwargs)

"""The ONE place where quantkit configs become ONNX Runtime arguments (habit 3 of STYLE.md).

ORT's entry points take a string-keyed ``extra_options`` bag whose unknown keys are silently ignored,
and ``create_calibrator`` reads only a few of them. Here every :class:`StaticQuantConfig` /
:class:`DynamicQuantConfig` field maps to exactly one ORT argument, key or ``TensorQuantOverrides``
entry, and a combination ORT would ignore or reject raises
:class:`~quantkit.errors.UnsupportedOptionError` naming the field.

Checked against ``onnxruntime/quantization/{quantize,calibrate,base_quantizer}.py`` of ORT 1.32:
``check_static_quant_arguments`` (int8 activations with uint8 weights; 16-bit only in QDQ),
``create_calibrator`` (which ``Calib*`` keys each method reads), ``compute_distribution``
(``num_bins >= 512``), ``MinMaxCalibrater`` (``averaging_constant`` in [0, 1]).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..dtypes import INT_TYPES
from ..errors import UnsupportedOptionError

if TYPE_CHECKING:  # pragma: no cover
    import onnx

    from .config import DynamicQuantConfig, StaticQuantConfig, TensorOverride

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


def check_static(c: StaticQuantConfig) -> None:
    """Raise UnsupportedOptionError for a combination ORT would ignore or reject (model-independent)."""
    m = c.method
    if c.percentile is not None:
        if m != "percentile":
            raise UnsupportedOptionError(f"percentile: only used by method 'percentile' (ORT ignores it with {m!r}); remove it or set method: percentile")
        if not 0 < c.percentile <= 100:
            raise UnsupportedOptionError(f"percentile: {c.percentile} must be in (0, 100]")
    if c.num_bins is not None:
        if m == "minmax":
            raise UnsupportedOptionError("num_bins: only used by histogram methods (entropy, percentile, distribution); remove it for minmax")
        if c.num_bins < 1:
            raise UnsupportedOptionError(f"num_bins: {c.num_bins} must be >= 1")
        if m == "distribution" and c.num_bins < 512:
            raise UnsupportedOptionError(f"num_bins: {c.num_bins} < 512, which ORT's distribution calibrator rejects; use >= 512")
    if c.num_quantized_bins is not None:
        if m != "entropy":
            raise UnsupportedOptionError(f"num_quantized_bins: only used by method 'entropy' (ORT ignores it with {m!r}); remove it")
        if c.num_quantized_bins < 2:
            raise UnsupportedOptionError(f"num_quantized_bins: {c.num_quantized_bins} must be >= 2")
        if c.num_quantized_bins > (c.num_bins if c.num_bins is not None else 128):
            raise UnsupportedOptionError(f"num_quantized_bins: {c.num_quantized_bins} exceeds num_bins; raise num_bins or lower it")
    if c.distribution_scenario is not None and m != "distribution":
        raise UnsupportedOptionError(f"distribution_scenario: only used by method 'distribution'; remove it for {m!r}")
    if c.calibration_symmetric is not None and m == "distribution":
        raise UnsupportedOptionError("calibration_symmetric: ORT's distribution calibrator ignores it; remove it")
    if c.moving_average and m != "minmax":
        raise UnsupportedOptionError(f"moving_average: only used by method 'minmax' (ORT ignores it with {m!r}); remove it")
    if c.averaging_constant is not None:
        if not c.moving_average:
            raise UnsupportedOptionError("averaging_constant: only used with moving_average: true; set it or remove averaging_constant")
        if not 0 <= c.averaging_constant <= 1:
            raise UnsupportedOptionError(f"averaging_constant: {c.averaging_constant} must be in [0, 1]")
    a, w = c.activation_type, c.weight_type
    if a == "int8" and w == "uint8":
        raise UnsupportedOptionError("activation_type int8 with weight_type uint8 is rejected by ORT; use uint8/int8 or int8/int8")
    wide = [n for n, t in (("activation_type", a), ("weight_type", w)) if t.endswith(("16", "4"))]
    if wide and c.format != "qdq":
        raise UnsupportedOptionError(f"{wide[0]}: 16- and 4-bit types need format: qdq (ORT's QOperator kernels are 8-bit); set format: qdq")
    for name, ov in c.tensor_overrides.items():
        if ov.quant_type is not None and ov.quant_type.endswith(("16", "4")) and c.format != "qdq":
            raise UnsupportedOptionError(f"tensor_overrides.{name}.quant_type: {ov.quant_type} needs format: qdq")


def check_dynamic(c: DynamicQuantConfig) -> None:
    """Raise UnsupportedOptionError for what ORT's ``quantize_dynamic`` cannot do."""
    if c.weight_type not in ("int8", "uint8"):
        raise UnsupportedOptionError(f"weight_type: {c.weight_type} is not supported by dynamic quantization (ConvInteger/MatMulInteger are 8-bit); use int8 or uint8")


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
    import numpy as np

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
                  extra_overrides: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``onnxruntime.quantization.quantize_static`` (model, output and the
    calibration reader/cache are added by the caller). ``extra_overrides`` are ready-made
    ``TensorQuantOverrides`` entries (record replay) merged under the config's own.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat

    extra: dict[str, Any] = {"ActivationSymmetric": c.symmetric_activations}
    if c.symmetric_weights is not None:
        extra["WeightSymmetric"] = c.symmetric_weights
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

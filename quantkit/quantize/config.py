"""Typed, frozen quantization configs: one named field per knob, defaults equal to ORT's entry points.

The config's *type* selects the handler (torchao's ``quantize_(model, config)``):
:class:`StaticQuantConfig` runs calibration and ORT's ``quantize_static`` machinery,
:class:`DynamicQuantConfig` runs ORT's ``quantize_dynamic``. Every field is translated to ONNX Runtime
arguments in exactly one place, :mod:`quantkit.quantize.ort_bridge` (which imports this module, never the
reverse); a combination ORT would ignore or reject raises :class:`~quantkit.errors.UnsupportedOptionError`
when the config is built (:func:`check_static`, :func:`check_dynamic`, checked against ORT 1.32's
``check_static_quant_arguments``, ``create_calibrator``, ``compute_distribution`` and ``MinMaxCalibrater``).

Defaults are those of ``onnxruntime.quantization.quantize_static`` (1.32): MinMax, QDQ, int8 weights,
asymmetric activations, weight symmetry by weight type (signed -> symmetric), no range reduction -- except
``activation_type``: uint8 (U8S8, what ORT's docs recommend for x86 CPUs and what the issue's measurements
used), where the entry point's signature says int8; and ``per_channel``: true for static quantization (per-output-
channel weight scales for Conv/ConvTranspose/Gemm/MatMul), where the signature says false. Per-channel weights
are what the quantization whitepaper recommends for CNNs (Krishnamoorthi 2018, arXiv:1806.08342: per-channel
weights and per-layer activations at 8 bits keep classification within 2 % of float): per-tensor weights put every
channel on the widest channel's grid, and with them a detector here bound at box F1 0.000 against FP32, 0.673
per-channel (issue #30). Dynamic quantization keeps
false: its ConvInteger is per-tensor only. Every entry point (``quantkit quantize``, ``quantize_``, fallback,
the fleet) builds :class:`StaticQuantConfig`, so this is the one default. Histogram defaults (``num_bins``, ``percentile`` ...) are
those of ``onnxruntime.quantization.calibrate.create_calibrator`` and are left unset (``None``) here so
that "not given" and "given the default" stay distinguishable in the record.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from ..config import Config
from ..dtypes import int_type
from ..errors import ConfigError, UnsupportedOptionError
from .placement import placement_recipe

Method = Literal["minmax", "entropy", "percentile", "distribution"]
Format = Literal["qdq", "qoperator"]
QType = Literal["uint8", "int8", "uint16", "int16", "uint4", "int4"]  # = quantkit.dtypes.QUANT_TYPE_NAMES (a test checks)


@dataclasses.dataclass(frozen=True)
class TensorOverride(Config):
    """Per-tensor override (ORT's ``TensorQuantOverrides`` entry for one per-tensor-quantized tensor).

    Either ``scale`` and ``zero_point`` together (fixed quantization parameters), or any of
    ``symmetric`` / ``reduce_range`` / ``rmin`` / ``rmax`` (range shaping); ``quant_type`` may go with
    both. ``scale`` is in the tensor's float units per integer step; ``zero_point`` is an integer of
    ``quant_type``'s range.
    """

    quant_type: QType | None = None
    scale: float | None = None
    zero_point: int | None = None
    symmetric: bool | None = None
    reduce_range: bool | None = None
    rmin: float | None = None
    rmax: float | None = None

    def validate(self) -> None:
        if (self.scale is None) != (self.zero_point is None):
            raise UnsupportedOptionError("tensor_overrides: 'scale' and 'zero_point' must be given together; set both or neither")
        if self.scale is not None:
            if self.scale <= 0:
                raise ConfigError(f"tensor_overrides.scale: {self.scale} must be > 0")
            shaped = [k for k in ("symmetric", "reduce_range", "rmin", "rmax") if getattr(self, k) is not None]
            if shaped:
                raise UnsupportedOptionError(f"tensor_overrides: {shaped[0]!r} conflicts with a fixed scale/zero_point (ORT rejects it); drop one")
            it = int_type(self.quant_type) if self.quant_type is not None else None
            if it is not None and self.zero_point is not None and not it.qmin <= self.zero_point <= it.qmax:
                raise ConfigError(f"zero_point: {self.zero_point} is outside {self.quant_type}'s codes "
                                  f"[{it.qmin}, {it.qmax}]; give a code in that range")
        if self.rmin is not None and self.rmax is not None and self.rmin > self.rmax:
            raise ConfigError(f"tensor_overrides: rmin {self.rmin} > rmax {self.rmax}; swap them")


@dataclasses.dataclass(frozen=True)
class _Common(Config):
    """Fields shared by static and dynamic quantization (see the subclasses)."""

    per_channel: bool = False
    weight_type: QType = "int8"
    symmetric_weights: bool | None = None
    reduce_range: bool = False
    nodes_to_exclude: tuple[str, ...] = ()
    node_patterns_to_exclude: tuple[str, ...] = ()
    op_types_to_quantize: tuple[str, ...] = ()
    op_types_to_exclude: tuple[str, ...] = ()

    def validate(self) -> None:
        import re

        for p in self.node_patterns_to_exclude:
            try:
                re.compile(p)
            except re.error as e:
                raise ConfigError(f"node_patterns_to_exclude: {p!r} is not a valid regular expression ({e})") from None
        overlap = sorted(set(self.op_types_to_quantize) & set(self.op_types_to_exclude))
        if overlap:
            raise UnsupportedOptionError(f"op_types_to_exclude: {overlap[0]!r} is also in op_types_to_quantize; keep it in one list")


@dataclasses.dataclass(frozen=True)
class StaticQuantConfig(_Common):
    """Static (calibrated) quantization.

    Fields (ORT name in brackets, see :mod:`quantkit.quantize.ort_bridge`):
        method: calibrator (``calibrate_method``): minmax | entropy | percentile | distribution.
        format: qdq (QuantizeLinear/DequantizeLinear pairs) | qoperator (QLinear* ops) (``quant_format``).
        per_channel: per-output-channel weight scales (``per_channel``), default true, as the quantization
            whitepaper (arXiv:1806.08342) advises for CNNs (per-tensor weights put every channel on the widest channel's grid);
            QDQ needs opset >= 13 (``quantkit intake`` upgrades it).
        activation_type / weight_type: integer types (``activation_type`` / ``weight_type``);
            16- and 4-bit only with ``format: qdq`` (ORT raises otherwise).
        symmetric_activations: zero point at the middle of the range (``ActivationSymmetric``).
        symmetric_weights: None = ORT's default (symmetric for signed weight types) (``WeightSymmetric``).
        reduce_range: 7-bit weights for non-VNNI CPUs (``reduce_range``).
        calibration_symmetric: make calibrated ranges symmetric around 0 (``CalibTensorRangeSymmetric``);
            None = the calibrator's default (True for percentile, False otherwise); not for distribution.
        percentile: percentile method only, in [50, 100) (default 99.999) (``CalibPercentile``); 100 is refused (use minmax).
        num_bins: histogram methods only (defaults entropy 128, percentile/distribution 2048;
            distribution needs >= 512).
        num_quantized_bins: entropy only (default 128).
        distribution_scenario: distribution only, "same" | "p3".
        moving_average / averaging_constant: minmax only (``CalibMovingAverage[Constant]``); the constant
            in [0, 1], only with ``moving_average``.
        calibration_chunk_size: images per chunk, the unit of progress and of checkpoints (a chunk is saved
            at most every 10 s); images are read one at a time, so peak memory depends on neither it nor
            the set size (quantkit's own knob, see :mod:`quantkit.quantize.calibration.calibrate`).
        max_images: calibrate on the first N images of the set (manifest order); None = all.
        calibration_graph: ``exact``: the calibration session runs with graph optimizations off, as ORT's
            calibrators do, and the ranges equal theirs bit for bit; ``optimized``: at ORT's ``all`` level (the
            level a model is deployed at: convolutions in ORT's blocked NCHWc layout, a different summation order),
            0.088 against 0.101 s per image for MinMax on the PP-OCR detector at 640x640 on 2 cores (medians of 3,
            ``bench/bench_calibration.py --impl quantkit quantkit-optimized``). Tensor values then differ from
            what ORT's calibrators read by float rounding only: MinMax ranges (and Entropy's with ORT's default bins)
            by at most 5e-6 relative on the PP-OCR detector at 640x640 (a test bounds them at 1e-4), so scales that
            may differ in their last bits and a zero point that may move by one step where it sits on a rounding tie
            (symmetric histogram ranges: 127 or 128). A method that picks a histogram edge (Percentile; Entropy
            whose KL search has candidates, ``num_bins > num_quantized_bins``) may pick another edge from such tiny
            differences: measured on the PP-OCR recognizer, Entropy with 2048 bins moved one tensor's range by 7 %.
        nodes_to_exclude / node_patterns_to_exclude (regex, full match) / op_types_to_exclude: kept in
            float (``nodes_to_exclude`` / ``op_types_to_quantize``); each must match the model.
        op_types_to_quantize: empty = every op type ORT's QDQ and QLinear registries know.
        tensor_overrides: ``{tensor name: TensorOverride}`` (``TensorQuantOverrides``).
        placement: where Q/DQ pairs go, a recipe of :mod:`quantkit.quantize.placement`: ``ort`` (ORT's own: every
            op type it knows, outputs too), ``openvino`` (inputs and weights of Conv/ConvTranspose/Gemm/MatMul only,
            nothing inside a Conv's activation chain, no output quantization; needs ``per_channel: true``, uint8
            activations, int8 symmetric weights), ``openvino-eltwise`` (also residual Add/Mul inputs; measured
            slower) or ``ort-float-decode`` (``ort`` with every node after the last Conv/Gemm/MatMul up to the outputs
            in float: a YOLOv8 output's scores no longer share the box coordinates' grid; box F1 0.000 -> 0.944 at the
            same ORT speed, ``bench/bench_heads.py``). Calibration covers the ``ort`` recipe's tensors whatever the placement, so one record's ranges
            serve every recipe. ``nncf``: NNCF's own placement (only with ``engine: nncf``).
        engine: ``ort`` (ONNX Runtime's quantizer driven by quantkit's calibration) or ``nncf`` (``nncf.quantize`` on
            the ONNX model, the optional ``nncf`` extra; :mod:`quantkit.quantize.nncf_engine`). NNCF honours
            ``symmetric_activations`` (false: its ``mixed`` preset, asymmetric activations; true: its ``performance``
            preset, zero point 0), ``activation_type`` (``uint8``: NNCF's int8 per-tensor activation pairs rewritten as
            uint8 on the same grid, zero point + 128, which OpenVINO computes correctly after a Concat; ``int8``: NNCF's
            own types, int8 for tensors with negative values), ``max_images`` (its ``subset_size``; default every image
            of the set) and the three exclusion lists (its ``IgnoredScope``); it needs ``placement: nncf`` (what
            ``quantkit quantize`` sets when the section names no placement),
            ``per_channel: true``, ``weight_type: int8`` and symmetric weights, and estimates ranges itself (per-tensor
            activations: mean over images of each image's min and max), so every other field must keep its default
            (:func:`check_engine`). Another name: an engine registered as a plug-in (entry point group
            ``quantkit.engines``, or :func:`quantkit.quantize.engines.register_engine`), which places its own Q/DQ pairs
            and checks its own fields (``placement`` left as ``ort`` or set to the engine's name); an unknown name is
            refused when ``quantize`` asks the registry, before any work.
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True  # no section: the defaults (what `quantkit quantize --help` says)

    per_channel: bool = True
    method: Method = "minmax"
    format: Format = "qdq"
    activation_type: QType = "uint8"
    symmetric_activations: bool = False
    calibration_symmetric: bool | None = None
    percentile: float | None = None
    num_bins: int | None = None
    num_quantized_bins: int | None = None
    distribution_scenario: Literal["same", "p3"] | None = None
    moving_average: bool = False
    averaging_constant: float | None = None
    calibration_chunk_size: int = 1
    max_images: int | None = None
    calibration_graph: Literal["exact", "optimized"] = "exact"
    tensor_overrides: dict[str, TensorOverride] = dataclasses.field(default_factory=dict)
    placement: str = "ort"
    engine: str = "ort"

    def validate(self) -> None:
        super().validate()
        check_placement(self)
        check_engine(self)
        if self.calibration_chunk_size < 1:
            raise ConfigError(f"calibration_chunk_size: {self.calibration_chunk_size} must be >= 1")
        if self.max_images is not None and self.max_images < 1:
            raise ConfigError(f"max_images: {self.max_images} must be >= 1 (or null for all)")
        check_static(self)

    def __hash__(self) -> int:  # dict field: hash by content
        return hash(self.config_hash())


@dataclasses.dataclass(frozen=True)
class DynamicQuantConfig(_Common):
    """Dynamic quantization (ORT ``quantize_dynamic``): weights quantized offline, activations (uint8)
    at run time. Always QOperator (``ConvInteger`` / ``MatMulInteger`` / ``DynamicQuantizeLinear``).
    Fields as in :class:`StaticQuantConfig`; ``weight_type`` is int8 or uint8 only.

    Fields:
        per_channel: per-output-channel weight scales (``per_channel``), default false as in ORT's
            ``quantize_dynamic``: its ConvInteger is per-tensor, only MatMul/Attention/LSTM weights go per channel.
    """

    def validate(self) -> None:
        super().validate()
        check_dynamic(self)


def check_static(c: StaticQuantConfig) -> None:
    """Raise UnsupportedOptionError for a combination ORT would ignore or reject (model-independent)."""
    m = c.method
    if c.percentile is not None:
        if m != "percentile":
            raise UnsupportedOptionError(f"percentile: only used by method 'percentile' (ORT ignores it with {m!r}); remove it or set method: percentile")
        if c.percentile == 100:
            raise UnsupportedOptionError("percentile: 100 does not give the full range (ORT's percentile takes the first histogram edge whose "
                                         "cumulative share rounds to 1.0, below the maximum on many tensors); use method: minmax")
        if not 50 <= c.percentile < 100:
            raise UnsupportedOptionError(f"percentile: {c.percentile} must be in [50, 100) (the share of values a range keeps, e.g. 99.999)")
    if c.num_bins is not None:
        if m == "minmax":
            raise UnsupportedOptionError("num_bins: only used by histogram methods (entropy, percentile, distribution); remove it for minmax")
        if c.num_bins < 2:
            raise UnsupportedOptionError(f"num_bins: {c.num_bins} must be >= 2")
        if m == "entropy" and c.num_quantized_bins is None and c.num_bins < 128:
            raise UnsupportedOptionError(f"num_bins: {c.num_bins} is below num_quantized_bins (default 128), which ORT's entropy "
                                         "calibrator cannot search; raise num_bins or set num_quantized_bins <= num_bins")
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
    wide = [n for n, t in (("activation_type", a), ("weight_type", w)) if int_type(t).bits != 8]
    if wide and c.format != "qdq":
        raise UnsupportedOptionError(f"{wide[0]}: 16- and 4-bit types need format: qdq (ORT's QOperator kernels are 8-bit); set format: qdq")
    for name, ov in c.tensor_overrides.items():
        if ov.quant_type is not None and int_type(ov.quant_type).bits != 8 and c.format != "qdq":
            raise UnsupportedOptionError(f"tensor_overrides.{name}.quant_type: {ov.quant_type} needs format: qdq")


#: Engines whose fields and placements this module checks; another (a plug-in) checks its own.
BUILTIN_ENGINES = ("ort", "nncf")


def check_placement(c: StaticQuantConfig) -> None:
    """Raise for a placement that is unknown or whose recipe needs settings the config does not have."""
    if c.engine not in BUILTIN_ENGINES:
        if c.placement not in ("ort", c.engine):
            raise UnsupportedOptionError(f"placement: {c.placement} is a recipe for ORT's quantizer; engine: {c.engine} places its Q/DQ "
                                         f"pairs itself: set placement: {c.engine} or leave it out")
        return
    r = placement_recipe(c.placement)
    where = f"placement: {c.placement}"
    if r.engine != c.engine:
        if c.engine == "ort":
            raise UnsupportedOptionError(f"{where} is NNCF's own placement; set engine: {r.engine}, or a placement ORT applies (ort, openvino)")
        raise UnsupportedOptionError(f"{where} is a recipe for ORT's quantizer; engine: {c.engine} places Q/DQ pairs itself: set placement: {c.engine}")
    if r.per_channel_weights and not c.per_channel:
        raise UnsupportedOptionError(f"{where} needs per-channel weights; set per_channel: true")
    if r.symmetric_weights and c.symmetric_weights is False:
        raise UnsupportedOptionError(f"{where} needs symmetric weights (zero point 0); remove symmetric_weights: false")
    if r.symmetric_weights and c.weight_type != "int8":
        raise UnsupportedOptionError(f"{where} needs weight_type: int8 (symmetric signed weights); got {c.weight_type}")
    if r.activation_type is not None and c.activation_type != r.activation_type:
        raise UnsupportedOptionError(f"{where} needs activation_type: {r.activation_type}; got {c.activation_type}")
    if (r.op_types or r.paired_eltwise) and c.op_types_to_quantize:
        raise UnsupportedOptionError(f"{where} chooses the op types itself; remove op_types_to_quantize (op_types_to_exclude still applies)")
    if c.format != "qdq" and r.name != "ort":
        raise UnsupportedOptionError(f"{where} places QuantizeLinear/DequantizeLinear pairs; set format: qdq")


#: Fields NNCF's engine cannot honour: each must keep this value with ``engine: nncf`` (ORT's calibrators, formats and
#: overrides have no NNCF counterpart; NNCF 3.4 ``nncf.quantize``: CPU target, per-channel symmetric int8 weights, QDQ).
NNCF_FIXED: dict[str, object] = {
    "method": "minmax", "format": "qdq", "per_channel": True, "weight_type": "int8", "reduce_range": False,
    "calibration_symmetric": None, "moving_average": False, "calibration_chunk_size": 1, "calibration_graph": "exact",
    "tensor_overrides": {}, "op_types_to_quantize": (),
}


def check_engine(c: StaticQuantConfig) -> None:
    """Raise UnsupportedOptionError for a field the config's engine cannot honour (see ``engine`` in
    :class:`StaticQuantConfig`): with ``engine: nncf``, a field of :data:`NNCF_FIXED` off its value, asymmetric
    weights or activations other than 8-bit (a placement other than ``nncf``: :func:`check_placement`)."""
    if c.engine != "nncf":  # ORT honours every field; a plug-in engine checks its own
        return
    for name, value in NNCF_FIXED.items():
        if getattr(c, name) != value:
            keep = "remove it" if value in (None, {}, ()) else f"set {name}: {str(value).lower() if isinstance(value, bool) else value}"
            got = getattr(c, name)
            shown = "is set" if isinstance(got, (dict, tuple)) else f"{got!r}"
            raise UnsupportedOptionError(f"{name}: {shown} is not something NNCF's engine can do (it has its own range "
                                         f"estimator, per-channel symmetric int8 weights, QDQ); {keep}, or set engine: ort")
    if c.symmetric_weights is False:
        raise UnsupportedOptionError("symmetric_weights: false is not something NNCF's engine can do (its CPU weights are symmetric); "
                                     "remove it, or set engine: ort")
    if c.activation_type not in ("uint8", "int8"):
        raise UnsupportedOptionError(f"activation_type: {c.activation_type} is not something NNCF's engine can do (8-bit activations only); "
                                     "set activation_type: uint8 (or int8: NNCF's own types), or set engine: ort")


def check_dynamic(c: DynamicQuantConfig) -> None:
    """Raise UnsupportedOptionError for what ORT's ``quantize_dynamic`` cannot do."""
    if c.weight_type not in ("int8", "uint8"):
        raise UnsupportedOptionError(f"weight_type: {c.weight_type} is not supported by dynamic quantization (ConvInteger/MatMulInteger are 8-bit); use int8 or uint8")


QuantConfig = StaticQuantConfig | DynamicQuantConfig

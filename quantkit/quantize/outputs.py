"""What the written model computes at its outputs: graph outputs, changed ranges and collapsed channels.

Three findings go into the record's ``calibration`` entries and ``quantize``'s summary:

* ``outputs``: every graph output of the model, quantized or not, with its integer type, scale, zero point,
  the calibrated float range and the range the written model represents (:func:`output_summary`).
* ``range_changes``: every quantized tensor (one scale; a per-channel pair is set from its channels' ranges) whose
  written range differs from its calibrated range
  (:func:`range_changes`): ``clipped`` when the written range misses more than one step of the calibrated one
  (values are lost), ``widened`` when it is more than :data:`WIDENED_FACTOR` times as wide as needed (a bit or
  more of resolution lost, e.g. a tensor sharing the scale of a wider one). ORT's own Relu/Clip fusion, which
  gives a tensor read only by a Relu/Clip that node's range, is not a change (the Relu drops the same values).
* ``collapsed_outputs``: channels of a quantized graph output whose values fall into fewer than ``floor``
  quantization steps (:func:`effective_levels`), e.g. detector scores concatenated with pixel coordinates in
  one tensor, which then share one scale (the public bug kind "all confidences 0 after INT8").

Which axes of a graph output hold channels is read from the graph, without task knowledge
(:func:`channel_axes`): the axis a ``Concat`` assembled the output along (different quantities side by side:
boxes, objectness, class scores), or the channel axis of the ``Conv`` / ``MatMul`` that produced it, followed
back through element-wise operations and ``Transpose``; only axes of at most :data:`MAX_CHANNELS` entries.
(Every small axis, e.g. the last one of a ``[1, 1, H, W]`` probability map, would flag the map's empty columns:
measured on the PP-OCR detector, 60 of 64 columns "collapsed" on 6 images.) Their FP32 ranges are collected
during calibration (:class:`OutputChannels`). A task adapter that knows its decision channels calls
:func:`effective_levels` with its own :class:`ChannelRange` values.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..artifacts.record import CalibrationRecord, TensorScale
from .placement import COMPUTE_OPS, decode_tail

log = logging.getLogger(__name__)

MAX_CHANNELS = 1024
"""Largest axis whose entries are treated as channels of a graph output."""
DEFAULT_LEVELS_FLOOR = 16
"""Fewest quantization steps a channel's FP32 range may span before it is flagged (``--min-levels``)."""
WIDENED_FACTOR = 2.0
"""A written range this many times wider than the calibrated one (one bit of resolution) is reported."""


@dataclasses.dataclass(frozen=True)
class ChannelRange:
    """FP32 range per channel of ``tensor`` along ``axis``: ``lo[c]``, ``hi[c]`` (float units of the tensor)."""

    tensor: str
    axis: int
    lo: tuple[float, ...]
    hi: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class OutputLevels:
    """Effective quantization levels per channel: ``levels[c] = (hi[c] - lo[c]) / scale`` (steps spanned)."""

    tensor: str
    axis: int
    levels: tuple[float, ...]
    floor: float

    @property
    def collapsed(self) -> tuple[int, ...]:
        """Channels spanning fewer than ``floor`` steps."""
        return tuple(i for i, v in enumerate(self.levels) if v < self.floor)

    def to_dict(self) -> dict[str, Any]:
        """The record entry: the flagged channels and their levels (two decimals)."""
        bad = self.collapsed
        return {"tensor": self.tensor, "axis": self.axis, "channels": list(bad), "levels": [round(self.levels[i], 2) for i in bad],
                "floor": self.floor, "of_channels": len(self.levels)}

    def describe(self, fix: str | None = None) -> str:
        """One line for the user; ``fix``: the setting that removes the cause (:func:`collapse_fix`), when one is known."""
        bad = self.collapsed
        shown = ", ".join(f"{c}: {self.levels[c]:.1f}" for c in bad[:6]) + (", ..." if len(bad) > 6 else "")
        how = (f"set quantize.{fix} ({FIXES[fix]})" if fix in FIXES else
               "split the tensor before the output, keep its producer in float (quantkit fallback), or use 16-bit activations")
        return (f"output {self.tensor!r}: {len(bad)} of {len(self.levels)} channels along axis {self.axis} span fewer than "
                f"{self.floor:g} quantization steps (channel: levels {shown}); they share one scale with wider channels: {how}")


FLOAT_DECODE_FIX = "placement: ort-float-decode"
#: What each known fix of a collapsed output does, in words (the record's ``collapsed_outputs[].fix``).
FIXES = {FLOAT_DECODE_FIX: "the decode tail after the last Conv/Gemm/MatMul stays in float, so the output's channels are "
                           "not put on one grid (on YOLOv8n DocLayNet, bench/bench_heads.py: box F1 vs FP32 0.000 -> 0.944 at the same ONNX "
                           "Runtime speed; quantkit quantize --target measures it on this model)"}


def collapse_fix(model: Any, tensor: str) -> str | None:
    """The fix for a collapsed graph output ``tensor`` of the float ``model``: :data:`FLOAT_DECODE_FIX` when the output is
    computed by a decode tail (nodes after the last compute op, :func:`.placement.decode_tail`: a Concat of boxes and
    scores, a Reshape, a Sigmoid) that ``ort-float-decode`` keeps in float; None when a Conv/Gemm/MatMul writes it."""
    producer = next((n for n in model.graph.node if tensor in n.output), None)
    if producer is None or producer.op_type in COMPUTE_OPS or not producer.name:
        return None
    return FLOAT_DECODE_FIX if producer.name in decode_tail(model) else None


def collapse_lines(record: CalibrationRecord) -> list[str]:
    """One finding per collapsed output of ``record`` (``calibration.collapsed_outputs``), naming its fix where one is
    known (``quantkit compare`` and ``quantkit quantize`` print these)."""
    lines = []
    for c in (record.calibration or {}).get("collapsed_outputs", []):
        bad = ", ".join(f"{ch}: {v:g}" for ch, v in list(zip(c["channels"], c["levels"]))[:6]) + (", ..." if len(c["channels"]) > 6 else "")
        fix = c.get("fix")
        how = (f"set quantize.{fix} ({FIXES[fix]})" if fix in FIXES else
               "split the tensor before the output or keep its producer in float (quantkit fallback)")
        lines.append(f"COLLAPSED: output {c['tensor']!r} axis {c['axis']}: {len(c['channels'])} of {c['of_channels']} channels span fewer "
                     f"than {c['floor']:g} quantization steps (channel: levels {bad}); {how}")
    return lines


def effective_levels(record: CalibrationRecord, channel_ranges: Iterable[ChannelRange], floor: float = DEFAULT_LEVELS_FLOOR) -> tuple[OutputLevels, ...]:
    """Effective number of quantization levels of each channel in ``channel_ranges``, for tensors the record
    quantizes; a tensor not in the record (kept in float) is skipped.

    ``levels[c] = (hi[c] - lo[c]) / scale``: how many integer steps the channel's FP32 values span, with the
    tensor's scale (per-channel scales along the same axis: channel ``c``'s own; otherwise the largest). A
    channel below ``floor`` holds at most about ``floor`` distinct values after quantization, so decisions
    read from it (scores against a threshold) can collapse. Task adapters call this with their decision
    channels; ``quantize`` calls it with every graph output's small axes.
    """
    return effective_levels_of(record.tensors, channel_ranges, floor)


def effective_levels_of(tensors: Iterable[TensorScale], channel_ranges: Iterable[ChannelRange], floor: float = DEFAULT_LEVELS_FLOOR) -> tuple[OutputLevels, ...]:
    """:func:`effective_levels` over a tensors table (a record being built)."""
    rows = {t.name: t for t in tensors}
    out = []
    for cr in channel_ranges:
        t = rows.get(cr.tensor)
        if t is None:
            continue
        span = np.asarray(cr.hi, np.float64) - np.asarray(cr.lo, np.float64)
        s = np.asarray(t.scale, np.float64)
        step = s if (s.size == span.size and t.axis == cr.axis) else np.full(span.shape, s.max())
        out.append(OutputLevels(cr.tensor, cr.axis, tuple(float(v) for v in span / step), float(floor)))
    return tuple(out)


#: Operations an output's channels pass through unchanged (element-wise; the first input keeps the output's shape).
_ELEMENTWISE = frozenset({"Identity", "Cast", "Sigmoid", "Tanh", "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Exp", "Log",
                          "Sqrt", "Neg", "Abs", "Softmax", "Mul", "Add", "Sub", "Div", "Pow", "QuantizeLinear", "DequantizeLinear"})


def channel_axes(model: Any, name: str, max_hops: int = 32) -> tuple[int, ...]:
    """The channel axis of graph output ``name`` read from the graph (see the module docstring): the ``Concat``
    axis, axis 1 of a ``Conv``/``ConvTranspose`` output, the last axis of a ``MatMul``/``Gemm`` output, followed
    back through element-wise operations and ``Transpose`` (axes permuted); () when none is found. Axes may be
    negative (counted from the end) when no ``Transpose`` fixed the rank."""
    producer = {o: n for n in model.graph.node for o in n.output}
    perm: list[int] | None = None  # output axis j is axis perm[j] of the tensor reached so far
    t = name
    for _ in range(max_hops):
        n = producer.get(t)
        if n is None:
            return ()
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "Concat":
            axis = int(attrs["axis"].i) if "axis" in attrs else 0
        elif n.op_type in ("Conv", "ConvTranspose"):
            axis = 1
        elif n.op_type in ("MatMul", "Gemm"):
            axis = -1
        elif n.op_type == "Transpose" and "perm" in attrs:
            p = list(attrs["perm"].ints)
            perm = [p[j] for j in (perm if perm is not None else range(len(p)))]
            t = n.input[0]
            continue
        elif n.op_type in _ELEMENTWISE and n.input:
            t = n.input[0]
            continue
        else:
            return ()
        if perm is None:
            return (axis,)
        axis %= len(perm)
        return tuple(j for j, k in enumerate(perm) if k == axis)
    return ()


class OutputChannels:
    """Per-channel FP32 min/max of graph outputs along their channel axes (:func:`channel_axes`), folded image
    by image. Axes longer than :data:`MAX_CHANNELS`, and an axis whose size changes from image to image, are
    dropped (no channel ranges for them).

    Args:
        axes: ``{graph output: its channel axes}`` (negative axes count from the end).
    """

    def __init__(self, axes: Mapping[str, Sequence[int]]) -> None:
        self.axes = {n: tuple(int(a) for a in ax) for n, ax in axes.items() if ax}
        self.names = list(self.axes)
        self.lo: dict[tuple[str, int], np.ndarray] = {}
        self.hi: dict[tuple[str, int], np.ndarray] = {}
        self.sum_lo: dict[tuple[str, int], np.ndarray] = {}  # sums of each image's per-channel min and max (mean_ranges)
        self.sum_hi: dict[tuple[str, int], np.ndarray] = {}
        self.images: dict[tuple[str, int], int] = {}
        self.dropped: set[tuple[str, int]] = set()

    def fold(self, name: str, arr: Any) -> None:
        a = np.asarray(arr)
        if a.size == 0:
            return
        for axis in sorted({ax % a.ndim for ax in self.axes.get(name, ()) if -a.ndim <= ax < a.ndim}):
            k = (name, axis)
            if k in self.dropped or a.shape[axis] > MAX_CHANNELS:
                continue
            others = tuple(i for i in range(a.ndim) if i != axis)
            lo, hi = np.fmin.reduce(a, axis=others), np.fmax.reduce(a, axis=others)
            if k not in self.lo:
                self.lo[k], self.hi[k] = lo, hi
                self.sum_lo[k], self.sum_hi[k], self.images[k] = lo.astype(np.float64), hi.astype(np.float64), 1
            elif self.lo[k].shape != lo.shape:
                self.dropped.add(k)
                del self.lo[k], self.hi[k], self.sum_lo[k], self.sum_hi[k], self.images[k]
            else:
                np.fmin(self.lo[k], lo, out=self.lo[k])
                np.fmax(self.hi[k], hi, out=self.hi[k])
                self.sum_lo[k] += lo
                self.sum_hi[k] += hi
                self.images[k] += 1

    def ranges(self) -> tuple[ChannelRange, ...]:
        """Per channel, the minimum and maximum over every image folded."""
        return tuple(ChannelRange(n, ax, tuple(float(v) for v in self.lo[(n, ax)]), tuple(float(v) for v in self.hi[(n, ax)]))
                     for n, ax in sorted(self.lo))

    def mean_ranges(self) -> tuple[ChannelRange, ...]:
        """Per channel, the mean over images of each image's minimum and maximum: NNCF's range estimator for activations
        (its ``MinMax`` statistics with a mean aggregator), less moved by one image's outlier than :meth:`ranges`."""
        return tuple(ChannelRange(n, ax, tuple(float(v) for v in self.sum_lo[(n, ax)] / self.images[(n, ax)]),
                                  tuple(float(v) for v in self.sum_hi[(n, ax)] / self.images[(n, ax)])) for n, ax in sorted(self.sum_lo))

    def to_arrays(self) -> dict[str, np.ndarray]:
        keys = sorted(self.lo)
        out: dict[str, np.ndarray] = {"names": np.array(self.names, dtype=str),
                                      "axes": np.array([",".join(map(str, self.axes[n])) for n in self.names], dtype=str),
                                      "keys": np.array([f"{ax}:{n}" for n, ax in keys], dtype=str),
                                      "dropped": np.array([f"{ax}:{n}" for n, ax in sorted(self.dropped)], dtype=str)}
        for i, k in enumerate(keys):
            out[f"lo{i}"], out[f"hi{i}"] = self.lo[k], self.hi[k]
            out[f"slo{i}"], out[f"shi{i}"], out[f"n{i}"] = self.sum_lo[k], self.sum_hi[k], np.array(self.images[k])
        return out

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray]) -> OutputChannels:
        st = cls({str(n): tuple(int(x) for x in str(ax).split(",") if x) for n, ax in zip(a["names"], a["axes"])})

        def key(s: str) -> tuple[str, int]:
            ax, _, n = str(s).partition(":")
            return n, int(ax)

        for i, s in enumerate(a["keys"]):
            st.lo[key(s)], st.hi[key(s)] = a[f"lo{i}"].copy(), a[f"hi{i}"].copy()
            if f"n{i}" in a:  # a checkpoint written before the means were kept: their mean is the global range's
                st.sum_lo[key(s)], st.sum_hi[key(s)], st.images[key(s)] = a[f"slo{i}"].copy(), a[f"shi{i}"].copy(), int(a[f"n{i}"])
            else:
                st.sum_lo[key(s)], st.sum_hi[key(s)], st.images[key(s)] = a[f"lo{i}"].astype(np.float64), a[f"hi{i}"].astype(np.float64), 1
        st.dropped = {key(s) for s in a["dropped"]}
        return st


def _written(t: TensorScale) -> tuple[float, float]:
    lo, hi = t.representable()
    return float(np.min(lo)), float(np.max(hi))


def output_summary(model: Any, tensors: Sequence[TensorScale], ranges: Mapping[str, tuple[float, float]],
                   qmodel: Any = None) -> list[dict[str, Any]]:
    """Every graph output of the float ``model``, in graph order: ``name``, ``quantized``, and for quantized ones
    ``dtype``, ``scale``/``zero_point`` (first channel), ``calibrated`` and ``written`` ``[min, max]``.

    An output that ORT quantized with another tensor's parameters (the output of a Reshape, Transpose, ... shares its
    input's scale) is found through the ``DequantizeLinear`` that produces it in ``qmodel``; ``shares`` names the
    record row whose parameters it carries."""
    rows = {t.name: t for t in tensors}
    shared = _dq_scale_rows(qmodel) if qmodel is not None else {}
    out = []
    for o in model.graph.output:
        t = rows.get(o.name)
        row: dict[str, Any] = {"name": o.name, "quantized": t is not None}
        if t is None and shared.get(o.name) in rows:
            t = rows[shared[o.name]]
            row.update({"quantized": True, "shares": t.name})
        if t is not None:
            row.update({"dtype": t.dtype, "scale": t.scale[0], "zero_point": t.zero_point[0], "written": list(_written(t))})
        if o.name in ranges:
            row["calibrated"] = [float(ranges[o.name][0]), float(ranges[o.name][1])]
        out.append(row)
    return out


def _dq_scale_rows(qmodel: Any) -> dict[str, str]:
    """Graph output name -> the record row name of the scale its producing ``DequantizeLinear`` reads
    (``<row>_scale``, the naming of :func:`quantkit.quantize.scales.extract_scales`)."""
    outs = {o.name for o in qmodel.graph.output}
    return {n.output[0]: n.input[1][: -len("_scale")] for n in qmodel.graph.node
            if n.op_type == "DequantizeLinear" and n.output and n.output[0] in outs and len(n.input) > 1 and n.input[1].endswith("_scale")}


def range_changes(model: Any, tensors: Sequence[TensorScale], ranges: Mapping[str, tuple[float, float]], symmetric: bool) -> list[dict[str, Any]]:
    """Quantized activations whose written range differs from the calibrated one (see the module docstring).

    ``symmetric``: activations were quantized symmetrically (the needed range is ``[-m, m]``, ``m = max|x|``).
    Each entry: ``tensor``, ``kind`` (``clipped`` | ``widened``), ``calibrated``, ``written``, ``graph_output``.
    """
    outputs = {o.name for o in model.graph.output}
    consumers: dict[str, set[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, set()).add(n.op_type)
    out = []
    for t in tensors:
        if t.role != "activation" or t.name not in ranges or len(t.scale) > 1:  # per channel: from the channels' own ranges
            continue
        lo, hi = min(float(ranges[t.name][0]), 0.0), max(float(ranges[t.name][1]), 0.0)
        if symmetric:
            lo, hi = -max(-lo, hi), max(-lo, hi)
        wlo, whi = _written(t)
        step = float(max(t.scale))
        kind = None
        if wlo > lo + step or whi < hi - step:
            fused = t.name not in outputs and consumers.get(t.name, set()) <= {"Relu", "Clip"}
            kind = None if fused else "clipped"
        elif hi > lo and (whi - wlo) > WIDENED_FACTOR * (hi - lo):
            kind = "widened"
        if kind:
            out.append({"tensor": t.name, "kind": kind, "calibrated": [float(ranges[t.name][0]), float(ranges[t.name][1])],
                        "written": [wlo, whi], "graph_output": t.name in outputs})
    return out


def describe_change(c: Mapping[str, Any]) -> str:
    """One line for a :func:`range_changes` entry."""
    what = "graph output" if c["graph_output"] else "tensor"
    (a, b), (x, y) = c["calibrated"], c["written"]
    lost = "values outside it are lost" if c["kind"] == "clipped" else "resolution is lost"
    return f"{what} {c['tensor']!r}: calibrated range [{a:.4g}, {b:.4g}] but the written model represents [{x:.4g}, {y:.4g}] ({c['kind']}: {lost})"


def relu_fed_outputs(model: Any, ranges: Mapping[str, Any], op_types: Iterable[str], excluded: Iterable[str]) -> list[str]:
    """Graph outputs to which ORT's ``adjust_tensor_ranges`` (``base_quantizer.py``, ORT 1.27-1.32) would give the
    range of the Relu/Clip they feed: the input of a quantized Relu/Clip with a single consumer takes the
    output's range, graph output or not. The engine pins these to their own range."""
    outputs = {o.name for o in model.graph.output}
    ops, skip = set(op_types), set(excluded)
    consumers: dict[str, int] = {}
    for n in model.graph.node:
        for i in set(n.input):
            consumers[i] = consumers.get(i, 0) + 1
    hit = []
    for n in model.graph.node:
        if n.op_type in ("Relu", "Clip") and n.op_type in ops and n.name not in skip and n.input and n.input[0] in outputs \
                and consumers.get(n.input[0]) == 1 and n.input[0] in ranges and n.output[0] in ranges:
            hit.append(n.input[0])
    return sorted(set(hit))


def findings(model: Any, tensors: Sequence[TensorScale], ranges: Any, symmetric: bool, channels: Iterable[ChannelRange],
             pinned: Sequence[str], levels_floor: float, qmodel: Any = None) -> dict[str, Any]:
    """The record's account of what the written model computes: ``outputs`` always; ``outputs_pinned``,
    ``range_changes`` and ``collapsed_outputs`` when not empty (each change and collapse logged as a warning).

    Args:
        model: the float model quantized; tensors: the record's rows; ranges: ORT ``TensorsData`` calibrated;
        symmetric: activations quantized symmetrically; channels: graph outputs' channel ranges;
        pinned: graph outputs kept at their own range; levels_floor: see :func:`effective_levels`;
        qmodel: the quantized model (outputs that share another tensor's parameters).
    """
    pairs = {k: (float(np.min(ranges[k].range_value[0])), float(np.max(ranges[k].range_value[1]))) for k in ranges.data}
    found: dict[str, Any] = {"outputs": output_summary(model, tensors, pairs, qmodel)}
    if pinned:
        found["outputs_pinned"] = list(pinned)
    changes = range_changes(model, tensors, pairs, symmetric)
    if changes:
        found["range_changes"] = changes
        for c in changes:
            log.warning("%s", describe_change(c))
    levels = [lv for lv in effective_levels_of(tensors, channels, levels_floor) if lv.collapsed]
    if levels:
        fixes = [collapse_fix(model, lv.tensor) for lv in levels]
        found["collapsed_outputs"] = [{**lv.to_dict(), **({"fix": f} if f else {})} for lv, f in zip(levels, fixes)]
        for lv, f in zip(levels, fixes):
            log.warning("%s", lv.describe(f))
    return found

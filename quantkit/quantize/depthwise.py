"""Depthwise convolutions whose input channels one per-tensor 8-bit grid flattens: a ``quantkit compare`` finding.

A depthwise ``Conv`` (``group`` = input channels > 1) filters each channel on its own, so nothing mixes a channel
with a wider one before the next layer; the channels of its input can differ in range by orders of magnitude
(MobileNet-style backbones: hard-swish outputs, measured 77x median and up to 3530x between the widest and the
narrowest channel of one tensor in PicoDet CDLA). Under one per-tensor scale, sized for the widest channel, a narrow
channel spans a few integer steps and its information is gone. NNCF's CPU setup quantizes these inputs per channel
(OpenVINO's CPU plugin runs that). Measured with ``bench/bench_depthwise.py`` (OpenVINO 2026.4, 2-core AMD EPYC Zen 4):
NNCF's own file against the same file with only its per-channel depthwise-input scales made per-tensor (range = the union
of the channels' ranges), agreement with FP32: PicoDet CDLA (31 inputs, 16 rendered pages) box F1 0.969 -> 0.710;
PP-OCRv4 det, the demo's ``ppocr_det`` (11 inputs, at most 16 % of any one's channels narrow, its 48 reference images)
pixel IoU 0.979 -> 0.924.

ONNX Runtime's integer convolution (``QLinearConv``, and the QDQ ``DQ -> Conv -> Q`` group it fuses into one) takes one
input scale, so a per-channel input scale cannot run as an integer kernel there: on ONNX Runtime the fix is to keep
the flagged convolutions (and the element-wise chain feeding them) in float (``quantkit fallback``), at a speed cost
measured per model by the target's recipe choice (:mod:`.recipes`), or to deploy for OpenVINO.

Our ``openvino`` placement does as NNCF (:func:`per_channel_inputs`): calibration records every depthwise input's FP32
range per channel with NNCF's estimator, the mean over images of each image's min and max (the record's
``calibration.depthwise_ranges``, :func:`ranges_entry`; the global min and max gave PicoDet 0.934 box F1 against 0.962
with NNCF's ranges in the same placement), and the placement rewrites that
input's Q/DQ pair per channel (axis 1) where only depthwise convolutions read it; a record of NNCF's per-channel pairs
(``nncf:openvino``) gives its own ranges (:func:`record_ranges`).

:func:`narrow_channels` measures it: the FP32 model's per-channel ranges of every depthwise input over the given images,
in steps of the scale the quantized model's record gives that tensor (:func:`quantkit.quantize.outputs.effective_levels_of`:
a per-channel scale along axis 1 counts per channel).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..artifacts.record import CalibrationRecord
from ..progress import progress
from .outputs import DEFAULT_LEVELS_FLOOR, OutputChannels, effective_levels_of

NARROW_SHARE = 0.0
"""A depthwise input is flagged when it has a narrow live channel (:data:`LIVE`) and at least this share of its live channels
are narrow: 0, any one, because a few narrow channels per input already cost the PP-OCR detector 0.055 pixel IoU (module
docstring)."""

LIVE = 1e-3
"""A channel whose FP32 range is under this share of the widest channel's is taken as constant (nothing to lose), not narrow."""

FIX = ("per-channel activation scales fix it where the runtime takes them: our openvino placement and NNCF's file do "
       "(targets.openvino.recipes: openvino, nncf; "
       "on OpenVINO, that change alone: box F1 vs FP32 0.710 -> 0.969 on PicoDet CDLA, pixel IoU 0.924 -> 0.979 on the PP-OCR "
       "detector); ONNX Runtime's integer convolution takes one input scale, so there keep these convolutions in float "
       "(quantkit fallback)")


@dataclasses.dataclass(frozen=True)
class NarrowChannels:
    """One depthwise ``conv`` whose input ``tensor`` has ``narrow`` (channel indices) of ``live`` channels (FP32 range above :data:`LIVE` of the widest)
    spanning fewer than ``floor`` integer steps of the quantized model's scale; ``levels``: steps per channel (all
    ``channels`` of them, 0 for a constant channel)."""

    conv: str
    tensor: str
    channels: int
    live: int
    narrow: tuple[int, ...]
    levels: tuple[float, ...]
    floor: float

    @property
    def share(self) -> float:
        """Narrow channels / live channels."""
        return len(self.narrow) / self.live if self.live else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"conv": self.conv, "tensor": self.tensor, "channels": self.channels, "live": self.live, "narrow": len(self.narrow),
                "median_levels": round(float(np.median([self.levels[i] for i in self.narrow])), 2) if self.narrow else None,
                "floor": self.floor}

    def describe(self) -> str:
        med = np.median([self.levels[i] for i in self.narrow]) if self.narrow else 0.0
        return (f"NARROW CHANNELS: depthwise Conv {self.conv!r} input {self.tensor!r}: {len(self.narrow)} of {self.live} channels span fewer "
                f"than {self.floor:g} steps of its one scale (median {med:.1f})")


def depthwise_inputs(model: Any) -> dict[str, str]:
    """``{input tensor: Conv name}`` of every depthwise ``Conv`` of ``model`` (``group`` > 1 and equal to the weight's
    output channels with one input channel per group: weight shape ``[C, 1, kh, kw]``). A tensor read by several
    depthwise Convs maps to the first."""
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    out: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type != "Conv" or len(n.input) < 2:
            continue
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        w = inits.get(n.input[1])
        if group > 1 and w is not None and len(w) >= 2 and w[1] == 1 and w[0] == group:
            out.setdefault(n.input[0], n.name or n.input[0])
    return out


def narrow_channels(fp32_model: Any, record: CalibrationRecord, batches: Iterable[Any], *, floor: float = DEFAULT_LEVELS_FLOOR,
                    share: float = NARROW_SHARE, total: int | None = None) -> list[NarrowChannels]:
    """Depthwise inputs the record quantizes on a grid too coarse for their channels (module docstring), worst first.

    Args:
        fp32_model: the float model (``onnx.ModelProto``, file or intake folder).
        record: the quantized model's record (its activation scales; a per-channel scale on axis 1 counts per channel).
        batches: model inputs, as :func:`quantkit.quantize.compare.compare_layers` takes them.
        floor: fewest integer steps a channel's FP32 range should span (:data:`~.outputs.DEFAULT_LEVELS_FLOOR`, 16).
        share: flag a tensor with a narrow channel when at least this share of its live channels is (:data:`NARROW_SHARE`).

    Returns:
        one :class:`NarrowChannels` per flagged tensor, by share of narrow channels (highest first); empty when the model
        has no depthwise Conv or the record quantizes none of their inputs.
    """
    from ..runtimes import make_runtime
    from .compare import _feeds, _load

    model = _load(fp32_model)
    dw = {t: c for t, c in depthwise_inputs(model).items() if t in {r.name for r in record.tensors if r.role == "activation"}}
    if not dw:
        return []
    inputs = {i.name for i in model.graph.input}
    names = [t for t in dw if t not in inputs]
    folded = OutputChannels({t: (1,) for t in dw})
    run = make_runtime("onnxruntime", model, outputs=names, graph_optimization_level="disable", name="fp32")
    with run:
        for feed in progress(_feeds(batches, model.graph.input[0].name), total=total, desc="depthwise inputs"):
            got = run.infer(feed, names) if names else {}
            for t in dw:
                folded.fold(t, feed[t] if t in inputs else got[t])
    found = []
    for cr in folded.ranges():
        got_levels = effective_levels_of(record.tensors, [cr], floor)
        if not got_levels:
            continue
        lv = got_levels[0]
        span = np.asarray(cr.hi) - np.asarray(cr.lo)
        alive = span > LIVE * span.max()
        live = int(np.count_nonzero(alive))
        narrow = tuple(i for i, v in enumerate(lv.levels) if alive[i] and v < floor)
        hit = NarrowChannels(dw[lv.tensor], lv.tensor, len(span), live, narrow, lv.levels, float(floor))
        if narrow and hit.share >= share:
            found.append(hit)
    return sorted(found, key=lambda h: (-h.share, h.conv))


def ranges_entry(channel_ranges: Iterable[Any], tensors: Iterable[str]) -> dict[str, dict[str, list[float]]]:
    """The record's ``calibration.depthwise_ranges``: ``{tensor: {"lo": [...], "hi": [...]}}`` (FP32 per channel of axis 1, 6
    significant digits) of the ``channel_ranges`` (:class:`~.outputs.ChannelRange`, the calibration's per-image means,
    :meth:`~.outputs.OutputChannels.mean_ranges`) whose tensor is in ``tensors``."""
    keep = set(tensors)
    return entry_of({c.tensor: (c.lo, c.hi) for c in channel_ranges if c.tensor in keep and c.axis == 1})


def entry_of(ranges: dict[str, tuple[Any, Any]]) -> dict[str, dict[str, list[float]]]:
    """``{tensor: (lo, hi)}`` per channel as the record's ``calibration.depthwise_ranges`` entry (6 significant digits)."""
    return {t: {"lo": [float(f"{v:.6g}") for v in lo], "hi": [float(f"{v:.6g}") for v in hi]} for t, (lo, hi) in ranges.items()}


def record_ranges(record: CalibrationRecord) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-channel depthwise-input ranges a record carries: its ``calibration.depthwise_ranges`` (our calibration), else the
    represented ranges of its per-channel activation pairs on axis 1 (NNCF's file)."""
    return entry_ranges((record.calibration or {}).get("depthwise_ranges") or {}) or {
        t.name: t.representable() for t in record.tensors if t.role == "activation" and t.axis == 1 and len(t.scale) > 1}


def entry_ranges(entry: dict[str, dict[str, list[float]]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A ``calibration.depthwise_ranges`` entry (:func:`entry_of`) as ``{tensor: (lo, hi)}`` float64 arrays, one value per channel."""
    return {t: (np.asarray(v["lo"], np.float64), np.asarray(v["hi"], np.float64)) for t, v in entry.items()}


def per_channel_inputs(model: Any, dw: dict[str, str], ranges: dict[str, tuple[Any, Any]], *, symmetric: bool) -> list[str]:
    """Rewrite, in ``model`` (a QDQ ``onnx.ModelProto`` ORT's quantizer wrote), the Q/DQ pair of each depthwise input of
    ``dw`` (``{tensor: Conv name}``, :func:`depthwise_inputs` of the float model) that ``ranges`` gives per channel: its
    scale and zero point become one per channel (axis 1) of the FP32 range ``[min(lo, 0), max(hi, 0)]``, as int8
    (symmetric: zero point 0) whatever the pair's type was, as NNCF writes them: a per-channel uint8 pair right after a
    Conv is fused by ONNX Runtime 1.32 into a ``QLinearConv`` whose per-channel output zero point it then refuses at run
    time (:mod:`.nncf_engine`). Only where every reader of the pair is that depthwise Conv (a pair shared with another
    reader keeps one scale) and the model's opset is 13 or more (``axis``).

    Returns:
        the tensors rewritten (sorted).
    """
    from onnx import helper, numpy_helper

    if max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0) < 13:
        return []
    inits = {i.name: i for i in model.graph.initializer}
    readers: dict[str, list[Any]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    done = []
    for t, (lo, hi) in sorted(ranges.items()):
        qs = [n for n in readers.get(t, []) if n.op_type == "QuantizeLinear"]
        if t not in dw or len(qs) != 1 or len(qs[0].input) < 3 or qs[0].input[1] not in inits or qs[0].input[2] not in inits:
            continue
        q = qs[0]
        dqs = readers.get(q.output[0], [])
        ok = dqs and all(d.op_type == "DequantizeLinear" and d.input[1:3] == q.input[1:3] for d in dqs) and all(
            r.op_type == "Conv" and r.name == dw[t] and r.input[0] == d.output[0] for d in dqs for r in readers.get(d.output[0], []))
        shared = [n for n in readers.get(q.input[1], []) if n is not q and n not in dqs]
        if not ok or shared:
            continue
        info = np.iinfo(np.int8)
        lo, hi = np.minimum(np.asarray(lo, np.float64), 0.0), np.maximum(np.asarray(hi, np.float64), 0.0)
        if symmetric:
            scale = np.maximum(np.maximum(-lo, hi) * 2 / (int(info.max) - int(info.min)), 1e-12)
            zp = np.zeros(scale.shape)
        else:
            scale = np.maximum((hi - lo) / (int(info.max) - int(info.min)), 1e-12)
            zp = np.clip(np.round(info.min - lo / scale), info.min, info.max)
        for name, arr in ((q.input[1], scale.astype(np.float32)), (q.input[2], zp.astype(np.int8))):
            inits[name].CopyFrom(numpy_helper.from_array(arr, name))
        stale = [v for v in model.graph.value_info if v.name == q.output[0]]  # the uint8 type ORT's quantizer wrote for it
        for v in stale:
            model.graph.value_info.remove(v)
        for node in (q, *dqs):
            for a in [a for a in node.attribute if a.name == "axis"]:
                node.attribute.remove(a)
            node.attribute.append(helper.make_attribute("axis", 1))
        done.append(t)
    return done


def finding_lines(found: list[NarrowChannels], top: int = 6) -> list[str]:
    """What ``quantkit compare`` prints: one line per flagged depthwise input (the ``top`` worst), then the fix."""
    if not found:
        return []
    lines = [h.describe() for h in found[:top]]
    if len(found) > top:
        lines.append(f"NARROW CHANNELS: {len(found) - top} more depthwise inputs like these")
    lines.append(f"NARROW CHANNELS: {len(found)} depthwise input{'s' if len(found) != 1 else ''} flattened by one scale; {FIX}")
    return lines


__all__ = ["FIX", "LIVE", "NARROW_SHARE", "NarrowChannels", "depthwise_inputs", "finding_lines", "narrow_channels", "per_channel_inputs",
           "entry_of", "entry_ranges", "ranges_entry", "record_ranges"]

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

FIX = ("per-channel activation scales fix it where the runtime takes them: NNCF's file does (targets.openvino.recipes: nncf; "
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


def finding_lines(found: list[NarrowChannels], top: int = 6) -> list[str]:
    """What ``quantkit compare`` prints: one line per flagged depthwise input (the ``top`` worst), then the fix."""
    if not found:
        return []
    lines = [h.describe() for h in found[:top]]
    if len(found) > top:
        lines.append(f"NARROW CHANNELS: {len(found) - top} more depthwise inputs like these")
    lines.append(f"NARROW CHANNELS: {len(found)} depthwise input{'s' if len(found) != 1 else ''} flattened by one scale; {FIX}")
    return lines


__all__ = ["FIX", "LIVE", "NARROW_SHARE", "NarrowChannels", "depthwise_inputs", "finding_lines", "narrow_channels"]

"""Layer-by-layer error of a quantized model against its FP32 model, streaming and sub-sampled.

Shape of ORT's ``qdq_loss_debug`` (mark tensors as outputs, run both models, compare), but bounded: each
batch's tensors are reduced to running sums on a fixed random subsample of at most ``max_elements``
elements per tensor and then dropped, so memory is one batch's activations whatever the number of
images. Tensors are fetched by marking them as outputs on ordinary ONNX Runtime runs (:func:`quantkit.runtimes.make_runtime`).

For an activation ``T`` of the record, the quantized value is ``T_DequantizeLinear_Output`` (QDQ, float)
or ``(T_quantized - zp) * scale`` (QOperator, integer tensor). Metrics per tensor, over all sampled
elements of all images (x = FP32, y = quantized):

* ``sqnr_db = 10 log10(sum x^2 / sum (x - y)^2)`` (signal-to-quantization-noise ratio; ``inf`` when
  the two agree exactly, written as ``null`` in JSON);
* ``cosine = sum xy / sqrt(sum x^2 sum y^2)``;
* ``max_abs_error = max |x - y|`` (float units of the tensor);
* ``clipping_rate``: fraction of FP32 values outside the representable range
  ``[(qmin - zp) * s, (qmax - zp) * s]`` (per channel where per-channel).
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.record import CalibrationRecord, TensorScale
from ..errors import InputFileError, ModelError
from ..modelio import load_model
from ..progress import progress
from ..runtimes import make_runtime

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TensorComparison:
    """Statistics of one tensor, FP32 vs quantized: see the module docstring for the formulas.

    ``n`` = sampled elements; ``kind`` = ``activation`` (a quantized activation of the record) or ``output`` (a graph
    output, always listed); ``note`` says why a tensor has no statistics (e.g. its shape depends on the data and
    differs between the two models, as after NonZero -> GatherND).
    """

    tensor: str
    sqnr_db: float
    cosine: float
    max_abs_error: float
    clipping_rate: float
    n: int
    kind: str = "activation"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"TensorComparison({self.tensor!r}, sqnr={self.sqnr_db:.1f} dB, cos={self.cosine:.4f})"


def _load(model: Any) -> Any:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    p = Path(model)
    if p.is_dir():
        p = p / ("model.onnx" if (p / "model.onnx").is_file() else "model_int8.onnx")
    return load_model(p)


def _feeds(batches: Iterable[Any], input_name: str) -> Iterable[dict[str, np.ndarray]]:
    for b in batches:
        if isinstance(b, dict):
            yield b
        elif isinstance(b, tuple):  # (entries, array) from CalibrationSetReader.iter_batches
            yield {input_name: b[1]}
        else:
            yield {input_name: np.asarray(b)}


def _channel_bounds(t: TensorScale, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = t.representable()
    if len(lo) == 1:
        return lo[0], hi[0]
    shape = [1] * x.ndim
    shape[t.axis or 0] = len(lo)
    return lo.reshape(shape), hi.reshape(shape)


class _Acc:
    def __init__(self, kind: str = "activation") -> None:
        self.xx = self.ee = self.xy = self.yy = 0.0
        self.maxe = 0.0
        self.clip = 0
        self.n = 0
        self.kind = kind
        self.note = ""

    def add(self, xs: np.ndarray, ys: np.ndarray) -> None:
        xs64, ys64 = xs.astype(np.float64), ys.astype(np.float64)
        self.xx += float(xs64 @ xs64)
        self.yy += float(ys64 @ ys64)
        self.xy += float(xs64 @ ys64)
        e = xs64 - ys64
        self.ee += float(e @ e)
        self.maxe = max(self.maxe, float(np.max(np.abs(e))) if e.size else 0.0)
        self.n += int(xs.size)

    def result(self, name: str) -> TensorComparison:
        if self.note:
            return TensorComparison(name, float("nan"), float("nan"), float("nan"), float("nan"), 0, self.kind, self.note)
        sq = float(10 * np.log10(self.xx / self.ee)) if self.ee > 0 else float("inf")
        cos = float(self.xy / np.sqrt(self.xx * self.yy)) if self.xx > 0 and self.yy > 0 else float("nan")
        return TensorComparison(name, sq, cos, float(self.maxe), self.clip / self.n if self.n else float("nan"), self.n, self.kind)


def _shape_note(name: str, x: np.ndarray, y: np.ndarray) -> str:
    note = (f"shape differs between the FP32 and quantized runs ({list(x.shape)} vs {list(y.shape)}): the shape depends on the "
            "data (e.g. NonZero -> GatherND); excluded")
    log.warning("compare: tensor %r: %s", name, note)
    return note


def _sample(rng_seed: int, name: str, size: int, k: int) -> np.ndarray | None:
    if size <= k:
        return None
    rng = np.random.default_rng([rng_seed, zlib.crc32(name.encode())])
    return np.sort(rng.choice(size, k, replace=False))


def qdq_outputs(model: Any) -> dict[str, str]:
    """``{tensor: the output of the DequantizeLinear after the QuantizeLinear that reads it}`` for every Q -> DQ pair of
    ``model``, whatever the nodes and tensors are called (ORT names them ``T_DequantizeLinear_Output``, NNCF otherwise)."""
    readers: dict[str, list[Any]] = {}
    for n in model.graph.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    out: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in out:
            dq = next((d for d in readers.get(n.output[0], []) if d.op_type == "DequantizeLinear"), None)
            if dq is not None:
                out[n.input[0]] = dq.output[0]
    return out


def compare_layers(
    fp32_model: Any,
    quant_model: Any,
    record: CalibrationRecord,
    batches: Iterable[Any],
    *,
    tensors: Sequence[str] | None = None,
    max_elements: int = 16384,
    seed: int = 0,
    fp32_level: str = "disable",
    quant_level: str = "disable",
    total: int | None = None,
) -> Any:
    """Per-tensor SQNR, cosine, max error and clipping rate of ``quant_model`` vs ``fp32_model``.

    Args:
        fp32_model / quant_model: ``onnx.ModelProto``, a file, or a folder (``model.onnx`` / ``model_int8.onnx``).
        record: the quantized model's record (which tensors, their scales).
        batches: model inputs: arrays ``(N,3,H,W) float32``, feed dicts, or ``(entries, array)`` pairs.
        tensors: activation names to compare (default: every activation of the record found in both).
        max_elements: sampled elements per tensor per batch (fixed positions, seeded).
        fp32_level / quant_level: ORT graph optimization level for each run ("disable" ... "all").

    Returns:
        DataFrame (one row per tensor, columns of :class:`TensorComparison`), sorted by ``sqnr_db`` ascending. Every
        graph output is a row (``kind`` = ``output``). A tensor whose shape differs between the two models on an image
        (data-dependent, e.g. after NonZero) has no statistics and says so in ``note`` (and in a warning).
    """
    import pandas as pd

    if getattr(record, "mode", "static") == "dynamic":
        raise InputFileError("the record is a dynamic one: it has no activation scales (activations are quantized at run time); "
                          "compare needs a static record (a folder written by 'quantkit quantize --calibration-set DIR')")
    fm, qm = _load(fp32_model), _load(quant_model)
    acts = {t.name: t for t in record.tensors if t.role == "activation"}
    inputs = {i.name for i in fm.graph.input}
    f_have = {o for n in fm.graph.node for o in n.output} | inputs
    q_have = {o for n in qm.graph.node for o in n.output}
    q_outputs = {o.name for o in qm.graph.output}
    pairs: dict[str, tuple[str, bool]] = {}  # name -> (quant tensor, is_integer)
    dq_of = qdq_outputs(qm)
    for name in tensors or sorted(acts):
        if name not in acts:
            raise InputFileError(f"tensor {name!r} is not a quantized activation of the record; pick one from record.table()")
        if name not in f_have:
            continue
        if f"{name}_DequantizeLinear_Output" in q_have:
            pairs[name] = (f"{name}_DequantizeLinear_Output", False)
        elif name in dq_of:  # another engine's QDQ file (NNCF's): the pair found by the graph, not by ORT's names
            pairs[name] = (dq_of[name], False)
        elif name in q_outputs and name in q_have:  # graph output: ORT's last DequantizeLinear keeps the name
            pairs[name] = (name, False)
        elif f"{name}_quantized" in q_have or (name in inputs and f"{name}_quantized" in q_have):
            pairs[name] = (f"{name}_quantized", True)
    if not pairs:
        raise ModelError(f"none of the record's {len(acts)} quantized activations has a QuantizeLinear -> DequantizeLinear pair "
                         "or a *_quantized tensor in the quantized model; pass the model_int8.onnx written with this record.json")
    input_name = fm.graph.input[0].name
    outs = [o.name for o in fm.graph.output if o.name not in pairs and o.name in q_outputs]
    f_names = [n for n in pairs if n not in inputs] + outs
    q_names = [q for q, _ in pairs.values()] + outs
    acc = {n: _Acc() for n in pairs} | {o: _Acc("output") for o in outs}
    for o in pairs:
        if o in {x.name for x in fm.graph.output}:
            acc[o].kind = "output"
    idx_cache: dict[tuple[str, int], np.ndarray | None] = {}
    frun = make_runtime("onnxruntime", fm, outputs=f_names, graph_optimization_level=fp32_level, name="fp32")
    qrun = make_runtime("onnxruntime", qm, outputs=q_names, graph_optimization_level=quant_level, name="quantized")
    with frun, qrun:
        for feed in progress(_feeds(batches, input_name), total=total, desc="compare"):
            fo = frun.infer(feed, f_names) if f_names else {}
            fo.update({k: v for k, v in feed.items() if k in pairs})
            qo = qrun.infer(feed, q_names)
            for name, a in acc.items():
                if a.note:
                    continue
                qname, is_int = pairs.get(name, (name, False))
                x = np.asarray(fo[name], np.float32)
                y = qo[qname]
                t = acts.get(name)
                if is_int and t is not None:
                    lo_s = np.asarray(t.scale, np.float32)
                    zp = np.asarray(t.zero_point, np.float32)
                    y = (y.astype(np.float32) - zp[0]) * lo_s[0] if len(lo_s) == 1 else y.astype(np.float32)
                y = np.asarray(y, np.float32)
                if x.shape != y.shape:
                    a.note = _shape_note(name, x, y)
                    continue
                key = (name, x.size)  # a data-dependent tensor changes size from image to image
                if key not in idx_cache:
                    idx_cache[key] = _sample(seed, name, x.size, max_elements)
                sel = idx_cache[key]
                xs = x.reshape(-1) if sel is None else x.reshape(-1)[sel]
                ys = y.reshape(-1) if sel is None else y.reshape(-1)[sel]
                if t is not None:
                    lo, hi = _channel_bounds(t, x)
                    clipped = (x < lo) | (x > hi)
                    a.clip += int(np.count_nonzero(clipped.reshape(-1) if sel is None else np.broadcast_to(clipped, x.shape).reshape(-1)[sel]))
                a.add(xs, ys)
    rows = [acc[n].result(n).to_dict() for n in acc]
    df = pd.DataFrame(rows, columns=[f.name for f in dataclasses.fields(TensorComparison)])
    return df.sort_values("sqnr_db", kind="stable").reset_index(drop=True)


def compare_outputs(model: Any, batches: Iterable[Any], *, level_a: str = "disable", level_b: str = "all",
                    tensors: Sequence[str] | None = None, total: int | None = None) -> Any:
    """The same model under two ORT graph optimization levels (QDQ simulation vs fused kernels).

    Compares the graph outputs (and ``tensors`` if given). Returns a DataFrame like :func:`compare_layers`
    (``clipping_rate`` is NaN: there is no reference range).
    """
    import pandas as pd

    m = _load(model)
    names = list(tensors or []) + [o.name for o in m.graph.output if o.name not in (tensors or [])]
    input_name = m.graph.input[0].name
    outs = {o.name for o in m.graph.output}
    acc = {n: _Acc("output" if n in outs else "activation") for n in names}
    with make_runtime("onnxruntime", m, outputs=names, graph_optimization_level=level_a, name=level_a) as ra, \
            make_runtime("onnxruntime", m, outputs=names, graph_optimization_level=level_b, name=level_b) as rb:
        for feed in progress(_feeds(batches, input_name), total=total, desc="compare levels"):
            oa, ob = ra.infer(feed, names), rb.infer(feed, names)
            for n in names:
                a = acc[n]
                if a.note:
                    continue
                if oa[n].shape != ob[n].shape:
                    a.note = _shape_note(n, oa[n], ob[n])
                    continue
                a.add(oa[n].reshape(-1), ob[n].reshape(-1))
    rows = [{**acc[n].result(n).to_dict(), "clipping_rate": float("nan")} for n in names]
    return pd.DataFrame(rows, columns=[f.name for f in dataclasses.fields(TensorComparison)])


def clipping_rates(fp32_model: Any, record: CalibrationRecord, batches: Iterable[Any], *, total: int | None = None) -> Any:
    """Per quantized activation: the fraction of FP32 values outside its representable range.

    Every element is counted (no sampling): ``clip_low`` = share below ``(qmin - zp) * s``, ``clip_high``
    = share above ``(qmax - zp) * s``; ``clipping_rate`` = their sum. Used by the drift check: a site set
    whose activations leave the calibrated ranges clips more than the calibration set did.

    Args:
        fp32_model: FP32 ``onnx.ModelProto``, file, or intake folder.
        record: the calibration record (activation scales and zero points).
        batches: arrays, feed dicts or ``(entries, array)`` pairs.

    Returns:
        DataFrame: tensor, clipping_rate, clip_low, clip_high, n (elements), lo, hi (representable range),
        range_min, range_max (calibrated), sorted by clipping_rate descending.
    """
    import pandas as pd

    fm = _load(fp32_model)
    inputs = {i.name for i in fm.graph.input}
    have = {o for n in fm.graph.node for o in n.output} | inputs
    acts = [t for t in record.tensors if t.role == "activation" and t.name in have]
    if not acts:
        raise ModelError("no activation of the record is a tensor of the FP32 model; pass the model the record was made from")
    names = [t.name for t in acts if t.name not in inputs]
    low = {t.name: 0 for t in acts}
    high = {t.name: 0 for t in acts}
    count = {t.name: 0 for t in acts}
    input_name = fm.graph.input[0].name
    with make_runtime("onnxruntime", fm, outputs=names, graph_optimization_level="disable", name="fp32") as run:
        for feed in progress(_feeds(batches, input_name), total=total, desc="clipping"):
            out = run.infer(feed, names) if names else {}
            out.update({k: v for k, v in feed.items() if k in low})
            for t in acts:
                x = out[t.name]
                lo, hi = _channel_bounds(t, x)
                low[t.name] += int(np.count_nonzero(x < lo))
                high[t.name] += int(np.count_nonzero(x > hi))
                count[t.name] += int(x.size)
    rows = []
    for t in acts:
        lo, hi = t.representable()
        n = count[t.name]
        rows.append({"tensor": t.name, "clipping_rate": (low[t.name] + high[t.name]) / n if n else float("nan"),
                     "clip_low": low[t.name] / n if n else float("nan"), "clip_high": high[t.name] / n if n else float("nan"),
                     "n": n, "lo": float(lo.min()), "hi": float(hi.max()), "range_min": t.range_min, "range_max": t.range_max})
    df = pd.DataFrame(rows, columns=["tensor", "clipping_rate", "clip_low", "clip_high", "n", "lo", "hi", "range_min", "range_max"])
    return df.sort_values("clipping_rate", ascending=False, kind="stable").reset_index(drop=True)


def plot_layer_errors(df: Any, ax: Any = None, *, top: int = 30) -> Any:
    """Bar chart of the ``top`` lowest-SQNR tensors of a :func:`compare_layers` table; returns the Figure."""
    from matplotlib.figure import Figure

    d = df.sort_values("sqnr_db").head(top)
    if ax is None:
        fig = Figure(figsize=(8, max(3, 0.25 * len(d))))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    ax.barh(d["tensor"], d["sqnr_db"].clip(upper=100))
    ax.invert_yaxis()
    ax.set_xlabel("SQNR (dB), FP32 vs quantized")
    ax.set_title("Lowest-SQNR tensors")
    fig.tight_layout()
    return fig

"""Bounded-memory, resumable range collection that reproduces ONNX Runtime's calibrators (exactly, or within a
stated tolerance for Percentile).

ORT's ``quantize_static`` calls ``calibrator.collect_data(reader)`` once, and the histogram calibrators
(Entropy, Percentile, Distribution) keep every intermediate output of every image until the reader is
exhausted (issue 5: 6.1 GB for 8 images at 640x640). Calling ``collect_data`` once per chunk bounds the
memory but changes the result: ``HistogramCollector`` fixes its bins from the first chunk and merges
later chunks by extending them (measured on PP-OCR, 8 images, one image per chunk: percentile ranges off
by up to 27 %, entropy by up to 93 % of the tensor's range). So, per method:

* MinMax: ORT's ``collect_data`` once per chunk of ``calibration_chunk_size`` images; ``merge_range``
  takes min of mins / max of maxes: exact.
* MinMax with ``moving_average``: ORT averages per-image min/max within one call (``np.nanmean``); we
  keep those per-image reduced values (two numbers per tensor) across chunks and let ORT average them
  once, as in one call: exact; memory grows by those scalars only.
* Percentile, and Entropy with ``num_quantized_bins >= num_bins`` (ORT's defaults): one streaming pass
  (:class:`_FineHistogramState`): exact min/max, a fine grid counted in full for the first image and in the
  tails only afterwards, rebinned at the end onto ORT's one-call edges. Entropy: exact (bit for bit).
  Percentile, **stated tolerance**: each threshold within one ORT bin plus one fine bin (``< ORT bin +
  max|x| / (2 num_bins)``) of ORT's one-call threshold, checked per tensor; a tensor whose check fails is
  recounted exactly in a second pass. Measured on the PP-OCR detector at 640x640, 8 images: 316 of 331
  tensors bit for bit, the others one ORT bin away; entropy 331 of 331.
* Distribution, and Entropy with ``num_quantized_bins < num_bins`` (its KL search reads every count): two
  streaming passes, exact. Pass 1 keeps per tensor ``min``, ``max``, ``min|x|`` and ``max|x|`` (NaNs ignored,
  as ORT's ``np.nanmin``); pass 2 accumulates ``np.histogram`` counts on exactly the bins ORT's one-call
  ``HistogramCollector`` would have used (``collect_value``: ``num_bins`` over ``(-t, t)``,
  ``t = max(|min|, |max|)``; ``collect_absolute_value``: ``num_bins`` over ``[min|x|, max|x|]``). Counting
  with fixed edges is per-element, so the sum over chunks equals the one-call histogram, and ORT's own
  ``compute_collection_result`` turns it into thresholds: exact (tests compare with ORT bit for bit).

The histogram methods run ORT's augmented model (all calibrated tensors as outputs, optimizations off as in
ORT's calibrator) into preallocated output buffers (:class:`_BoundOutputs`) and fold each tensor into the
state right after the inference, tensors in parallel on a thread pool (:func:`fold_threads`; measured on
the PP-OCR detector at 640x640 on 2 cores: percentile 0.73 -> 0.55 s per image). Peak memory is one inference's intermediate outputs (in reused buffers)
plus a fixed number of counts per tensor, independent of the number of images.

Checkpoints: after a chunk, when ``CHECKPOINT_INTERVAL_S`` seconds have passed since the last save, and
at the end of each pass, the state (histograms / stats or ranges), the pass and the number of batches done
are written atomically (pickle, private format) to ``checkpoint``; a run given the same checkpoint and the
same key (model digest + set id + config hash) continues after the last saved chunk, so an interruption
loses at most that interval of work. (The histogram state is tens of MB; saving it after every image
would cost more than the image.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import pickle
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .._io import atomic_write_bytes
from ..errors import CalibrationSetError, ConfigError
from ..progress import progress
from . import adapter
from .config import StaticQuantConfig

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 10.0
_CKPT_VERSION = 2  # 2: one-pass fine histograms for percentile/entropy


@dataclasses.dataclass(frozen=True)
class CalibrationRun:
    """What range collection did. ``tensors`` is ORT's ``TensorsData`` (tensor name -> ``TensorData``).

    ``images`` counts images seen in this and resumed runs; ``resumed_batches`` is how many batches were
    restored from a checkpoint; ``seconds`` is this run's wall time.
    """

    tensors: Any
    images: int
    batches: int
    chunks: int
    resumed_batches: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"tensors": len(self.tensors.data), "images": self.images, "batches": self.batches, "chunks": self.chunks,
                "resumed_batches": self.resumed_batches, "seconds": round(self.seconds, 3)}

    def __repr__(self) -> str:
        return f"CalibrationRun(tensors={len(self.tensors.data)}, images={self.images}, chunks={self.chunks}, resumed_batches={self.resumed_batches})"


@contextlib.contextmanager
def quiet_ort() -> Iterator[None]:
    """Send ORT's ``print`` calls (HistogramCollector) to the debug log instead of stdout."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    if buf.getvalue().strip():
        log.debug("onnxruntime: %s", buf.getvalue().strip().replace("\n", " | "))


def _state(cal: Any, config: StaticQuantConfig) -> Any:
    if config.method == "minmax":
        return {"range": cal.calibrate_tensors_range, "intermediate": cal.intermediate_outputs if config.moving_average else None}
    return {"collector": cal.collector}


def _restore(cal: Any, config: StaticQuantConfig, state: Any) -> None:
    if config.method == "minmax":
        cal.calibrate_tensors_range = state["range"]
        if config.moving_average:
            cal.intermediate_outputs = state["intermediate"] or []
    else:
        cal.collector = state["collector"]


def _load_checkpoint(path: Path, key: str) -> Any | None:
    try:
        with open(path, "rb") as f:
            ckpt = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception as e:  # truncated/foreign file: start over rather than fail
        log.warning("ignoring unreadable calibration checkpoint %s (%s)", path, e)
        return None
    if not isinstance(ckpt, dict) or ckpt.get("version") != _CKPT_VERSION or ckpt.get("key") != key:
        log.warning("ignoring calibration checkpoint %s: it was made for another model, set or config", path)
        return None
    return ckpt


def _chunks(start: int, n: int, chunk: int) -> range:
    return range(start, n, chunk)


class _HistogramState:
    """Two-pass exact histograms (see the module docstring). Pass 1: per-tensor min, max, min|x|, max|x|.
    Pass 2: counts on the bins ORT's one-call ``HistogramCollector`` would have used."""

    passes = 2

    def __init__(self, names: list[str], absolute: bool, num_bins: int) -> None:
        self.names = names
        self.absolute = absolute
        self.num_bins = num_bins
        self.stats: dict[str, list[Any]] = {}
        self.hist: dict[str, Any] = {}
        self.edges: dict[str, Any] = {}

    def observe(self, name: str, arr: Any) -> None:
        """Pass 1: fold one batch's tensor into the running ``[min, max, min|x|, max|x|]`` (NaN ignored, as ``np.nanmin``)."""
        import numpy as np

        a = np.asarray(arr).reshape(-1)
        if a.size == 0:
            return
        mn, mx = np.fmin.reduce(a), np.fmax.reduce(a)
        amin = np.fmin.reduce(np.absolute(a)) if self.absolute else np.array(0, dtype=a.dtype)[()]
        cur = [mn, mx, amin, max(abs(mn), abs(mx))]
        old = self.stats.get(name)
        self.stats[name] = cur if old is None else [min(old[0], cur[0]), max(old[1], cur[1]), min(old[2], cur[2]), max(old[3], cur[3])]

    def count(self, name: str, arr: Any) -> None:
        """Pass 2: add one batch's counts on ORT's one-call bins."""
        import numpy as np

        a = np.asarray(arr).reshape(-1)
        mn, mx, amin, amax = self.stats[name]
        if self.absolute:  # HistogramCollector.collect_absolute_value: np.histogram(|x|, bins=num_bins) spans [min|x|, max|x|]
            h, e = np.histogram(np.absolute(a), bins=self.num_bins, range=(amin, amax))  # type: ignore[arg-type]
        else:  # HistogramCollector.collect_value: range (-t, t), t = max(|min|, |max|)
            t = np.array(max(abs(mn), abs(mx)), dtype=a.dtype)
            h, e = np.histogram(a, self.num_bins, range=(-t, t))  # type: ignore[arg-type]
        if name in self.hist:
            self.hist[name] += h
        else:
            self.hist[name], self.edges[name] = h.astype(np.int64), e.astype(a.dtype)

    def histogram_dict(self) -> dict[str, tuple[Any, ...]]:
        import numpy as np

        out: dict[str, tuple[Any, ...]] = {}
        for name in self.hist:
            mn, mx, _, _ = self.stats[name]
            if self.absolute:
                out[name] = (self.hist[name], self.edges[name], mn, mx)
            else:
                out[name] = (self.hist[name], self.edges[name], mn, mx, np.array(max(abs(mn), abs(mx)), dtype=self.edges[name].dtype))
        return out


class _FineHistogramState:
    """One-pass histograms for ORT's ``collect_value`` (entropy; percentile with ``symmetric=False``) and
    ``collect_absolute_value`` (percentile's default ``symmetric=True``), within a stated tolerance.

    Per tensor: exact ``min``, ``max`` (and ``min|x|`` for absolute) and counts on a fine grid of
    ``FINE * num_bins`` uniform bins over ``(-T, T)`` (absolute: ``[0, T]``). ``T`` starts at the first batch's
    ``max|x|`` and is multiplied by a power of two when a later batch exceeds it (groups of fine bins merge
    exactly: the grids nest), so ``t <= T < 2t`` for the final ``t = max|x|``.

    Only the tails are counted at full resolution after the first batch: the first batch is counted whole and
    sets cut-offs holding ``tail`` of its elements per side (``max(TAIL, 1000 x`` the fraction the percentile
    cuts``)``, all elements when that reaches 1/2); later batches add to the fine grid only the elements beyond the
    cut-offs (``x <= lo`` or ``x >= hi``; absolute ``|x| >= c``) and count the rest as one number. That is what
    makes this one pass cheap: a few streaming passes over each tensor (min, max, ``|x|`` and ``min|x|``
    where signs need them, compares, a select) instead of a histogram of every element. At the end the fine bins wholly beyond the cut-offs are exact;
    the others' mass is lumped into the first bin inside them.

    ``histogram_dict`` interpolates the cumulative fine counts at ORT's one-call edges (taken from
    ``np.histogram`` itself, so they are exact: ``linspace(-t, t, num_bins + 1)``, absolute
    ``linspace(min|x|, max|x|, num_bins + 1)``, in the data's dtype) and rounds them. Where the fine bins are
    exact each rebinned cumulative count lies between the exact counts at ``e - w`` and ``e + w`` (``w`` one
    fine bin, ``< t / (2 num_bins)``), so, **stated tolerance**:

    * percentile: each threshold is within one ORT bin plus ``w`` (``< ORT bin + t / (2 num_bins)``) of ORT's
      one-call threshold; the clip to the exact ``[min, max]`` is ORT's. ``unresolved`` checks, per tensor, that
      the chosen edge lies at least ``2 (ORT bin + w)`` inside the exact region (so the bound applies); a tensor
      that fails (its tails grew far heavier after the first batch) is recounted exactly by a second pass
      (``repair``, a :class:`_HistogramState` for those tensors only). Measured on PP-OCR (tests): 0 ulp
      for all but a few tensors.
    * entropy with ``num_quantized_bins >= num_bins`` (ORT's defaults, 128/128): the only candidate is
      ``(-t, t)`` clipped to ``[min, max]``, built from exact values: bit for bit equal to ORT. As no count
      can change it, batches after the first only update min and max (two passes) and their element count
      goes to the bin holding 0.

    ``hist`` (the per-bin counts ORT also reports in ``TensorData``; quantkit does not use them) is exact
    in the percentile's tails only.
    """

    passes = 2  # pass 2 runs only for tensors in `repair` (usually none)
    FINE = 8
    TAIL = 0.01

    def __init__(self, names: list[str], num_bins: int, absolute: bool, need: float) -> None:
        self.names = names
        self.num_bins = num_bins
        self.absolute = absolute
        self.need = need  # fraction of elements beyond ORT's threshold, per side; 0.0: counts do not matter (entropy)
        self.tail = min(0.5, max(self.TAIL, 1000.0 * need))
        self.fine = self.FINE * num_bins
        self.zero_bin = 0 if absolute else self.fine // 2  # fine bin holding 0
        self.stats: dict[str, list[Any]] = {}  # name -> [min, max, min|x|] (data dtype scalars)
        self.half: dict[str, float] = {}  # name -> T (0.0 while every value so far is 0)
        self.counts: dict[str, Any] = {}  # name -> int64[fine]; while T == 0: int, the number of zeros
        self.cut: dict[str, tuple[Any, Any] | None] = {}  # name -> (lo, hi) float32 (absolute: (c, c)); None: count all
        self.bulk: dict[str, int] = {}  # name -> elements between the cut-offs (not in the fine grid)
        self.repair: _HistogramState | None = None
        self._local = threading.local()  # scratch buffers, one set per folding thread

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_local"}  # scratch buffers stay out of checkpoints

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _buffers(self, n: int) -> tuple[Any, Any, Any, Any]:
        import numpy as np

        buf = getattr(self._local, "buf", None)
        if buf is None or buf[0].size < n:
            buf = self._local.buf = (np.empty(n, np.float32), np.empty(n, np.intp), np.empty(n, np.bool_), np.empty(n, np.bool_))
        return tuple(b[:n] for b in buf)  # type: ignore[return-value]

    def _bins(self, src: Any, half: float) -> Any:
        """Fine-bin counts of ``src`` (``x``, or ``|x|``; all ``|.| <= half``): int64[fine]. May overwrite the scratch buffer."""
        import numpy as np

        f, i, _, _ = self._buffers(src.size)
        scale = np.float32(self.fine / (half if self.absolute else 2.0 * half))
        # float32 arithmetic, truncated to an index on the way out: -eps lands in 0, x == T in bin `fine` (folded below)
        if self.absolute:
            np.multiply(src, scale, out=i, casting="unsafe")
        else:
            np.multiply(src, scale, out=f, casting="unsafe")
            np.add(f, np.float32(self.fine // 2), out=i, casting="unsafe")
        c = np.bincount(i, minlength=self.fine + 1)
        c[self.fine - 1] += c[self.fine]
        return c[: self.fine].astype(np.int64)

    def _edges(self, half: float) -> Any:
        import numpy as np

        return np.linspace(0.0 if self.absolute else -half, half, self.fine + 1)

    def _choose_cut(self, c: Any, half: float) -> tuple[Any, Any] | None:
        """Cut-offs on fine edges holding at least ``tail`` of the first batch's elements per side and lying at
        least ``4 FINE + 2`` fine bins (over 4 ORT bins) outside the first batch's own percentile edges, so that
        saturated tensors (Clip, HardSigmoid: mass piled at the max) keep their edge in the exact region.
        None: count every element."""
        import numpy as np

        if self.tail >= 0.5:
            return None
        g, n = self._edges(half), float(c.sum())
        margin = 4 * self.FINE + 2
        above = np.cumsum(c[::-1])[::-1]  # above[j]: elements in bins >= j
        j_hi = int(np.flatnonzero(above >= self.tail * n)[-1])
        if self.need > 0.0:
            j_hi = min(j_hi, int(np.flatnonzero(above >= self.need * n)[-1]) - margin)
        if j_hi <= 0:
            return None
        if self.absolute:
            return np.float32(g[j_hi]), np.float32(g[j_hi])
        below = np.cumsum(c)  # below[j]: elements in bins <= j
        j_lo = int(np.flatnonzero(below >= self.tail * n)[0]) + 1
        if self.need > 0.0:
            j_lo = max(j_lo, int(np.flatnonzero(below >= self.need * n)[0]) + 1 + margin)
        if j_lo >= j_hi:
            return None
        return np.float32(g[j_lo]), np.float32(g[j_hi])

    def update(self, name: str, arr: Any) -> None:
        """Fold one batch's tensor (any shape, float) into the stats and fine counts; NaNs are dropped, as ORT's
        ``np.nanmin`` and ``np.histogram`` do. Raises ValueError on an infinite value (ORT's histogram does too)."""
        import numpy as np

        a = np.asarray(arr).reshape(-1)
        if a.size == 0:
            return
        mn, mx = np.min(a), np.max(a)
        if np.isnan(mn) or np.isnan(mx):
            a = a[~np.isnan(a)]
            if a.size == 0:
                return
            mn, mx = np.min(a), np.max(a)
        t = float(max(abs(mn), abs(mx)))
        if not np.isfinite(t):
            raise ValueError(f"tensor {name!r} has an infinite value; its histogram range is not finite")
        old = self.stats.get(name)
        amin, src = mn.dtype.type(0), a
        f, _, m1, m2 = self._buffers(a.size)
        if self.absolute:  # |x| and min|x|, skipping the passes that signs make needless
            if mn >= 0:
                amin = abs(mn)  # |x| = x (abs: no -0.0)
            else:
                src = f
                np.absolute(a, out=src, casting="unsafe")
                if mx <= 0:
                    amin = abs(mx)
                elif old is None or old[2] > 0:  # once min|x| is 0 it stays 0
                    amin = np.min(src).astype(mn.dtype)
        self.stats[name] = [mn, mx, amin] if old is None else [min(old[0], mn), max(old[1], mx), min(old[2], amin)]
        half = self.half.get(name, 0.0)
        if t == 0.0:  # all zeros: exact wherever bin 0 is
            if half == 0.0:
                self.counts[name] = self.counts.get(name, 0) + a.size
            else:
                self.counts[name][self.zero_bin] += a.size
            return
        if half == 0.0:  # first batch with a non-zero value: counted whole, sets the cut-offs
            zeros = self.counts.get(name, 0)
            self.half[name] = half = t
            self.counts[name] = self._bins(src, half)
            self.counts[name][self.zero_bin] += zeros
            self.cut[name] = self._choose_cut(self.counts[name], half)
            self.bulk[name] = 0
            return
        if t > half:  # widen by 2**k: old fine bin j falls in zero_bin + floor((j - zero_bin) / 2**k)
            k = 1
            while half * 2**k < t:
                k += 1
            idx = self.zero_bin + np.floor_divide(np.arange(self.fine) - self.zero_bin, 2**k)
            self.counts[name] = np.bincount(idx, weights=self.counts[name], minlength=self.fine).round().astype(np.int64)
            self.half[name] = half = half * 2**k
        if self.need == 0.0:  # entropy: the range reads no counts (see the class docstring)
            self.bulk[name] += a.size
            return
        cut = self.cut[name]
        if cut is None:
            self.counts[name] += self._bins(src, half)
            return
        if self.absolute:
            np.greater_equal(src, cut[1], out=m1)
        else:
            np.less_equal(src, cut[0], out=m1)
            np.greater_equal(src, cut[1], out=m2)
            np.logical_or(m1, m2, out=m1)
        sel = src[m1]
        self.bulk[name] += a.size - sel.size
        self.counts[name] += self._bins(sel, half)

    def _fine_final(self, name: str) -> Any:
        """Fine counts with the mass of the inexact bins (between the cut-offs) lumped into the first of them."""
        import numpy as np

        c = self.counts[name].copy()
        if self.need == 0.0:
            c[self.zero_bin] += self.bulk.get(name, 0)
            return c
        cut = self.cut.get(name)
        if cut is None:
            return c
        g = self._edges(self.half[name])
        exact = (g[:-1] >= float(cut[1])) | (np.zeros(self.fine, bool) if self.absolute else (g[1:] <= float(cut[0])))
        lump = int(c[~exact].sum()) + self.bulk[name]
        c[~exact] = 0
        c[int(np.flatnonzero(~exact)[0])] += lump
        return c

    def histogram_dict(self) -> dict[str, tuple[Any, ...]]:
        """ORT's one-call ``histogram_dict``: ``(hist, edges, min, max, t)``, absolute ``(hist, edges, min, max)``;
        tensors in ``repair`` take their exact second-pass histogram."""
        import numpy as np

        out: dict[str, tuple[Any, ...]] = {}
        for name, (mn, mx, amin) in self.stats.items():
            dt = mn.dtype
            t = np.array(max(abs(mn), abs(mx)), dtype=dt)
            if self.absolute:  # np.histogram(|x|, bins) spans [min|x|, max|x|]
                _, e = np.histogram(np.array([amin, t], dtype=dt), bins=self.num_bins)
            else:
                _, e = np.histogram(np.empty(0, dtype=dt), self.num_bins, range=(-t, t))  # type: ignore[arg-type]
            e = e.astype(dt)
            half, c = self.half.get(name, 0.0), self.counts[name]
            if half == 0.0:  # every value is 0: np.histogram puts them all in the bin holding 0
                h = np.histogram(np.zeros(1, dtype=dt), e)[0].astype(np.int64) * int(c)
            else:
                cum = np.concatenate(([0], np.cumsum(self._fine_final(name))))
                at = np.rint(np.interp(e.astype(np.float64), self._edges(half), cum)).astype(np.int64)
                at[0], at[-1] = 0, cum[-1]
                h = np.diff(at)
            out[name] = (h, e, mn, mx) if self.absolute else (h, e, mn, mx, t)
        if self.repair is not None:
            out.update(self.repair.histogram_dict())
        return out

    def unresolved(self) -> list[str]:
        """Tensors whose percentile edge is not safely inside the exactly counted tails (see the class docstring)."""
        import numpy as np

        if self.need <= 0.0:
            return []
        bad = []
        hd = self.histogram_dict()
        for name in self.names:
            cut = self.cut.get(name)
            if name not in hd or cut is None:
                continue
            h, e = hd[name][0], hd[name][1].astype(np.float64)
            cdf = np.cumsum(h / h.sum())
            margin = 2.0 * ((e[-1] - e[0]) / self.num_bins + self.half[name] / self.fine * (1 if self.absolute else 2))
            hi_edge = e[min(int(np.searchsorted(cdf, 1.0 - self.need)), len(e) - 1)]  # ORT's compute_percentile edges
            lo_edge = e[min(int(np.searchsorted(cdf, self.need)), len(e) - 1)]
            if hi_edge - margin < float(cut[1]) or (not self.absolute and lo_edge + margin > float(cut[0])):
                bad.append(name)
        return bad


class _BoundOutputs:
    """Runs ``session`` for ``names`` into preallocated output buffers (ORT ``IOBinding``), so that an image's
    few hundred intermediate outputs are not allocated, page-faulted and freed again for every image.

    ``run(feed)`` returns arrays (``names`` order) that stay valid until the next call. Buffers are (re)made
    whenever the input shapes change (first call, a shorter last batch), from one ordinary ``session.run``;
    a calibrated tensor that is also a graph input is taken from the feed (ORT does not write it into a
    bound buffer).
    """

    def __init__(self, session: Any, names: list[str]) -> None:
        self.session = session
        self.names = names
        self.inputs = {i.name for i in session.get_inputs()}
        self.shapes: dict[str, tuple[int, ...]] | None = None
        self.buffers: list[Any] = []
        self.binding: Any = None
        self.pass_no = 0

    def run(self, feed: dict[str, Any]) -> list[Any]:
        import numpy as np

        shapes = {k: tuple(np.shape(v)) for k, v in feed.items()}
        if shapes != self.shapes:
            outs = self.session.run(self.names, feed)
            self.binding = self.session.io_binding()
            self.buffers = [np.empty_like(o) for o in outs]
            for name, buf in zip(self.names, self.buffers):
                if name not in self.inputs:
                    self.binding.bind_output(name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
            self.shapes = shapes
            return list(outs)
        for k, v in feed.items():
            self.binding.bind_cpu_input(k, np.ascontiguousarray(v))
        self.session.run_with_iobinding(self.binding)
        return [feed[n] if n in self.inputs else b for n, b in zip(self.names, self.buffers)]


def _pass_names(hs: _HistogramState | _FineHistogramState, pass_no: int) -> list[str]:
    """Tensors pass ``pass_no`` reads: all of them, or in the one-pass method's pass 2 those in ``repair``."""
    if isinstance(hs, _FineHistogramState) and pass_no == 2:
        assert hs.repair is not None
        return hs.repair.names
    return hs.names


def _fold_one(hs: _HistogramState | _FineHistogramState, pass_no: int, name: str, arr: Any) -> None:
    if isinstance(hs, _FineHistogramState):
        if pass_no == 1:
            hs.update(name, arr)
        else:
            assert hs.repair is not None
            hs.repair.count(name, arr)
    elif pass_no == 1:
        hs.observe(name, arr)
    else:
        hs.count(name, arr)


def fold_threads() -> int:
    """Threads that fold one inference's outputs into the histograms: ``QUANTKIT_CALIB_THREADS``, else the
    CPU count (at most 8). Each tensor is folded by one thread (its state is only touched by that thread);
    numpy's reductions, ufuncs and copies release the GIL on large arrays, so tensors fold in parallel."""
    env = os.environ.get("QUANTKIT_CALIB_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ConfigError(f"QUANTKIT_CALIB_THREADS={env!r}: expected a whole number of threads, e.g. 2") from None
        if n < 1:
            raise ConfigError(f"QUANTKIT_CALIB_THREADS={env!r}: expected at least 1")
        return n
    return max(1, min(8, os.cpu_count() or 1))


def _fold(hs: _HistogramState | _FineHistogramState, pass_no: int, outs: list[Any], pool: Any = None) -> None:
    """Fold one inference's outputs (``_pass_names`` order) into ``hs``; ``pool``: an executor to fold tensors
    in parallel (largest first, so the long ones do not come last), or None for this thread."""
    names = _pass_names(hs, pass_no)
    if pool is None:
        for i, name in enumerate(names):
            _fold_one(hs, pass_no, name, outs[i])
            outs[i] = None
        return
    order = sorted(range(len(names)), key=lambda i: -outs[i].size)
    for f in [pool.submit(_fold_one, hs, pass_no, names[i], outs[i]) for i in order]:
        f.result()


def collect_ranges(
    model_path: str | Path,
    reader: Any,
    config: StaticQuantConfig,
    *,
    workdir: str | Path,
    op_types: list[str] | None = None,
    checkpoint: str | Path | None = None,
    key: str = "",
) -> CalibrationRun:
    """Collect calibration ranges chunk by chunk, reproducing ORT's one-call calibrator for ``config.method``.

    Args:
        model_path: the float model to calibrate (ORT's ``create_calibrator`` needs a file).
        reader: a ``CalibrationDataReader`` with ``__len__`` (batches) and ``set_range(start, end)`` in
            batch units, e.g. :class:`quantkit.calibset.CalibrationSetReader`.
        config: the static config (method, histogram options, ``calibration_chunk_size``, ``max_images``).
        workdir: scratch folder for ORT's augmented model.
        op_types: op types whose tensors are calibrated (what ``quantize_static`` passes); default ORT's.
        checkpoint: file to save state to after each chunk and resume from; None = no checkpointing.
        key: identity of the run; a checkpoint with another key is ignored (logged).

    Returns:
        :class:`CalibrationRun` with ORT ``TensorsData`` (float32 ranges per tensor).

    Raises:
        CalibrationSetError: the reader yields no batch.
    """
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import HistogramCollector, create_calibrator

    t0 = time.perf_counter()
    n_batches = len(reader)
    bs = max(1, int(getattr(reader, "batch_size", 1)))
    if config.max_images is not None:
        n_batches = min(n_batches, -(-config.max_images // bs))
    where = getattr(getattr(reader, "cset", None), "root", "calibration set")
    if n_batches == 0:
        raise CalibrationSetError(f"{where}: no images to calibrate on; add images and register the set again")
    chunk = max(1, config.calibration_chunk_size // bs)
    workdir = Path(workdir)
    method = getattr(CalibrationMethod, adapter.METHODS[config.method])
    with quiet_ort():
        cal = create_calibrator(Path(model_path), op_types or adapter.default_op_types("qdq"),
                                augmented_model_path=str(workdir / "augmented_model.onnx"),
                                calibrate_method=method, extra_options=adapter.calibrator_options(config))
    histogram = config.method != "minmax"
    if config.method == "minmax" and config.moving_average:
        # keep per-image reduced min/max across calls; ORT averages them once, as in one collect_data call
        cal.clear_collected_data = lambda: None

    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    state: dict[str, Any] = {"pass": 1, "done": 0}
    hs: _HistogramState | _FineHistogramState | None = None
    if histogram:
        names = sorted(cal.tensors_to_calibrate)
        absolute = bool(cal.symmetric) and config.method == "percentile"
        one_pass = config.method == "percentile" or (config.method == "entropy" and cal.num_quantized_bins >= cal.num_bins)
        need = (100.0 - float(cal.percentile)) / (100.0 if absolute else 200.0) if config.method == "percentile" else 0.0
        hs = _FineHistogramState(names, int(cal.num_bins), absolute, need) if one_pass else _HistogramState(names, absolute, int(cal.num_bins))
    if ckpt_path is not None:
        ckpt = _load_checkpoint(ckpt_path, key)
        if ckpt is not None:
            state = {"pass": ckpt["pass"], "done": ckpt["done"]}
            if histogram:
                hs = ckpt["state"]
            else:
                _restore(cal, config, ckpt["state"])
            log.info("resuming calibration from %s at pass %d after %d of %d batches", ckpt_path, state["pass"], state["done"], n_batches)
    resumed = state["done"] + (n_batches if state["pass"] == 2 else 0)

    last_save = [time.monotonic()]

    def save(pass_no: int, done: int, *, force: bool = True) -> None:
        if ckpt_path is not None and (force or time.monotonic() - last_save[0] >= CHECKPOINT_INTERVAL_S):
            last_save[0] = time.monotonic()
            payload = hs if histogram else _state(cal, config)
            atomic_write_bytes(ckpt_path, pickle.dumps({"version": _CKPT_VERSION, "key": key, "pass": pass_no, "done": done, "state": payload}))

    chunks = 0
    runner: _BoundOutputs | None = None
    threads = fold_threads() if hs is not None else 1
    pool = ThreadPoolExecutor(threads, thread_name_prefix="quantkit-fold") if threads > 1 else None
    passes = tuple(range(1, hs.passes + 1)) if hs is not None else (1,)
    try:
        for pass_no in passes:
            if pass_no < state["pass"]:
                continue
            if pass_no == 2 and isinstance(hs, _FineHistogramState) and hs.repair is None:
                break  # every tensor's tails were resolved in pass 1
            first = state["done"] if pass_no == state["pass"] else 0
            starts = _chunks(first, n_batches, chunk)
            desc = f"calibrate {config.method}" + (f" pass {pass_no}/{len(passes)}" if len(passes) > 1 else "")
            for s in progress(starts, total=len(starts), desc=desc, unit="chunk"):
                e = min(s + chunk, n_batches)
                reader.set_range(s, e)
                if hs is None:
                    if config.moving_average:
                        cal.calibrate_tensors_range = None  # recomputed from all kept per-image values
                    with quiet_ort():
                        try:
                            cal.collect_data(reader)
                        except ValueError as err:
                            if "No data is collected" in str(err):
                                raise CalibrationSetError(f"{where}: batches {s}..{e - 1} gave no readable image; fix or remove those images") from None
                            raise
                else:
                    if runner is None or runner.pass_no != pass_no:
                        runner = _BoundOutputs(cal.infer_session, _pass_names(hs, pass_no))
                        runner.pass_no = pass_no
                    got = False
                    while (feed := reader.get_next()) is not None:
                        got = True
                        _fold(hs, pass_no, runner.run(feed), pool)
                    if not got:
                        raise CalibrationSetError(f"{where}: batches {s}..{e - 1} gave no readable image; fix or remove those images")
                chunks += 1
                save(pass_no, e, force=e == n_batches)
            if pass_no == 1 and isinstance(hs, _FineHistogramState):
                bad = hs.unresolved()
                if bad:
                    log.info("%d of %d tensors need an exact second pass (their tails outgrew the first image's cut-offs)", len(bad), len(hs.names))
                    hs.repair = _HistogramState(bad, hs.absolute, hs.num_bins)
                    for name in bad:
                        mn, mx, amin = hs.stats[name]
                        hs.repair.stats[name] = [mn, mx, amin, max(abs(mn), abs(mx))]
            if pass_no < len(passes):
                save(pass_no + 1, 0)
            runner = None
    finally:
        if pool is not None:
            pool.shutdown()
    if histogram:
        assert hs is not None
        collector = HistogramCollector(method=cal.method, symmetric=cal.symmetric, num_bins=cal.num_bins,
                                       num_quantized_bins=cal.num_quantized_bins, percentile=cal.percentile, scenario=cal.scenario)
        collector.histogram_dict = hs.histogram_dict()
        cal.collector = collector
    with quiet_ort():
        tensors = cal.compute_data()
    count = getattr(getattr(reader, "cset", None), "count", n_batches * bs)
    images = min(n_batches * bs, count, config.max_images or count)
    return CalibrationRun(tensors=tensors, images=images, batches=n_batches, chunks=chunks, resumed_batches=resumed, seconds=time.perf_counter() - t0)

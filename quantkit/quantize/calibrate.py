"""Bounded-memory, resumable range collection that reproduces ONNX Runtime's calibrators exactly.

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
* Entropy, Percentile, Distribution: two streaming passes over the set with ORT's augmented model.
  Pass 1 keeps per tensor ``min``, ``max``, ``min|x|`` and ``max|x|`` (ReduceMin/ReduceMax/Abs nodes
  added to the float model, so nothing leaves ORT; NaNs propagate, where ORT uses ``np.nanmin``); pass 2 accumulates
  ``np.histogram`` counts on exactly the bins ORT's one-call ``HistogramCollector`` would have used
  (``collect_value``: ``num_bins`` over ``(-t, t)``, ``t = max(|min|, |max|)``;
  ``collect_absolute_value``: ``num_bins`` over ``[min|x|, max|x|]``). Counting with fixed edges is
  per-element, so the sum over chunks equals the one-call histogram, and ORT's own
  ``compute_collection_result`` turns it into thresholds: exact (tests compare with ORT bit for bit).
  Cost: two inferences per image instead of one.

Peak memory is one chunk's intermediate outputs plus ``num_bins`` counts per tensor, independent of the
number of images.

Checkpoints: after each chunk the state (histograms / stats or ranges), the pass and the number of
batches done are written atomically (pickle, private format) to ``checkpoint``; a run given the same
checkpoint and the same key (model digest + set id + config hash) continues after the last finished chunk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._io import atomic_write_bytes
from ..errors import CalibrationSetError
from ..progress import progress
from . import adapter
from .config import StaticQuantConfig

log = logging.getLogger(__name__)

_CKPT_VERSION = 1


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
    """One-pass histograms for ``collect_value`` (percentile without ``symmetric``, entropy with one candidate).

    Per tensor: exact ``nanmin``/``nanmax`` and counts on a fine grid of ``FINE * num_bins`` uniform bins over
    ``(-T, T)``; ``T`` starts at the first batch's ``max|x|`` and is multiplied by a power of two when a later
    batch exceeds it (pairs of fine bins merge exactly, as the grids nest), so ``t <= T < 2t`` with ``t`` the
    final ``max|x|`` and a fine bin is narrower than ``4 / FINE`` (= 1/2) of one of ORT's bins. At the end the
    cumulative fine counts are interpolated at ORT's one-call edges (``linspace(-t, t, num_bins + 1)`` in the
    data's dtype, taken from ``np.histogram`` itself) and rounded, so each cumulative count lies between the
    exact counts at the neighbouring ORT edges: a percentile threshold moves by at most one ORT bin
    (``2t / num_bins``) from ORT's, and min, max and the edges are exact (entropy with ``num_quantized_bins >=
    num_bins`` has the single candidate ``(-t, t)`` clipped to ``[min, max]``, so it is exact).
    """

    passes = 1
    FINE = 8

    def __init__(self, names: list[str], num_bins: int) -> None:
        self.names = names
        self.num_bins = num_bins
        self.fine = self.FINE * num_bins
        self.stats: dict[str, list[Any]] = {}  # name -> [min, max] (data dtype scalars)
        self.half: dict[str, float] = {}  # name -> T (0.0 while every value so far is 0)
        self.counts: dict[str, Any] = {}  # name -> int64[fine]; while T == 0: int, the number of zeros
        self._fbuf: Any = None
        self._ibuf: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_fbuf", "_ibuf")} | {"_fbuf": None, "_ibuf": None}

    def _bins(self, a: Any, half: float) -> Any:
        """Fine-bin counts of ``a`` (finite, ``|a| <= half``) on ``(-half, half)``: int64[fine]."""
        import numpy as np

        if self._fbuf is None or self._fbuf.size < a.size:
            self._fbuf, self._ibuf = np.empty(a.size, np.float32), np.empty(a.size, np.intp)
        f, i = self._fbuf[: a.size], self._ibuf[: a.size]
        np.multiply(a, np.float32(self.fine / (2.0 * half)), out=f, casting="unsafe")
        np.add(f, np.float32(self.fine // 2), out=f)
        np.copyto(i, f, casting="unsafe")  # truncation; -eps rounds to 0, x == half lands in bin `fine`
        c = np.bincount(i, minlength=self.fine + 1)
        c[self.fine - 1] += c[self.fine]
        return c[: self.fine].astype(np.int64)

    def update(self, name: str, arr: Any) -> None:
        import numpy as np

        a = np.asarray(arr).reshape(-1)
        if a.size == 0:
            return
        mn, mx = np.min(a), np.max(a)
        if np.isnan(mn) or np.isnan(mx):  # rare: drop NaNs as np.nanmin / np.histogram(range=...) do
            a = a[~np.isnan(a)]
            if a.size == 0:
                return
            mn, mx = np.min(a), np.max(a)
        old = self.stats.get(name)
        self.stats[name] = [mn, mx] if old is None else [min(old[0], mn), max(old[1], mx)]
        t = float(max(abs(mn), abs(mx)))
        if not np.isfinite(t):
            raise ValueError(f"tensor {name!r} has an infinite value; its histogram range is not finite")
        half = self.half.get(name, 0.0)
        if t == 0.0:  # all zeros
            if half == 0.0:
                self.counts[name] = self.counts.get(name, 0) + a.size
            else:
                self.counts[name][self.fine // 2] += a.size
            return
        if half == 0.0:
            zeros = self.counts.get(name, 0)
            self.half[name] = half = t
            self.counts[name] = self._bins(a, half)
            self.counts[name][self.fine // 2] += zeros
            return
        if t > half:  # widen by 2**k: fine bin j of the old grid falls in bin fine/2 + floor((j - fine/2) / 2**k)
            k = 1
            while half * 2**k < t:
                k += 1
            j = np.arange(self.fine) - self.fine // 2
            idx = self.fine // 2 + np.floor_divide(j, 2**k)
            self.counts[name] = np.bincount(idx, weights=self.counts[name], minlength=self.fine).astype(np.int64)
            self.half[name] = half = half * 2**k
        self.counts[name] += self._bins(a, half)

    def histogram_dict(self) -> dict[str, tuple[Any, ...]]:
        """ORT's one-call ``histogram_dict`` entries ``(hist, edges, min, max, t)``, hist rebinned as in the class docstring."""
        import numpy as np

        out: dict[str, tuple[Any, ...]] = {}
        for name, (mn, mx) in self.stats.items():
            t = np.array(max(abs(mn), abs(mx)), dtype=mn.dtype)
            _, e = np.histogram(np.empty(0, dtype=mn.dtype), self.num_bins, range=(-t, t))  # type: ignore[arg-type]
            e = e.astype(mn.dtype)
            half, c = self.half.get(name, 0.0), self.counts[name]
            if half == 0.0:  # every value is 0: np.histogram puts them in the bin holding 0
                h = np.histogram(np.zeros(1, dtype=mn.dtype), self.num_bins, range=(-t, t))[0].astype(np.int64) * int(c)  # type: ignore[arg-type]
            else:
                grid = np.linspace(-half, half, self.fine + 1)
                cum = np.concatenate(([0], np.cumsum(c)))
                at = np.rint(np.interp(e.astype(np.float64), grid, cum)).astype(np.int64)
                at[0], at[-1] = 0, cum[-1]
                h = np.diff(at)
            out[name] = (h, e, mn, mx, t)
        return out


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
    hs = _HistogramState(sorted(cal.tensors_to_calibrate), bool(cal.symmetric) and config.method == "percentile", int(cal.num_bins)) if histogram else None
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

    def save(pass_no: int, done: int) -> None:
        if ckpt_path is not None:
            payload = hs if histogram else _state(cal, config)
            atomic_write_bytes(ckpt_path, pickle.dumps({"version": _CKPT_VERSION, "key": key, "pass": pass_no, "done": done, "state": payload}))

    chunks = 0
    reducer: Any = None
    passes = (1, 2) if histogram else (1,)
    for pass_no in passes:
        if pass_no < state["pass"]:
            continue
        first = state["done"] if pass_no == state["pass"] else 0
        starts = _chunks(first, n_batches, chunk)
        desc = f"calibrate {config.method}" + (f" pass {pass_no}/2" if histogram else "")
        for s in progress(starts, total=len(starts), desc=desc, unit="chunk"):
            e = min(s + chunk, n_batches)
            reader.set_range(s, e)
            if not histogram:
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
                assert hs is not None
                names = hs.names
                got = False
                if pass_no == 1 and reducer is None:
                    reducer = _reduce_session(Path(model_path), names, workdir)
                    red_names = [f"qk_{k}_{i}" for i in range(len(names)) for k in ("min", "max", "amin")]
                while (feed := reader.get_next()) is not None:
                    got = True
                    if pass_no == 1:  # reductions run inside ORT: min, max, min|x| per tensor
                        red = reducer.run(red_names, feed)
                        for i, name in enumerate(names):
                            hs.observe(name, red[3 * i], red[3 * i + 1], red[3 * i + 2])
                    else:
                        outs = cal.infer_session.run(names, feed)
                        for name, arr in zip(names, outs):
                            hs.count(name, arr)
                        del outs
                if not got:
                    raise CalibrationSetError(f"{where}: batches {s}..{e - 1} gave no readable image; fix or remove those images")
            chunks += 1
            save(pass_no, e)
        if histogram and pass_no == 1:
            save(2, 0)
            reducer = None
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

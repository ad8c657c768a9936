"""Bounded-memory, resumable range collection that reproduces ONNX Runtime's calibrators.

ORT's ``quantize_static`` calls ``calibrator.collect_data(reader)`` once, and the histogram calibrators
(Entropy, Percentile, Distribution) keep every intermediate output of every image until the reader is
exhausted (issue 5: 6.1 GB for 8 images at 640x640); calling it once per chunk instead changes the result
(``HistogramCollector`` fixes its bins from the first chunk: percentile ranges off by up to 27 % on PP-OCR).
Here one loop serves every method: each image runs the tap model (every calibrated tensor an output,
:mod:`.tap`) and its tensors are folded into a state whose size does not depend on the number of images,
tensors in parallel on a thread pool (:func:`fold_threads`):

* MinMax (:class:`~.minmax.MinMaxState`): running min/max (``moving_average``: the per-image values ORT
  averages); exact, bit for bit. Each tensor's minimum and maximum are reduced inside ONNX Runtime
  (:class:`~.tap.ExtremaSession`, as ORT's ``MinMaxCalibrater`` does) instead of reading the tensor out (for the
  PP-OCR detector at 640x640, 687 MB per image; :mod:`.reading`). Tensors whose range follows from another's
  (:mod:`.derive`) are reduced on the first image only. Entropy with
  ``num_quantized_bins >= num_bins`` (ORT's defaults) is this too: its KL search has a single candidate, the
  MinMax range (:meth:`~.minmax.MinMaxState.entropy_histograms`); exact.
* Percentile: one streaming pass (:class:`~.fine_histogram.FineHistogramState`), within a stated tolerance (one
  ORT bin plus one fine bin), checked per tensor, a failing tensor recounted exactly in a second pass. After the
  first image each tensor is read by its tails inside ONNX Runtime (:mod:`.reading`): exact minimum and maximum,
  and only the rows that hold an element beyond its cut-offs leave the session.
* Distribution, and Entropy with ``num_quantized_bins < num_bins``: two streaming passes on ORT's one-call
  bins (:class:`~.histogram.HistogramState`); exact.

ORT's own code turns the states into ranges (:mod:`..ort_bridge`: ``compute_collection_result`` and the MinMax
formulas). Peak memory: one inference's tensors (in reused buffers; MinMax-like: only its graph outputs) plus a
fixed number of counts per tensor.
The calibration session runs with graph optimizations off, as ORT's calibrators' do (``calibration_graph: exact``),
or at ORT's ``all`` level (``optimized``: faster, ranges equal to float rounding; :class:`~.config.StaticQuantConfig`).

Checkpoints (:mod:`.checkpoint`, plain ``.npz``): after a chunk, when ``CHECKPOINT_INTERVAL_S`` seconds have
passed since the last save, and at the end of each pass; a run under the same key (model digest, set id,
config hash, tool versions) continues after the last saved chunk, so an interruption loses at most that
interval. (A histogram state is tens of MB; saving it after every image would cost more than the image.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ...errors import CalibrationSetError, ConfigError, ModelError
from ...progress import progress
from ...runtimes.base import checked_thread_count
from .. import ort_bridge
from ..config import StaticQuantConfig
from ..outputs import ChannelRange, OutputChannels
from . import checkpoint as ckpt
from .derive import derivations
from .fine_histogram import FineHistogramState
from .histogram import HistogramState
from .minmax import MinMaxState
from .reading import State, TensorReader

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 10.0
#: ORT graph optimization level of the calibration session per ``calibration_graph``.
CALIBRATION_LEVELS = {"exact": "disable", "optimized": "all"}


@dataclasses.dataclass(frozen=True)
class CalibrationRun:
    """What range collection did. ``tensors`` is ORT's ``TensorsData`` (tensor name -> ``TensorData``).

    ``images`` counts images seen in this and resumed runs; ``chunks`` is how many chunks a whole run takes (all
    passes, resumed or not); ``resumed_batches`` is how many batches were restored from a checkpoint and ``seconds``
    this run's wall time (both logged, not recorded: :meth:`to_dict`). ``unobserved``: calibrated tensors that had
    no element on any image (no range; the engine keeps their nodes in float). ``variable_shape``: tensors whose
    shape the model leaves open (read at whatever size arrives). ``warnings``: one line each, for the user.
    ``channel_ranges``: FP32 ranges per channel of the graph outputs and the other tensors asked for
    (:class:`~.outputs.OutputChannels`); ``channel_means``: the same tensors' mean over images of each image's per-channel
    min and max (:meth:`~.outputs.OutputChannels.mean_ranges`).
    """

    tensors: Any
    images: int
    batches: int
    chunks: int
    resumed_batches: int
    seconds: float
    unobserved: tuple[str, ...] = ()
    variable_shape: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    channel_ranges: tuple[ChannelRange, ...] = ()
    channel_means: tuple[ChannelRange, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The record's ``calibration`` entries (the three lists only when not empty).

        Only what the result depends on: not ``seconds`` nor ``resumed_batches``, so a run resumed from a
        checkpoint writes the same record bytes as an uninterrupted one (the resume is logged instead).
        """
        d: dict[str, Any] = {"tensors": len(self.tensors.data), "images": self.images, "batches": self.batches, "chunks": self.chunks}
        for k in ("unobserved", "variable_shape", "warnings"):
            if getattr(self, k):
                d[k] = list(getattr(self, k))
        return d

    def __repr__(self) -> str:
        return f"CalibrationRun(tensors={len(self.tensors.data)}, images={self.images}, chunks={self.chunks}, resumed_batches={self.resumed_batches})"


def fold_threads() -> int:
    """Threads that fold one inference's outputs into the state: ``QUANTKIT_CALIB_THREADS``, else the CPU count
    (at most 8). Each tensor is folded by one thread (its state is only touched by that thread); numpy's
    reductions, ufuncs and copies release the GIL on large arrays, so tensors fold in parallel.

    Raises:
        ConfigError: ``QUANTKIT_CALIB_THREADS`` is not a whole number from 1 to 4 per CPU core.
    """
    env = os.environ.get("QUANTKIT_CALIB_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ConfigError(f"QUANTKIT_CALIB_THREADS={env!r}: expected a whole number of threads, e.g. 2") from None
        if n < 1:
            raise ConfigError(f"QUANTKIT_CALIB_THREADS={env!r}: expected at least 1")
        return checked_thread_count("QUANTKIT_CALIB_THREADS", env, n)
    return max(1, min(8, os.cpu_count() or 1))


def _minmax_like(params: ort_bridge.CalibratorParams) -> bool:
    return params.method == "minmax" or (params.method == "entropy" and params.num_quantized_bins >= params.num_bins)


def make_state(params: ort_bridge.CalibratorParams, names: list[str], derivations: dict[str, Any] | None = None,
               arrays: dict[str, np.ndarray] | None = None, batches: int = 1000) -> State:
    """The state that reproduces ``params``' calibrator (see the module docstring), empty or rebuilt from a
    checkpoint's ``arrays``. ``derivations``: :func:`quantkit.quantize.calibration.derive.derivations` (MinMax-like only);
    ``batches``: how many batches the calibration will read (Percentile sizes its pinned tails by it)."""
    if _minmax_like(params):
        if arrays is not None:
            return MinMaxState.from_arrays(arrays, derivations)
        return MinMaxState(names, params.moving_average, derivations)
    cls = FineHistogramState if params.method == "percentile" else HistogramState
    if arrays is not None:
        return cls.from_arrays(arrays)
    if cls is FineHistogramState:
        return FineHistogramState(names, params.num_bins, params.absolute, params.tail_fraction, batches)
    return HistogramState(names, params.absolute, params.num_bins)


@contextlib.contextmanager
def _pool(threads: int) -> Iterator[ThreadPoolExecutor | None]:
    pool = ThreadPoolExecutor(threads, thread_name_prefix="quantkit-fold") if threads > 1 else None
    try:
        yield pool
    finally:
        if pool is not None:
            pool.shutdown()


class _Saver:
    """Saves the state after a chunk when ``CHECKPOINT_INTERVAL_S`` has passed (or when forced)."""

    def __init__(self, path: Path | None, key: ckpt.CheckpointKey | None, state: State, channels: OutputChannels, dynamic: set[str]) -> None:
        self.path, self.key, self.state, self.channels, self.dynamic = path, key, state, channels, dynamic
        self.last = time.monotonic()

    def __call__(self, pass_no: int, done: int, *, force: bool = True) -> None:
        if self.path is None or self.key is None:
            return
        if force or time.monotonic() - self.last >= CHECKPOINT_INTERVAL_S:
            self.last = time.monotonic()
            arrays = {**self.state.to_arrays(), **{f"ch.{k}": v for k, v in self.channels.to_arrays().items()},
                      "variable_shape": np.array(sorted(self.dynamic), dtype=str)}
            ckpt.save(self.path, self.key, pass_no, done, arrays)


@dataclasses.dataclass
class _Pass:
    """One pass over batches ``[first, n_batches)`` in chunks; returns the number of chunks run."""

    reader: Any
    tap_model: Path
    n_batches: int
    chunk: int
    where: str
    desc: str
    level: str = "disable"
    graph_outputs: tuple[str, ...] = ()

    def run(self, state: State, pass_no: int, first: int, pool: ThreadPoolExecutor | None, save: _Saver, dynamic: set[str],
            channels: OutputChannels | None) -> int:
        names = state.pass_names(pass_no)
        if not names:
            return 0
        starts = range(first, self.n_batches, self.chunk)
        reader = TensorReader(self.tap_model, names, state, pool, channels, self.level, self.graph_outputs)
        try:
            for s in progress(starts, total=len(starts), desc=self.desc, unit="chunk"):
                e = min(s + self.chunk, self.n_batches)
                self.reader.set_range(s, e)
                got = False
                while (feed := self.reader.get_next()) is not None:
                    got = True
                    try:
                        reader.read(pass_no, feed)
                    except Exception as err:  # ORT's own failure types: one line naming the batch
                        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
                        raise ModelError(f"{self.where}: ONNX Runtime failed while calibrating batches {s}..{e - 1} ({first_line})") from None
                    dynamic.update(reader.dynamic_names)
                if not got:
                    raise CalibrationSetError(f"{self.where}: batches {s}..{e - 1} gave no readable image; fix or remove those images")
                save(pass_no, e, force=e == self.n_batches)
        finally:
            reader.close()
        return len(starts)


def _ranges(plan: ort_bridge.CalibrationPlan, state: State, dynamic: set[str]) -> tuple[Any, tuple[str, ...]]:
    """ORT ``TensorsData`` from the final state, and the tensors never seen; marks tensors derived from a
    variable-shaped one as variable-shaped (in ``dynamic``)."""
    if isinstance(state, MinMaxState) and plan.params.method == "entropy":
        ranges = ort_bridge.histogram_ranges(plan.params, state.entropy_histograms(plan.params.num_bins))
    elif isinstance(state, MinMaxState):
        ranges = ort_bridge.minmax_ranges(state.pairs(plan.params.symmetric))
    else:
        ranges = ort_bridge.histogram_ranges(plan.params, state.histogram_dict())
    if isinstance(state, MinMaxState):
        for t, d in state.derived.items():
            if d.source in dynamic:
                dynamic.add(t)
    return ranges, tuple(n for n in plan.tensors if state.extremes(n) is None)


def _entropy_warning(params: ort_bridge.CalibratorParams, state: State, ranges: Any) -> str | None:
    """A warning when Entropy gave every tensor exactly its MinMax range (issue 17: the default bins do)."""
    if params.method != "entropy" or not ranges.data:
        return None
    for name, td in ranges.data.items():
        ext = state.extremes(name)
        lo, hi = td.range_value
        if ext is None or float(lo) != float(ext[0]) or float(hi) != float(ext[1]):
            return None
    if params.num_bins <= params.num_quantized_bins:
        why = (f"with num_bins {params.num_bins} <= num_quantized_bins {params.num_quantized_bins} ORT's KL search has one "
               "candidate; set num_bins: 2048 (keep num_quantized_bins: 128) to search, or use method: minmax")
    else:
        why = f"raise num_bins (now {params.num_bins}) for a finer KL search, or use method: minmax"
    return f"method 'entropy' gave all {len(ranges.data)} tensors their MinMax ranges: {why}"


def collect_ranges(
    model_path: str | Path,
    reader: Any,
    config: StaticQuantConfig,
    *,
    workdir: str | Path,
    op_types: list[str] | None = None,
    checkpoint: str | Path | None = None,
    key: ckpt.CheckpointKey | None = None,
    outputs: dict[str, tuple[int, ...]] | None = None,
) -> CalibrationRun:
    """Collect calibration ranges image by image, reproducing ORT's one-call calibrator for ``config.method``.

    Args:
        model_path: the float model to calibrate (a file).
        reader: ORT's reader protocol (``get_next() -> {input: array} | None``) with ``__len__`` (batches) and
            ``set_range(start, end)`` in batch units, e.g. :class:`quantkit.calibset.CalibrationSetReader`.
        config: the static config (method, histogram options, ``calibration_chunk_size``, ``max_images``).
        workdir: scratch folder for the tap model.
        op_types: op types whose tensors are calibrated (what ``quantize_static`` passes); default ORT's.
        checkpoint: ``.npz`` file to save state to and resume from; None (or no ``key``) = no checkpointing.
        key: identity of the run (:class:`quantkit.quantize.calibration.checkpoint.CheckpointKey`); a checkpoint under
            another key is ignored (logged).
        outputs: ``{graph output: channel axes}`` whose per-channel FP32 ranges to collect
            (:func:`quantkit.quantize.outputs.channel_axes`; only calibrated tensors are read).

    Returns:
        :class:`CalibrationRun` with ORT ``TensorsData`` (float32 ranges per tensor).

    Raises:
        CalibrationSetError: the reader yields no batch, or a chunk gives no readable image.
        ModelError: ONNX Runtime fails to run the model on an image (one line).
    """
    t0 = time.perf_counter()
    n_batches = len(reader)
    bs = max(1, int(getattr(reader, "batch_size", 1)))
    if config.max_images is not None:
        n_batches = min(n_batches, -(-config.max_images // bs))
    where = str(getattr(getattr(reader, "cset", None), "root", "calibration set"))
    if n_batches == 0:
        raise CalibrationSetError(f"{where}: no images to calibrate on; add images and register the set again")
    plan = ort_bridge.calibration_plan(model_path, config, op_types or ort_bridge.default_op_types("qdq"), workdir)
    channels = OutputChannels({n: ax for n, ax in (outputs or {}).items() if n in plan.tensors})
    derivs = derivations(onnx.load(str(plan.tap_model), load_external_data=False), plan.tensors) if _minmax_like(plan.params) else None
    if derivs:  # a tensor whose channels are folded is read on every image, not derived after the first (its channels would see one)
        derivs = {k: v for k, v in derivs.items() if k not in channels.axes}
    state: State = make_state(plan.params, list(plan.tensors), derivs, batches=n_batches)
    key = dataclasses.replace(key, state=type(state).__name__) if key is not None else None
    pass_no, done, dynamic = 1, 0, set()
    if checkpoint is not None and key is not None:
        saved = ckpt.load(checkpoint, key)
        if saved is not None:
            ch = {k[3:]: v for k, v in saved.arrays.items() if k.startswith("ch.")}
            dynamic = {str(n) for n in saved.arrays.get("variable_shape", ())}
            state = make_state(plan.params, list(plan.tensors), derivs,
                               {k: v for k, v in saved.arrays.items() if not k.startswith("ch.") and k != "variable_shape"})
            channels, pass_no, done = OutputChannels.from_arrays(ch), saved.pass_no, saved.done
            log.info("resuming calibration from %s at pass %d after %d of %d batches", checkpoint, pass_no, done, n_batches)
    resumed = done + (n_batches if pass_no == 2 else 0)
    save = _Saver(Path(checkpoint) if checkpoint is not None else None, key, state, channels, dynamic)
    chunk_batches = max(1, config.calibration_chunk_size // bs)
    with ort_bridge.quiet_ort(), _pool(fold_threads()) as pool:
        while True:
            desc = f"calibrate {config.method}" + (f" pass {pass_no}" if pass_no > 1 else "")
            step = _Pass(reader, plan.tap_model, n_batches, chunk_batches, where, desc, CALIBRATION_LEVELS[config.calibration_graph],
                         plan.graph_outputs)
            step.run(state, pass_no, done, pool, save, dynamic, channels if pass_no == 1 else None)
            if pass_no >= state.passes or not state.end_pass(pass_no):
                break
            pass_no, done = pass_no + 1, 0
            save(pass_no, 0)
    ranges, unobserved = _ranges(plan, state, dynamic)
    warning = _entropy_warning(plan.params, state, ranges)
    count = getattr(getattr(reader, "cset", None), "count", n_batches * bs)
    images = min(n_batches * bs, count, config.max_images or count)
    chunks = pass_no * -(-n_batches // chunk_batches)  # a whole run's, resumed or not: the record must not depend on a resume
    return CalibrationRun(tensors=ranges, images=images, batches=n_batches, chunks=chunks, resumed_batches=resumed,
                          seconds=time.perf_counter() - t0, unobserved=unobserved, variable_shape=tuple(sorted(dynamic)),
                          warnings=(warning,) if warning else (), channel_ranges=channels.ranges(),
                          channel_means=channels.mean_ranges())

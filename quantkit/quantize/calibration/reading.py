"""Reading one inference's calibrated tensors into a calibration state (:mod:`.calibrate`'s inner loop).

Three ways, by state (:func:`quantkit.quantize.calibration.calibrate.make_state`):

* MinMax-like (:class:`~.minmax.MinMaxState`): each tensor's minimum and maximum reduced inside ONNX Runtime
  (:class:`~.tap.ExtremaSession`, as ORT's ``MinMaxCalibrater`` does), the graph outputs whole; no tensor is read
  out, so peak memory does not hold one inference's tensors. The derivations (:mod:`.derive`) are checked on the
  first image's extremes, and the session then reads only the tensors not derived.
* Percentile (:class:`~.fine_histogram.FineHistogramState`): the first image whole (it sets each tensor's grid and
  cut-offs), then each tensor by its tails inside ONNX Runtime (:class:`~.tap.ExtremaSession` with
  :class:`~.tap.Cut`): exact minimum and maximum, and only the rows of the tensor that hold an element beyond its
  cut-offs (for the PP-OCR detector at 640x640, about 2 % of 687 MB per image; a side piled at a saturation reads only
  what goes past the first image's extreme); the state is the one the whole
  tensors give, bit for bit (:meth:`~.fine_histogram.FineHistogramState.fold_tails`). Tensors without a shape
  declared in full, or with no cut-offs, are read whole.
* Otherwise (histograms, a percentile's exact second pass): every tensor whole through the tap model
  (:class:`~.tap.TapSession`), folded on the thread pool.

NaN: numpy's ``fmin`` / ``fmax`` ignore it, ORT's ``ReduceMin`` does not (:class:`~.tap.ExtremaSession`), so an
image on which a reduction gives NaN, or a graph output holds one, is read again whole. A NaN that neither shows
gives ORT's MinMax calibrator's own range (its reductions are the same); ORT's histogram calibrators fail on NaN.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..outputs import OutputChannels
from .fine_histogram import FineHistogramState
from .histogram import HistogramState
from .minmax import MinMaxState
from .tap import Cut, ExtremaSession, TapSession

log = logging.getLogger(__name__)

State = MinMaxState | HistogramState | FineHistogramState


def fold(state: State, pass_no: int, names: list[str], outs: list[Any], pool: ThreadPoolExecutor | None,
         channels: OutputChannels | None, extra: Sequence[tuple[int, Callable[..., None], tuple[Any, ...]]] = ()) -> None:
    """Fold one inference's outputs (``names`` order) into ``state`` (and the graph outputs into ``channels``), and run
    the ``extra`` jobs ``(size, fn, args)``, largest first on ``pool``."""
    jobs = [(outs[i].size, state.fold, (pass_no, names[i], outs[i])) for i in range(len(names))] + list(extra)
    if channels is not None:
        jobs += [(outs[i].size, channels.fold, (names[i], outs[i])) for i in range(len(names)) if names[i] in channels.names]
    if pool is None:
        for _, fn, args in jobs:
            fn(*args)
        return
    for f in [pool.submit(fn, *args) for _, fn, args in sorted(jobs, key=lambda j: -j[0])]:
        f.result()


def _has_nan(extremes: dict[str, tuple[np.ndarray, np.ndarray]], whole: dict[str, np.ndarray]) -> bool:
    return any(np.isnan(v).any() for v in whole.values() if v.dtype.kind == "f") or any(np.isnan(a) or np.isnan(b) for a, b in extremes.values())


class TensorReader:
    """Reads one inference's calibrated tensors ``names`` into ``state`` (see the module docstring); use
    :meth:`read` per batch, then :meth:`close`. ``dynamic_names``: tensors seen at a variable shape.

    Args:
        tap_model: the tap model (:mod:`.tap`).
        names: the tensors this pass reads (``state.pass_names(pass_no)``).
        state: the calibration state.
        pool: threads that fold tensors (None: fold in this thread).
        channels: per-channel ranges of the graph outputs to collect (pass 1), or None.
        level: ORT graph optimization level of the sessions.
        graph_outputs: the model's own outputs (read whole, to see a NaN).

    Raises:
        ModelError: ORT cannot load a session's model (one line).
    """

    def __init__(self, tap_model: Path, names: list[str], state: State, pool: ThreadPoolExecutor | None,
                 channels: OutputChannels | None, level: str, graph_outputs: tuple[str, ...]) -> None:
        self.tap_model, self.state, self.pool, self.channels = tap_model, state, pool, channels
        self.level, self.graph_outputs = level, graph_outputs
        self.dynamic_names: set[str] = set()
        self.cuts: dict[str, Cut] = {}
        self.tails_failed = False
        self.session = self._open(names)

    def _open(self, names: list[str], cuts: dict[str, Cut] | None = None) -> TapSession | ExtremaSession:
        self.names, self.cuts = names, cuts or {}
        full = set(self.channels.names) if self.channels is not None else set()
        if isinstance(self.state, MinMaxState) or cuts:
            return ExtremaSession(self.tap_model, names, full=full, graph_outputs=self.graph_outputs, level=self.level, cuts=cuts).__enter__()
        return TapSession(self.tap_model, names, level=self.level).__enter__()

    def read(self, pass_no: int, feed: dict[str, Any]) -> None:
        """Fold one batch (``feed``: the model's inputs) into the state."""
        if isinstance(self.session, ExtremaSession):
            self._read_reduced(pass_no, feed)
        else:
            fold(self.state, pass_no, self.names, self.session.run(feed), self.pool, self.channels)
        self.state.settle()
        self.dynamic_names |= self.session.dynamic_names
        if self.state.pass_names(pass_no) != self.names:  # fewer tensors to read from now on (derived ranges)
            self._reopen(self.state.pass_names(pass_no))
        elif isinstance(self.state, FineHistogramState) and pass_no == 1 and isinstance(self.session, TapSession) and not self.tails_failed:
            cuts = {}
            for n in self.names:
                c = self.state.cut_for_tails(n)
                if c is not None:
                    cuts[n] = Cut(None if c[0] is None else float(c[0]), float(c[1]), c[2])
            if cuts:  # after the first image: the tails only
                self._reopen(self.names, cuts)

    def _reopen(self, names: list[str], cuts: dict[str, Cut] | None = None) -> None:
        self.session.__exit__(None, None, None)
        self.session = self._open(names, cuts)

    def _read_reduced(self, pass_no: int, feed: dict[str, Any]) -> None:
        assert isinstance(self.session, ExtremaSession)
        try:
            extremes, whole, tails = self.session.run(feed)
        except Exception as e:  # a tensor read by its tails changed size (its rows no longer divide it): read whole from now on
            if not self.cuts:
                raise
            log.info("calibration: reading by tails failed (%s); reading every tensor whole", (str(e).strip().splitlines() or ["?"])[0][:200])
            self.tails_failed = True
            self._reopen(self.names)
            fold(self.state, pass_no, self.names, self.session.run(feed), self.pool, self.channels)
            return
        wanted = set(self.names)
        mine = [n for n in whole if n in wanted]
        nan = _has_nan(extremes, whole)
        extra = []
        if not nan and isinstance(self.state, FineHistogramState):
            extra = [(t.rows.size, self.state.fold_tails, (n, *extremes[n], t.size, t.rows, t.amin)) for n, t in tails.items()]
        # the tails fold in this thread: hundreds of small jobs, which the pool's hand-offs made 4 % slower in all
        # (PP-OCR detector at 640x640, 64 images, one thread vs the pool, 5 runs each in turn: 10.9 s vs 11.4 s median wall)
        fold(self.state, pass_no, mine, [whole[n] for n in mine], None if extra else self.pool, self.channels, extra)
        if nan:
            log.info("calibration: NaN on an image; reading its %d reduced tensors whole", len(extremes))
            with TapSession(self.tap_model, list(extremes), level=self.level) as tap:
                fold(self.state, pass_no, list(extremes), tap.run(feed), self.pool, None)
        elif isinstance(self.state, MinMaxState):
            for n, (lo, hi) in extremes.items():
                self.state.fold_extremes(n, lo, hi)

    def close(self) -> None:
        self.session.__exit__(None, None, None)

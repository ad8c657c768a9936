"""Exact two-pass histograms on the bins ONNX Runtime's one-call ``HistogramCollector`` would use.

ORT's histogram calibrators (``onnxruntime/quantization/calibrate.py``) keep every intermediate output of
every image until the reader is exhausted, then histogram them in one call. :class:`HistogramState`
gives the same histograms with memory independent of the number of images, in two streaming passes:

* pass 1 keeps, per tensor, ``min``, ``max``, ``min|x|`` and ``max|x|`` (NaNs ignored, as ORT's ``np.nanmin``);
* pass 2 adds ``np.histogram`` counts on exactly the bins the one-call collector would have chosen
  (``collect_value``: ``num_bins`` over ``(-t, t)``, ``t = max(|min|, |max|)``; ``collect_absolute_value``:
  ``num_bins`` over ``[min|x|, max|x|]``). Counting with fixed edges is per element, so the sum over
  images equals the one-call histogram, and ORT's own ``compute_collection_result`` turns it into
  thresholds: exact (tests compare with ORT bit for bit).

Tensors may change shape from image to image (data-dependent post-processing such as NonZero -> GatherND):
every array is flattened, and an empty one adds nothing. A tensor that was empty in every image has no
histogram (:meth:`HistogramState.histogram_dict` leaves it out).

State is plain arrays (:meth:`to_arrays` / :meth:`from_arrays`) so a checkpoint needs no pickle.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def scalars_to_array(rows: list[list[Any] | None], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-tensor rows of numpy float scalars -> ``(float64[n, width], dtype names[n])``; a missing row is
    NaN with dtype ``""``. float16/float32 values are exact in float64, so :func:`array_to_scalars` restores
    them bit for bit."""
    vals = np.full((len(rows), width), np.nan, np.float64)
    dtypes = np.array(["" if r is None else np.asarray(r[0]).dtype.name for r in rows], dtype="U16")
    for i, r in enumerate(rows):
        if r is not None:
            vals[i] = [float(v) for v in r]
    return vals, dtypes


def array_to_scalars(vals: np.ndarray, dtypes: np.ndarray) -> list[list[Any] | None]:
    """Inverse of :func:`scalars_to_array`."""
    out: list[list[Any] | None] = []
    for row, dt in zip(vals, dtypes):
        out.append(None if not dt else [np.dtype(str(dt)).type(v) for v in row])
    return out


class HistogramState:
    """Two-pass exact histograms (see the module docstring) for ``names``.

    Args:
        names: calibrated tensors.
        absolute: histogram ``|x|`` (ORT's ``collect_absolute_value``: percentile with ``symmetric=True``)
            instead of ``x`` (``collect_value``: entropy, distribution, asymmetric percentile).
        num_bins: ORT's ``num_bins``.
    """

    passes = 2

    def __init__(self, names: list[str], absolute: bool, num_bins: int) -> None:
        self.names = list(names)
        self.absolute = absolute
        self.num_bins = int(num_bins)
        self.stats: dict[str, list[Any]] = {}  # name -> [min, max, min|x|, max|x|] (data dtype scalars)
        self.hist: dict[str, np.ndarray] = {}
        self.edges: dict[str, np.ndarray] = {}

    def pass_names(self, pass_no: int) -> list[str]:
        """Tensors pass ``pass_no`` reads (pass 2 skips tensors never seen in pass 1)."""
        return self.names if pass_no == 1 else [n for n in self.names if n in self.stats]

    def fold(self, pass_no: int, name: str, arr: Any) -> None:
        (self.observe if pass_no == 1 else self.count)(name, arr)

    def end_pass(self, pass_no: int) -> bool:
        """True while another pass is needed."""
        return pass_no == 1 and bool(self.stats)

    def settle(self) -> None:
        """After an image: nothing to do (the pass interface of :mod:`quantkit.quantize.calibration.calibrate`)."""

    def observe(self, name: str, arr: Any) -> None:
        """Pass 1: fold one batch's tensor into the running ``[min, max, min|x|, max|x|]`` (NaN ignored, as ``np.nanmin``)."""
        a = np.asarray(arr).reshape(-1)
        if a.size == 0:
            return
        mn, mx = np.fmin.reduce(a), np.fmax.reduce(a)
        if np.isnan(mn):  # every value NaN: nothing to count
            return
        amin = np.fmin.reduce(np.absolute(a)) if self.absolute else np.array(0, dtype=a.dtype)[()]
        cur = [mn, mx, amin, max(abs(mn), abs(mx))]
        old = self.stats.get(name)
        self.stats[name] = cur if old is None else [min(old[0], cur[0]), max(old[1], cur[1]), min(old[2], cur[2]), max(old[3], cur[3])]

    def count(self, name: str, arr: Any) -> None:
        """Pass 2: add one batch's counts on ORT's one-call bins."""
        a = np.asarray(arr).reshape(-1)
        if name not in self.stats:
            return
        mn, mx, amin, amax = self.stats[name]
        if self.absolute:  # HistogramCollector.collect_absolute_value: np.histogram(|x|, bins=num_bins) spans [min|x|, max|x|]
            h, e = np.histogram(np.absolute(a), bins=self.num_bins, range=(amin, amax))  # type: ignore[arg-type]
        else:  # HistogramCollector.collect_value: range (-t, t), t = max(|min|, |max|)
            t = np.array(max(abs(mn), abs(mx)), dtype=mn.dtype)
            h, e = np.histogram(a, self.num_bins, range=(-t, t))  # type: ignore[arg-type]
        if name in self.hist:
            self.hist[name] += h
        else:
            self.hist[name], self.edges[name] = h.astype(np.int64), e.astype(mn.dtype)

    def extremes(self, name: str) -> tuple[Any, Any] | None:
        """Exact ``(min, max)`` seen for ``name`` (data dtype), or None when it was never seen."""
        s = self.stats.get(name)
        return None if s is None else (s[0], s[1])

    def histogram_dict(self) -> dict[str, tuple[Any, ...]]:
        """ORT's one-call ``HistogramCollector.histogram_dict``: ``(hist, edges, min, max, t)``, absolute
        ``(hist, edges, min, max)``; tensors never seen are left out."""
        out: dict[str, tuple[Any, ...]] = {}
        for name in self.hist:
            mn, mx, _, _ = self.stats[name]
            if self.absolute:
                out[name] = (self.hist[name], self.edges[name], mn, mx)
            else:
                out[name] = (self.hist[name], self.edges[name], mn, mx, np.array(max(abs(mn), abs(mx)), dtype=self.edges[name].dtype))
        return out

    # -- checkpoint arrays ------------------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The whole state as plain arrays (names, stats, counts, edges); see :meth:`from_arrays`."""
        stats, dtypes = scalars_to_array([self.stats.get(n) for n in self.names], 4)
        counted = np.array([n in self.hist for n in self.names], bool)
        hist = np.zeros((len(self.names), self.num_bins), np.int64)
        edges = np.zeros((len(self.names), self.num_bins + 1), np.float64)
        for i, n in enumerate(self.names):
            if n in self.hist:
                hist[i], edges[i] = self.hist[n], self.edges[n]
        return {"names": np.array(self.names, dtype=str), "absolute": np.array(self.absolute), "num_bins": np.array(self.num_bins),
                "stats": stats, "dtypes": dtypes, "counted": counted, "hist": hist, "edges": edges}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> HistogramState:
        """Rebuild a state saved by :meth:`to_arrays` (bit for bit)."""
        st = cls([str(n) for n in a["names"]], bool(a["absolute"]), int(a["num_bins"]))
        for n, row in zip(st.names, array_to_scalars(a["stats"], a["dtypes"])):
            if row is not None:
                st.stats[n] = row
        for i, n in enumerate(st.names):
            if a["counted"][i]:
                st.hist[n] = a["hist"][i].copy()
                st.edges[n] = a["edges"][i].astype(st.stats[n][0].dtype)
        return st

"""One-pass histograms for ONNX Runtime's percentile and entropy calibrators, within a stated tolerance.

ORT's ``HistogramCollector`` histograms every element of every image. :class:`FineHistogramState` gets the
same thresholds in one streaming pass that reads most elements only to update ``min``/``max``: a fine grid
counted in full for the first image and in the tails only afterwards, rebinned at the end onto ORT's one-call
edges. Entropy with ``num_quantized_bins >= num_bins`` (ORT's defaults): exact, bit for bit. Percentile:
within the tolerance stated in the class docstring, checked per tensor; a tensor whose check fails is
recounted exactly by a second pass over that tensor only (:class:`~quantkit.quantize.calibration.histogram.HistogramState`).
Measured on the PP-OCR detector at 640x640, 8 images: percentile 316 of 331 tensors bit for bit, the others
one ORT bin away; entropy 331 of 331.

Arrays of any shape are flattened, so tensors whose shape changes from image to image are counted as they
come. The state is plain arrays (:meth:`FineHistogramState.to_arrays`), so a checkpoint needs no pickle.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import cutoffs
from .histogram import HistogramState, array_to_scalars, scalars_to_array
from .minmax import blocked_tails


class FineHistogramState:
    """One-pass histograms for ORT's ``collect_value`` (entropy; percentile with ``symmetric=False``) and
    ``collect_absolute_value`` (percentile's default ``symmetric=True``), within a stated tolerance.

    Per tensor: exact ``min``, ``max`` (and ``min|x|`` for absolute) and counts on a fine grid of
    ``FINE * num_bins`` uniform bins over ``(-T, T)`` (absolute: ``[0, T]``). ``T`` starts at the first batch's
    ``max|x|`` and is multiplied by a power of two when a later batch exceeds it (groups of fine bins merge
    exactly: the grids nest), so ``t <= T < 2t`` for the final ``t = max|x|``.

    Only the tails are counted at full resolution after the first batch: the first batch is counted whole and
    sets cut-offs holding ``tail`` of its elements per side (``max(TAIL, 100 x`` the fraction the percentile
    cuts``)``, all elements when that reaches 1/2); later batches add to the fine grid only the elements beyond the
    cut-offs (``x <= lo`` or ``x >= hi``; absolute ``|x| >= c``) and count the rest as one number, so that only
    the rows holding tail elements need leave ONNX Runtime (:meth:`fold_tails`, :mod:`quantkit.quantize.calibration.reading`).
    At the end the fine bins wholly beyond the cut-offs are exact; the others' mass is lumped into the first bin
    inside them. No threshold depends on where the cut-offs lie while the check below holds (the cumulative counts
    at edges beyond them are exact either way); cut-offs nearer the tail make it fail (a recount) when the later
    images' tails are lighter than the first's: ``100 x``, here, by a factor of about 100 on average.

    ``histogram_dict`` interpolates the cumulative fine counts at ORT's one-call edges (taken from
    ``np.histogram`` itself, so they are exact: ``linspace(-t, t, num_bins + 1)``, absolute
    ``linspace(min|x|, max|x|, num_bins + 1)``, in the data's dtype) and rounds them. Where the fine bins are
    exact each rebinned cumulative count lies between the exact counts at ``e - w`` and ``e + w`` (``w`` one
    fine bin, ``< t / (2 num_bins)``), so, **stated tolerance**:

    * percentile: each threshold is within one ORT bin plus ``w`` (``< ORT bin + t / (2 num_bins)``) of ORT's
      one-call threshold; the clip to the exact ``[min, max]`` is ORT's. ``unresolved`` checks, per tensor, that
      the chosen edge lies at least ``2 (ORT bin + w)`` inside the exact region (so the bound applies); a tensor
      that fails (its tails grew far heavier after the first batch) is recounted exactly by a second pass
      (``repair``, a :class:`~quantkit.quantize.calibration.histogram.HistogramState` for those tensors only). Measured on PP-OCR (tests): 0 ulp
      for all but a few tensors.
    * entropy with ``num_quantized_bins >= num_bins`` (ORT's defaults, 128/128): the only candidate is
      ``(-t, t)`` clipped to ``[min, max]``, built from exact values: bit for bit equal to ORT. As no count
      can change it, batches after the first only update min and max (two passes) and their element count
      goes to the bin holding 0.

    Piles (:mod:`.cutoffs`): a side piled at a saturation (``Clip``'s 6, ``Relu``'s 0, hard-swish's minimum) is *pinned*
    after the first batch and reads only what goes past that batch's extreme; where the pile alone settles ORT's
    edge (checked in :meth:`unresolved`) the range is ORT's exactly, otherwise the check above applies. Tensors of
    fewer than ``1 / tail`` elements are counted whole (on the PP-OCR detector with ``symmetric=False``, 10 small
    tensors had failed the check and needed the exact second pass, a second inference per image).

    ``hist`` (the per-bin counts ORT also reports in ``TensorData``; quantkit does not use them) is exact
    in the percentile's tails only.
    """

    passes = 2  # pass 2 runs only for tensors in `repair` (usually none)
    FINE = 8
    TAIL = 0.001

    def __init__(self, names: list[str], num_bins: int, absolute: bool, need: float, batches: int = 1000) -> None:
        self.names = names
        self.batches = max(int(batches), 1)  # batches the calibration expects (sizes the pins; a wrong guess costs a recount)
        self.num_bins = num_bins
        self.absolute = absolute
        self.need = need  # fraction of elements beyond ORT's threshold, per side; 0.0: counts do not matter (entropy)
        self.tail = min(0.5, max(self.TAIL, 100.0 * need))
        self.fine = self.FINE * num_bins
        self.zero_bin = 0 if absolute else self.fine // 2  # fine bin holding 0
        self.stats: dict[str, list[Any]] = {}  # name -> [min, max, min|x|] (data dtype scalars)
        self.half: dict[str, float] = {}  # name -> T (0.0 while every value so far is 0)
        self.counts: dict[str, Any] = {}  # name -> int64[fine]; while T == 0: int, the number of zeros
        self.cut: dict[str, tuple[Any, Any] | None] = {}  # name -> (lo, hi) float32 (absolute: (c, c)); None: count all
        self.bulk: dict[str, int] = {}  # name -> elements between the cut-offs (not in the fine grid)
        self.pin: dict[str, list[cutoffs.Pile | None]] = {}  # name -> [low, top] piles (bound, count) (:mod:`.cutoffs`)
        self.repair: HistogramState | None = None
        self._local = threading.local()  # scratch buffers, one set per folding thread

    def _buffers(self, n: int) -> tuple[Any, Any, Any, Any]:
        buf = getattr(self._local, "buf", None)
        if buf is None or buf[0].size < n:
            buf = self._local.buf = (np.empty(n, np.float32), np.empty(n, np.intp), np.empty(n, np.bool_), np.empty(n, np.bool_))
        return tuple(b[:n] for b in buf)  # type: ignore[return-value]

    def _bins(self, src: Any, half: float) -> Any:
        """Fine-bin counts of ``src`` (``x``, or ``|x|``; all ``|.| <= half``): int64[fine]. May overwrite the scratch buffer."""
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
        return np.linspace(0.0 if self.absolute else -half, half, self.fine + 1)

    def update(self, name: str, arr: Any) -> None:
        """Fold one batch's tensor (any shape, float) into the stats and fine counts; NaNs are dropped, as ORT's
        ``np.nanmin`` and ``np.histogram`` do. Raises ValueError on an infinite value (ORT's histogram does too)."""
        a = np.asarray(arr).reshape(-1)
        if a.size == 0:
            return
        if self.half.get(name, 0.0) > 0.0 and (self.need == 0.0 or self.cut.get(name) is not None) and self._update_blocked(name, a):
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
            self.cut[name], pin = cutoffs.choose(self.counts[name], self._edges(half), src, lambda v: self._bins(v, half), self.tail,
                                                 self.need, self.batches, self.absolute, 4 * self.FINE + 2)
            if pin is not None:
                self.pin[name] = pin
            self.bulk[name] = 0
            return
        self._widen(name, t)
        half = self.half[name]
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

    def _update_blocked(self, name: str, a: Any) -> bool:
        """:meth:`fold_tails` on a whole tensor read once in blocks (:func:`.minmax.blocked_tails`); False on a NaN."""
        cut = self.cut.get(name) if self.need > 0.0 else None
        lo, hi = (None, None) if cut is None else (-cut[1] if self.absolute else cut[0], cut[1])
        got = blocked_tails(a, lo, hi, self.absolute and self.stats[name][2] > 0)
        if got is not None:
            self.fold_tails(name, got[0], got[1], a.size, got[3], got[2])
        return got is not None

    def cut_for_tails(self, name: str) -> tuple[Any, Any, bool] | None:
        """``(lo, hi, amin)`` to read ``name`` by its tails (:meth:`fold_tails`): ``x <= lo`` or ``x >= hi`` (absolute:
        ``lo`` None, ``|x| >= hi``); ``amin``: ``min|x|`` still needed. None: read it whole (no cut-offs yet)."""
        cut = self.cut.get(name)
        if self.half.get(name, 0.0) <= 0.0 or self.need == 0.0 or cut is None:
            return None
        if self.absolute:
            return None, cut[1], bool(self.stats[name][2] > 0)
        return cut[0], cut[1], False

    def fold_tails(self, name: str, mn: Any, mx: Any, size: int, rows: Any, amin: Any = None) -> None:
        """Fold one batch's tensor read by its tails (:class:`quantkit.quantize.calibration.tap.ExtremaSession`): exact ``mn`` /
        ``mx`` (0-d, data dtype), element count ``size``, ``rows`` (any shape) holding at least every element beyond
        :meth:`cut_for_tails`' cut-offs, ``amin`` (``min |x|``) where that asked for it. The state :meth:`update` gives
        on the whole tensor, bit for bit (the same elements selected: ``|x| >= c`` is ``x >= c or x <= -c``). The
        caller reads a batch that shows a NaN whole. Raises ValueError on an infinite value (as :meth:`update`)."""
        if size == 0:
            return
        (old, cut), mn, mx = (self.stats[name], self.cut.get(name)), np.asarray(mn)[()], np.asarray(mx)[()]
        t = float(max(abs(mn), abs(mx)))
        if not np.isfinite(t):
            raise ValueError(f"tensor {name!r} has an infinite value; its histogram range is not finite")
        needed = self.absolute and old[2] > 0  # once min|x| is 0 it stays 0
        am = (abs(mn) if mn >= 0 else abs(mx) if mx <= 0 else np.asarray(amin)[()].astype(mn.dtype)) if needed else old[2]
        self.stats[name] = [min(old[0], mn), max(old[1], mx), min(old[2], am)]
        if t == 0.0:  # all zeros: exact wherever bin 0 is
            self.counts[name][self.zero_bin] += size
            return
        self._widen(name, t)
        if self.need == 0.0:  # the range reads no counts (see the class docstring)
            self.bulk[name] += size
            return
        v = np.asarray(rows, np.float32).reshape(-1)
        assert cut is not None
        if self.absolute:
            v = np.absolute(v)
            sel = v[v >= cut[1]]
        else:
            sel = v[(v <= cut[0]) | (v >= cut[1])]
        self.bulk[name] += size - sel.size
        self.counts[name] += self._bins(sel, self.half[name])

    def _widen(self, name: str, t: float) -> None:
        """Widen the fine grid by 2**k until it covers ``t``: old fine bin j falls in ``zero_bin + floor((j - zero_bin) / 2**k)``."""
        half = self.half[name]
        if t <= half:
            return
        k = 1
        while half * 2**k < t:
            k += 1
        idx = self.zero_bin + np.floor_divide(np.arange(self.fine) - self.zero_bin, 2**k)
        self.counts[name] = np.bincount(idx, weights=self.counts[name], minlength=self.fine).round().astype(np.int64)
        self.half[name] = half * 2**k

    def _fine_final(self, name: str) -> Any:
        """Fine counts with the mass of the inexact bins (between the cut-offs) lumped into the first of them (a pinned
        side's pile is not among them: :meth:`histogram_dict` adds it)."""
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
                for pile in self.pin.get(name, ()):
                    if pile is not None:
                        h[cutoffs.bin_of(e, pile[0])] += pile[1]
            out[name] = (h, e, mn, mx) if self.absolute else (h, e, mn, mx, t)
        if self.repair is not None:
            out.update(self.repair.histogram_dict())
        return out

    def unresolved(self) -> list[str]:
        """Tensors whose percentile edge is not safely inside the exactly counted tails (see the class docstring)."""
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
            i_hi = min(int(np.searchsorted(cdf, 1.0 - self.need)), len(e) - 1)  # ORT's compute_percentile edges
            i_lo = min(int(np.searchsorted(cdf, self.need)), len(e) - 1)
            (mn, mx, _), pin, total = self.stats[name], self.pin.get(name, [None, None]), int(h.sum())
            top = float(max(abs(mn), abs(mx))) if self.absolute else float(mx)
            hi_ok = e[i_hi] - margin >= float(cut[1]) or (pin[1] is not None and cutoffs.holds(pin[1], e, top, i_hi, total, self.need, True))
            lo_ok = self.absolute or e[i_lo] + margin <= float(cut[0]) or (pin[0] is not None and cutoffs.holds(pin[0], e, float(mn), i_lo, total, self.need, False))
            if not (hi_ok and lo_ok):
                bad.append(name)
        return bad

    # -- the pass interface of quantkit.quantize.calibration.calibrate -----------------------------------------------------
    def pass_names(self, pass_no: int) -> list[str]:
        """Pass 1 reads every tensor; pass 2 only those being recounted exactly (``repair``)."""
        if pass_no == 1:
            return self.names
        return self.repair.names if self.repair is not None else []

    def fold(self, pass_no: int, name: str, arr: Any) -> None:
        if pass_no == 1:
            self.update(name, arr)
        elif self.repair is not None:
            self.repair.count(name, arr)

    def end_pass(self, pass_no: int) -> bool:
        """After pass 1: start an exact recount of the unresolved tensors; True when one is needed."""
        if pass_no != 1:
            return False
        bad = self.unresolved()
        if not bad:
            return False
        self.repair = HistogramState(bad, self.absolute, self.num_bins)
        for name in bad:
            mn, mx, amin = self.stats[name]
            self.repair.stats[name] = [mn, mx, amin, max(abs(mn), abs(mx))]
        return True

    def settle(self) -> None:
        """After an image: nothing to do (the pass interface of :mod:`quantkit.quantize.calibration.calibrate`)."""

    def extremes(self, name: str) -> tuple[Any, Any] | None:
        """Exact ``(min, max)`` seen for ``name`` (data dtype), or None when it was never seen."""
        s = self.stats.get(name)
        return None if s is None else (s[0], s[1])

    # -- checkpoint arrays ------------------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The whole state as plain arrays; the exact recount (if any) under ``repair.*``."""
        n = len(self.names)
        stats, dtypes = scalars_to_array([self.stats.get(k) for k in self.names], 3)
        counts = np.zeros((n, self.fine), np.int64)
        zeros = np.zeros(n, np.int64)  # while T == 0: the number of zeros seen
        cut = np.full((n, 2), np.nan, np.float32)
        for i, k in enumerate(self.names):
            c = self.counts.get(k)
            if isinstance(c, np.ndarray):
                counts[i] = c
            elif c is not None:
                zeros[i] = c
            if self.cut.get(k) is not None:
                cut[i] = self.cut[k]
        out = {"names": np.array(self.names, dtype=str), "num_bins": np.array(self.num_bins), "absolute": np.array(self.absolute), "batches": np.array(self.batches),
               "need": np.array(self.need), "stats": stats, "dtypes": dtypes, "counts": counts, "zeros": zeros,
               "gridded": np.array([isinstance(self.counts.get(k), np.ndarray) for k in self.names], bool),
               "half": np.array([self.half.get(k, 0.0) for k in self.names], np.float64),
               "cut": cut, "has_cut": np.array([self.cut.get(k) is not None for k in self.names], bool),
               "pin": np.array([[np.nan if p is None else p[0] for p in self.pin.get(k, [None, None])] for k in self.names], np.float64).reshape(n, 2),
               "pin_count": np.array([[-1 if p is None else p[1] for p in self.pin.get(k, [None, None])] for k in self.names], np.int64).reshape(n, 2),
               "bulk": np.array([self.bulk.get(k, -1) for k in self.names], np.int64)}
        if self.repair is not None:
            out.update({f"repair.{k}": v for k, v in self.repair.to_arrays().items()})
        return out

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> FineHistogramState:
        """Rebuild a state saved by :meth:`to_arrays` (bit for bit)."""
        st = cls([str(k) for k in a["names"]], int(a["num_bins"]), bool(a["absolute"]), float(a["need"]), int(a["batches"]) if "batches" in a else 1000)
        for i, (k, row) in enumerate(zip(st.names, array_to_scalars(a["stats"], a["dtypes"]))):
            if row is None and not a["zeros"][i]:
                continue  # never seen
            if row is not None:
                st.stats[k] = row
            st.counts[k] = a["counts"][i].copy() if a["gridded"][i] else int(a["zeros"][i])
            if a["half"][i] > 0.0:
                st.half[k] = float(a["half"][i])
            if a["bulk"][i] >= 0:
                st.bulk[k] = int(a["bulk"][i])
                st.cut[k] = (np.float32(a["cut"][i][0]), np.float32(a["cut"][i][1])) if a["has_cut"][i] else None
            if "pin" in a and (a["pin_count"][i] >= 0).any():
                st.pin[k] = [None if c < 0 else (float(v), int(c)) for v, c in zip(a["pin"][i], a["pin_count"][i])]
        if "repair.names" in a:
            st.repair = HistogramState.from_arrays({k[len("repair."):]: v for k, v in a.items() if k.startswith("repair.")})
        return st

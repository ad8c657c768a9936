"""Where a percentile's tensor is read after its first batch: cut-offs and piles (:class:`.fine_histogram.FineHistogramState`).

Cut-offs (:func:`choose`): later batches add to the fine grid only the elements beyond them (``x <= lo`` or
``x >= hi``; absolute ``|x| >= hi``), so only the rows holding such elements leave ONNX Runtime (:mod:`.reading`).

Piles: a tensor piled at a saturation (``Clip``'s 6, ``Relu``'s 0, hard-swish's minimum -0.375) has, on that side, every row
beyond its cut-offs, so reading it by its tails (:mod:`.reading`) would read it whole. The first batch's pile there
is instead taken out of the fine grid as ``(bound, count)``: ``bound`` the batch's K-th most extreme element
(``np.partition``), ``count`` the elements at or beyond it; the side's cut-off moves to just beyond the batch's own
extreme, so later batches read only what goes past it (nothing, at a true saturation). At the end the pile goes into
the ORT bin that holds ``bound``, and :func:`holds` checks whether the pile alone settles ORT's ``searchsorted``
there, whatever the elements not read are: then the range is that bin's edge (clipped to the exact extreme as ORT
clips it), ORT's exactly. Where it does not (later batches went past the pile), the side's edge must lie in the
exactly counted region beyond the cut-off, as for a side not pinned.

Measured on the PP-OCR detector at 640x640 (the third image; elements of the rows leaving ORT per image): ORT's
default absolute percentile 11.1 M -> 4.0 M, ``symmetric=False`` 43.2 M -> 6.8 M.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: Fine bins at the data's end whose mass may make a pile (a quarter of an ORT bin: ``FineHistogramState.FINE`` is 8) ...
BINS = 2
#: ... holding at least this share of the batch (a saturation, not the last elements of a thin tail) ...
SHARE = 0.01
#: ... and at least this many elements (small tensors cost little to read by their tails) ...
MIN_COUNT = 1000
#: ... and this many times what :func:`holds` needs after the expected number of batches.
SAFETY = 4.0

Pile = tuple[float, int]


def choose(c: Any, g: Any, src: Any, bins: Callable[[Any], Any], tail: float, need: float, batches: int, absolute: bool,
           margin: int) -> tuple[tuple[Any, Any] | None, list[Pile | None] | None]:
    """``(cut, pin)`` from the first batch's fine counts ``c`` (int64[fine], edges ``g``) of its elements ``src``
    (flat; ``|x|`` when absolute; ``bins``: the state's fine binning of an array). ``cut``: float32 cut-offs
    ``(lo, hi)`` (absolute ``(hi, hi)``) on fine edges holding at least ``tail`` of the batch's elements per side
    and lying at least ``margin`` fine bins outside the batch's own percentile edges (``need`` per side); None:
    count every element (also for a batch of fewer than ``1 / tail`` elements). ``pin``: ``[low, top]``, the piles
    taken out of ``c`` (a pinned side's cut-off lies just beyond the batch's extreme); None: no side pinned."""
    n = float(c.sum())
    if tail >= 0.5 or n * tail < 1.0:  # a tensor this small costs nothing to count whole
        return None, None
    above = np.cumsum(c[::-1])[::-1]  # above[j]: elements in bins >= j
    below = np.cumsum(c)  # below[j]: elements in bins <= j
    pin_lo, pin_hi = sides(c, need, batches, absolute)
    if pin_hi is None:
        j_hi = int(np.flatnonzero(above >= tail * n)[-1])
        if need > 0.0:
            j_hi = min(j_hi, int(np.flatnonzero(above >= need * n)[-1]) - margin)
        if j_hi <= 0:
            return None, None
    if not absolute and pin_lo is None:
        j_lo = int(np.flatnonzero(below >= tail * n)[0]) + 1
        if need > 0.0:
            j_lo = max(j_lo, int(np.flatnonzero(below >= need * n)[0]) + 1 + margin)
    if not absolute and (j_lo if pin_lo is None else pin_lo) >= (j_hi if pin_hi is None else pin_hi):
        return None, None
    pin = [None if j is None else take(src, c, bins, top, need, batches) for j, top in ((pin_lo, False), (pin_hi, True))]
    hi = beyond(src, True) if pin_hi is not None else np.float32(g[j_hi])
    lo = hi if absolute else beyond(src, False) if pin_lo is not None else np.float32(g[j_lo])
    return (lo, hi), (None if pin == [None, None] else pin)


def sides(c: Any, need: float, batches: int, absolute: bool) -> tuple[int | None, int | None]:
    """``(low, top)``: for each side of the first batch's fine counts ``c`` (int64[fine]) that holds a pile, the fine
    index where it starts (low: the first bin after it); None where it holds none (and low, always, when
    ``absolute``)."""
    n = float(c.sum())
    if need <= 0.0 or n == 0.0:
        return None, None
    enough = max(SAFETY * need * n * batches, SHARE * n, MIN_COUNT)
    nz = np.flatnonzero(c)
    top = int(nz[-1]) - BINS + 1
    low = int(nz[0]) + BINS
    return (None if absolute or low >= c.size or c[:low].sum() < enough else low,
            None if top <= 0 or c[top:].sum() < enough else top)


def take(src: Any, c: Any, bins: Callable[[Any], Any], top: bool, need: float, batches: int) -> Pile:
    """Take the pile of one side out of the first batch: its elements ``src`` (flat), their fine counts ``c`` (the
    pile's counts are subtracted in place) and ``bins`` (the state's fine binning of an array). Returns the pile."""
    k = min(int(np.ceil(SAFETY * (need * src.size * batches + 1))), src.size) - 1
    at = src.size - 1 - k if top else k
    v = np.partition(src, at)[at]
    pile = src[src >= v] if top else src[src <= v]
    c -= bins(pile)
    return float(v), int(pile.size)


def beyond(src: Any, top: bool) -> Any:
    """The cut-off of a pinned side: just beyond the batch's extreme (float32)."""
    return np.nextafter(np.max(src), np.float32(np.inf)) if top else np.nextafter(np.min(src), np.float32(-np.inf))


def bin_of(e: Any, v: float) -> int:
    """The ORT bin (edges ``e``, ``num_bins + 1`` of them) that holds the value ``v``."""
    return int(np.clip(np.searchsorted(np.asarray(e, np.float64), v, side="right") - 1, 0, len(e) - 2))


def holds(pile: Pile, e: Any, extreme: float, i: int, total: int, need: float, top: bool) -> bool:
    """Whether ``pile`` alone settles ORT's percentile edge on its side: it lies wholly in the ORT bin of the side's
    exact ``extreme`` (edges ``e``, float64; ``1e-6`` relative of slack for ORT's float64 binning edges) and holds
    more than ``need`` of all ``total`` elements, so ORT's ``searchsorted`` picks that bin whatever the elements
    not counted are, and so did this histogram's (``i``; top: the same index, so the same edge; low: that index or
    below, an edge at or below the minimum, which ORT clips to the exact minimum either way). For an absolute
    histogram ``extreme`` is ``max|x|``, in the last bin."""
    bound, count = pile
    if count < need * total * (1.0 + 1e-9) + 1.0:
        return False
    k = bin_of(e, extreme)
    if top:
        return i == k and bound >= e[k] + 1e-6 * abs(e[k])
    return i <= k and bound < e[k + 1] - 1e-6 * abs(e[k + 1])

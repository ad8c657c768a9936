"""Mergeable per-shard summaries: fixed-edge histograms and KLL quantile sketches.

A :class:`Summary` describes any group of images (a shard = one camera x one time window, a camera,
a site, the fleet). Two summaries merge by adding counts and sums and merging sketches, so the
driver never needs the rows:

* **Histograms on frozen edges** (:class:`Edges`, fixed once from the deployed calibration set's
  statistics and stored with the scores): merging is a sum, so PSI, KS and Wasserstein-1 of any
  merged group (:mod:`quantkit.metrics`) equal those computed from all its rows binned on the same
  edges. Values outside the edges are counted in the end bins and also in ``below``/``above``.
* **KLL sketches** (Apache DataSketches ``kll_doubles_sketch``; Karnin, Lang & Liberty 2016) give
  quantiles (medians for plain-words changes) and sketch-based KS/W1 with a rank error of about
  1.65% at k = 200. While a sketch holds fewer items than its capacity it is exact and its bytes are
  deterministic; in estimation mode DataSketches draws its compaction bits from a clock-seeded
  generator the Python binding cannot seed, so two runs (whatever the worker count) may differ
  within that rank error. Decisions (:mod:`quantkit.fleet.check`) use the histograms only, so they
  are the same bit for bit; the rollups stored in ``summary.json`` keep only exact sketches (the
  store merges the others from the group's members when asked), so the scores folder is the same
  bytes on every run while every shard holds at most ``kll_k`` images.

Summary JSON (``shards/<key>.json`` and the rollups in ``summary.json``): ``images, errors, scored,
clipped, sums{column: number}, hist{quantity: {i: [bin index], c: [count]}} (sparse), below{}, above{},
kll{quantity: base64 of the sketch's serialized bytes}``.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from typing import Any, Iterable, Mapping

import numpy as np

from .._io import fingerprint
from ..calibset.stats import STAT_COLUMNS
from ..extras import require
from .decisions import SUM_COLUMNS

LOG_STATISTICS = frozenset({"sharpness_lapvar", "noise_sigma"})
"""Heavy-tailed positive statistics binned on geometric edges (ratios matter, not differences)."""
BOUNDED = {"brightness_mean": (0.0, 255.0), "brightness_p5": (0.0, 255.0), "brightness_p50": (0.0, 255.0),
           "brightness_p95": (0.0, 255.0), "contrast_rms": (0.0, 0.5), "saturation_mean": (0.0, 1.0),
           "clip_dark": (0.0, 1.0), "clip_bright": (0.0, 1.0)}
"""Statistics with a physical range (see :mod:`quantkit.calibset.stats`): binned linearly over it."""
DECISION_QUANTITIES = {"agreement": np.linspace(0.0, 1.0, 51), "n_det_int8": np.arange(-0.5, 101.0, 1.0)}
"""Per-image decision quantities histogrammed on fixed edges (agreement 0..1, detection counts 0..100)."""
QUANTITIES: tuple[str, ...] = (*STAT_COLUMNS, *DECISION_QUANTITIES)
EXTRA_SUMS = ("clip_rate",)


@dataclasses.dataclass(frozen=True, repr=False)
class Edges:
    """Bin edges per quantity (``{name: (bins + 1,) float64}``, increasing), frozen from a calibration set.

    ``source`` names the calibration set (name, set id) the edges came from.
    """

    edges: Mapping[str, np.ndarray]
    source: Mapping[str, Any]

    @classmethod
    def from_calibration(cls, stats: Any, bins: int, source: Mapping[str, Any]) -> "Edges":
        """Edges from a calibration set's per-image statistics frame (``stats.csv``).

        Bounded statistics span their physical range; :data:`LOG_STATISTICS` span ``min/16 .. max*16``
        geometrically; the others ``min - 2 range .. max + 2 range`` (widened by 10% of ``|median|``,
        never below 0), all in ``bins`` bins.
        """
        out: dict[str, np.ndarray] = {}
        for name in STAT_COLUMNS:
            v = np.asarray(stats[name], np.float64)
            v = v[np.isfinite(v)]
            lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
            if name in BOUNDED:
                out[name] = np.linspace(*BOUNDED[name], bins + 1)
            elif name in LOG_STATISTICS:
                pos = v[v > 0]
                a = float(pos.min()) / 16.0 if pos.size else 1e-3
                out[name] = np.geomspace(max(a, 1e-6), max(hi, a * 2) * 16.0, bins + 1)
            else:
                pad = 2.0 * (hi - lo) + 0.1 * abs(float(np.median(v)) if v.size else 1.0) + 1e-9
                out[name] = np.linspace(max(0.0, lo - pad), hi + pad, bins + 1)
        out.update({k: v.copy() for k, v in DECISION_QUANTITIES.items()})
        return cls(out, dict(source))

    def to_dict(self) -> dict[str, Any]:
        return {"edges": {k: [float(x) for x in v] for k, v in self.edges.items()}, "source": dict(self.source)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Edges":
        return cls({k: np.asarray(v, np.float64) for k, v in d["edges"].items()}, d.get("source", {}))

    def fingerprint(self) -> str:
        return fingerprint(self.to_dict())

    def bin_counts(self, name: str, values: np.ndarray) -> tuple[np.ndarray, int, int]:
        """Counts of finite ``values`` per bin of ``name`` (end bins take what falls outside), below, above."""
        e = self.edges[name]
        v = np.asarray(values, np.float64)
        v = v[np.isfinite(v)]
        idx = np.clip(np.searchsorted(e, v, side="right") - 1, 0, e.size - 2)
        return np.bincount(idx, minlength=e.size - 1).astype(np.int64), int(np.count_nonzero(v < e[0])), int(np.count_nonzero(v > e[-1]))

    def __repr__(self) -> str:
        return f"Edges({len(self.edges)} quantities, from {self.source.get('name', '?')!r})"


def _kll(k: int) -> Any:
    return require("datasketches", "fleet", "quantkit fleet").kll_doubles_sketch(k)


def _kll_load(data: bytes) -> Any:
    return require("datasketches", "fleet", "quantkit fleet").kll_doubles_sketch.deserialize(data)


@dataclasses.dataclass(repr=False)
class Summary:
    """Mergeable summary of a group of images (see the module docstring). Mutable while built."""

    images: int = 0
    errors: int = 0
    scored: int = 0
    clipped: int = 0
    sums: dict[str, float] = dataclasses.field(default_factory=dict)
    hist: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    below: dict[str, int] = dataclasses.field(default_factory=dict)
    above: dict[str, int] = dataclasses.field(default_factory=dict)
    kll: dict[str, bytes] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Any, edges: Edges, k: int) -> "Summary":
        """Summary of a rows DataFrame (one row per image, :mod:`quantkit.fleet.scorer` columns)."""
        s = cls(images=int(len(rows)), errors=int(rows["error"].notna().sum()), scored=int(rows["scored"].sum()),
                clipped=int(rows["clip_rate"].notna().sum()))
        scored = rows[rows["scored"]]
        for col in SUM_COLUMNS:
            s.sums[col] = float(scored[col].astype("Float64").fillna(0).astype(np.float64).sum())
        s.sums["clip_rate"] = float(rows["clip_rate"].dropna().astype(np.float64).sum())
        for name in QUANTITIES:
            src = scored if name in DECISION_QUANTITIES else rows
            v = src[name].to_numpy(dtype=np.float64, na_value=np.nan)
            s.hist[name], s.below[name], s.above[name] = edges.bin_counts(name, v)
            sk = _kll(k)
            finite = v[np.isfinite(v)]
            if finite.size:
                sk.update(finite)
            s.kll[name] = bytes(sk.serialize())
        return s

    def merge(self, other: "Summary") -> "Summary":
        """A new summary of both groups (counts and sums added, sketches merged)."""
        out = Summary(self.images + other.images, self.errors + other.errors, self.scored + other.scored, self.clipped + other.clipped)
        for key in sorted(set(self.sums) | set(other.sums)):
            out.sums[key] = self.sums.get(key, 0) + other.sums.get(key, 0)
        for name in sorted(set(self.hist) | set(other.hist)):
            if name in self.hist and name in other.hist:
                out.hist[name] = self.hist[name] + other.hist[name]
            else:
                out.hist[name] = (self.hist.get(name) if name in self.hist else other.hist[name]).copy()
            out.below[name] = self.below.get(name, 0) + other.below.get(name, 0)
            out.above[name] = self.above.get(name, 0) + other.above.get(name, 0)
        for name in sorted(set(self.kll) | set(other.kll)):
            if name in self.kll and name in other.kll:
                sk = _kll_load(self.kll[name])
                sk.merge(_kll_load(other.kll[name]))
                out.kll[name] = bytes(sk.serialize())
            else:
                out.kll[name] = self.kll.get(name) or other.kll[name]
        return out

    def sketch(self, name: str) -> Any:
        """The KLL sketch of ``name`` (DataSketches ``kll_doubles_sketch``)."""
        return _kll_load(self.kll[name])

    def quantile(self, name: str, q: float) -> float:
        """Quantile ``q`` of ``name`` from its sketch (NaN when empty)."""
        sk = self.sketch(name)
        return math.nan if sk.is_empty() else float(sk.get_quantile(q))

    def to_dict(self, *, exact_sketches: bool = False) -> dict[str, Any]:
        """JSON form; with ``exact_sketches`` a sketch in estimation mode is left out (its bytes differ between runs:
        see the module docstring), so a stored rollup is the same bytes on every run; :class:`~.store.ScoreStore`
        merges it again from the group's members when asked."""
        def sparse(c: np.ndarray) -> dict[str, list[int]]:
            nz = np.flatnonzero(c)
            return {"i": nz.tolist(), "c": c[nz].tolist()}

        return {"images": self.images, "errors": self.errors, "scored": self.scored, "clipped": self.clipped,
                "sums": {k: self.sums[k] for k in sorted(self.sums)},
                "hist": {k: sparse(v) for k, v in sorted(self.hist.items())},
                "below": dict(sorted(self.below.items())), "above": dict(sorted(self.above.items())),
                "kll": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(self.kll.items())
                        if not (exact_sketches and _kll_load(v).is_estimation_mode())}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], edges: Edges) -> "Summary":
        """Inverse of :meth:`to_dict` (dense histograms need the edges' bin counts)."""
        hist = {}
        for k, v in d["hist"].items():
            c = np.zeros(edges.edges[k].size - 1, np.int64)
            c[np.asarray(v["i"], np.int64)] = np.asarray(v["c"], np.int64)
            hist[k] = c
        return cls(int(d["images"]), int(d["errors"]), int(d["scored"]), int(d["clipped"]), dict(d["sums"]), hist,
                   {k: int(v) for k, v in d["below"].items()}, {k: int(v) for k, v in d["above"].items()},
                   {k: base64.b64decode(v) for k, v in d["kll"].items()})

    def __repr__(self) -> str:
        return f"Summary({self.images} images, {self.scored} scored, {self.errors} errors)"


def merge_all(summaries: Iterable[Summary]) -> Summary:
    """Merge summaries in the order given (callers pass them sorted, so the result does not depend on
    which worker finished first)."""
    out = Summary()
    for s in summaries:
        out = out.merge(s)
    return out

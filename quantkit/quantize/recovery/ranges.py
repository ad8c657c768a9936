"""Per-tensor choice of the calibration range: for each quantized activation, the candidate range with the
smallest quantization error relative to the signal, averaged over images.

Candidates per tensor: ``minmax`` (min and max over the sample) and ``p<q>`` (the two-sided ``q``-th percentile:
``[quantile((100 - q) / 100), quantile(q / 100)]``), each widened to include 0 as ORT's ranges are. The error of a
range ``[a, b]`` on one image is the squared error of uniform quantization to the activation type's grid over a
histogram of the tensor's values in that image (:data:`BINS` bins between the sample's min and max, each value at
its bin centre), divided by the image's signal power (sum of squares): a noise-to-signal ratio, the inverse of
the SQNR. The criterion is its mean over images, so a dark (night) image whose activations are small weighs as
much as a bright one; plain MSE over all values (as in MSE-based range calibration, e.g. Banner et al. 2019, "Post
training 4-bit quantization of convolutional networks for rapid-deployment", sec. 3) lets the bright images'
large values decide, and at 8 bits almost always picks ``minmax``. Two passes over the images: the exact min and
max, then the histograms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...artifacts.record import CalibrationRecord
from ...dtypes import INT_TYPES
from ..config import StaticQuantConfig
from .activations import iter_activations

#: Histogram bins per tensor.
BINS = 2048


def _grid_error(centres: np.ndarray, counts: np.ndarray, lo: float, hi: float, qmin: int, qmax: int) -> float:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi <= lo:
        return float(np.sum(counts * centres**2))
    scale = (hi - lo) / (qmax - qmin)
    zp = np.round(qmin - lo / scale)
    q = np.clip(np.round(centres / scale + zp), qmin, qmax)
    return float(np.sum(counts * (centres - (q - zp) * scale) ** 2))


def _candidate(name: str, centres: np.ndarray, cdf: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    if name == "minmax":
        return min(lo, 0.0), max(hi, 0.0)
    q = float(name[1:]) / 100.0
    a = float(centres[min(np.searchsorted(cdf, 1.0 - q), len(centres) - 1)])
    b = float(centres[min(np.searchsorted(cdf, q), len(centres) - 1)])
    return min(a, 0.0), max(b, 0.0)


def search_ranges(model: Any, record: CalibrationRecord, config: StaticQuantConfig, images: Sequence[np.ndarray], input_name: str,
                  candidates: Sequence[str]) -> tuple[dict[str, tuple[float, float]], dict[str, int]]:
    """The chosen range of every activation the record quantizes with an 8-bit type.

    Returns:
        ``({tensor: (lo, hi)}, {candidate: tensors that chose it})``.
    """
    produced = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    acts = sorted(t.name for t in record.tensors if t.role == "activation" and t.name in produced and INT_TYPES[t.dtype].bits == 8)
    if not acts or not images:
        return {}, {}
    it = INT_TYPES[config.activation_type]
    lo = {t: np.inf for t in acts}
    hi = {t: -np.inf for t in acts}
    for out in iter_activations(model, acts, images, input_name):
        for t in acts:
            lo[t], hi[t] = min(lo[t], float(out[t].min())), max(hi[t], float(out[t].max()))
    hist: dict[str, list[np.ndarray]] = {t: [] for t in acts}
    for out in iter_activations(model, acts, images, input_name):
        for t in acts:
            if hi[t] > lo[t]:
                hist[t].append(np.histogram(out[t], bins=BINS, range=(lo[t], hi[t]))[0].astype(np.float64))
    chosen: dict[str, tuple[float, float]] = {}
    counts = {c: 0 for c in candidates}
    for t in acts:
        if not hi[t] > lo[t]:
            continue
        edges = np.linspace(lo[t], hi[t], BINS + 1)
        centres = (edges[:-1] + edges[1:]) / 2
        total = np.sum(hist[t], axis=0)
        cdf = np.cumsum(total) / total.sum()
        power = [max(float(np.sum(h * centres**2)), np.finfo(np.float64).tiny) for h in hist[t]]
        ranges = {c: _candidate(c, centres, cdf, lo[t], hi[t]) for c in candidates}
        err = {c: float(np.mean([_grid_error(centres, h, *ranges[c], it.qmin, it.qmax) / p for h, p in zip(hist[t], power)])) for c in candidates}
        best = min(candidates, key=lambda c: (err[c], c))
        chosen[t] = ranges[best]
        counts[best] += 1
    return chosen, counts


__all__ = ["BINS", "search_ranges"]

"""The held-out split: which reference images the search may look at, and the figure measured on the others.

A figure measured on the images a search chose its answer on is optimistic: the search stops at the first
candidate that happens to clear the target on those very images (a fallback reported 0.941 on its own images
and 0.800 on others). So each reference set is split once, before the search, and the written model's figure
is measured on the part the search never ran on.

The split (:func:`split_indices`): of a set's ``N`` images (after ``max_reference_images``), ``round(holdout x N)``
(halves up; at least 1 and at most ``N - 1``) are held out: those whose ``sha256("<seed>:<image sha256>")``
ranks lowest (ties: manifest order). It depends only on the images' content and the seed, so the same set gives
the same split on every machine and run, and renaming or reordering images does not move it.

The figure (:func:`measure_sets`): the model runs once over each set's held-out images; the metric pooled over them is
the set's figure, with a confidence interval from the metric's per-image counts (``counts``, :mod:`.metric`)
by :func:`quantkit.thresholds.stats.bootstrap_ratio` (Clopper-Pearson for proportions of images, else a BCa
bootstrap over images; Efron & Tibshirani 1993). With few held-out images the interval is wide, and it is
written beside the figure with the image count so that a reader sees how little a handful of images proves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.fallback import SetFigure
from ...errors import ConfigError
from ...runner import OrtRunner
from ...thresholds.stats import bootstrap_ratio
from .candidates import ReferenceData
from .metric import Metric


def split_indices(shas: Sequence[str], holdout: float, seed: int, where: str) -> tuple[list[int], list[int]]:
    """``(search, heldout)`` image indices of one set (each in manifest order); see the module docstring.

    Args:
        shas: the images' SHA-256 (hex), in manifest order.
        holdout: share held out, in [0, 1); 0: every image is searched on, none held out.
        seed: the split's seed (>= 0).
        where: the set's name, for the error.

    Raises:
        ConfigError: ``holdout`` > 0 and the set has fewer than 2 images (nothing could be held out and searched on).
    """
    n = len(shas)
    if holdout <= 0:
        return list(range(n)), []
    if n < 2:
        raise ConfigError(f"reference set {where}: {n} image{'s' if n != 1 else ''}; fallback.holdout needs at least 2 per set "
                          "(one to search on, one held out): add images, or set fallback.holdout: 0 (in-sample figure)")
    h = min(n - 1, max(1, int(holdout * n + 0.5)))
    rank = sorted(range(n), key=lambda i: (hashlib.sha256(f"{seed}:{shas[i]}".encode()).hexdigest(), i))
    held = set(rank[:h])
    return [i for i in range(n) if i not in held], sorted(held)


def split_references(refs: ReferenceData, holdout: float, seed: int) -> tuple[ReferenceData, ReferenceData]:
    """``(search part, held-out part)`` of every set of ``refs`` (:func:`split_indices`); the held-out part has no
    image when ``holdout`` is 0."""
    parts = [split_indices(shas, holdout, seed, s.name) for s, shas in zip(refs.sets, refs.shas)]
    return refs.subset([p[0] for p in parts]), refs.subset([p[1] for p in parts])


def measure_sets(model: Path | bytes, refs: ReferenceData, metric: Metric, *, confidence: float, resamples: int,
                 seed: int, runner: Callable[[Path | bytes], Any] | None = None) -> dict[str, tuple[float, tuple[float, float] | None]]:
    """Set name -> ``(metric, interval or None)`` of ``model`` over every image of ``refs`` (no early stop).

    ``runner`` makes the runner that runs ``model`` (default: ONNX Runtime at level ``all``; e.g. another runtime's
    deployment runner, :data:`quantkit.runtimes.latency.RUNTIMES`); ``refs.fp32`` stay the reference either way.

    The interval is ``bootstrap_ratio`` over the metric's per-image counts; None when the metric has no
    ``counts``. Raises ConfigError when those counts do not pool to the metric's own value (a custom metric whose
    ``counts`` and value disagree would give an interval around another number).
    """
    counts_of = getattr(metric, "counts", None)
    out: dict[str, tuple[float, tuple[float, float] | None]] = {}
    made = runner(model) if runner is not None else OrtRunner(model, graph_optimization_level="all", name="held-out")
    with made as r:
        for s, ref, feeds in zip(refs.sets, refs.fp32, refs.feeds):
            got = [r.infer({refs.input_name: x}) for x in feeds]
            value = float(metric(ref, got))
            if not np.isfinite(value):
                raise ConfigError(f"fallback metric returned {value}; make it finite for every output (e.g. guard divisions by zero)")
            ci = None
            if counts_of is not None:
                c = counts_of(ref, got)
                if abs(c.value - value) > 1e-6 * max(1.0, abs(value)):
                    raise ConfigError(f"fallback metric {getattr(metric, 'description', 'custom')}: its counts pool to {c.value}, its value is "
                                      f"{value}; make counts() return the per-image terms of the value")
                est = bootstrap_ratio(c.num, c.den, resamples=resamples, seed=seed, confidence=confidence, empty=c.empty, factor=c.factor)
                ci = (min(est.ci[0], value), max(est.ci[1], value))
            out[s.name] = (value, ci)
    return out


def figures(search: ReferenceData, heldout: ReferenceData, search_per_set: dict[str, float],
            measured: dict[str, tuple[float, tuple[float, float] | None]]) -> tuple[SetFigure, ...]:
    """One :class:`SetFigure` per set: the split's sizes and held-out files, the search's figure and the measured one
    (``measured`` holds the held-out figures, or, without a split, the in-sample ones: then ``heldout`` is None)."""
    out = []
    for s, files, held in zip(search.sets, search.files, heldout.files):
        value, ci = measured[s.name]
        split = bool(held)
        out.append(SetFigure(name=s.name, search_images=len(files), heldout_images=len(held),
                             search=round(float(search_per_set.get(s.name, value)), 6), heldout=round(value, 6) if split else None,
                             ci=(round(ci[0], 6), round(ci[1], 6)) if ci is not None else None, heldout_files=tuple(held)))
    return tuple(out)


__all__ = ["figures", "measure_sets", "split_indices", "split_references"]

"""Which candidate the fallback writes.

* :func:`pick`: of the candidates that met the target on the search images (:mod:`.search`: the prefix, suffix and
  island windows, and the pruned window), the cheapest: ``cost`` (FallbackConfig ``pick``): fewest
  ``promoted nodes + transition_cost x Q/DQ edges`` (then fewest nodes, then search order); ``latency``: the
  lowest median latency, the :data:`LATENCY_CANDIDATES` cheapest by cost timed interleaved with FP32 in one run
  (:func:`quantkit.runtimes.latency.measure_latency`, ``fallback.latency``), each candidate's median over FP32's
  averaged over runtimes and thread counts (machine-dependent: it needs ``timings``, so a pipeline that keeps
  ``fallback.json`` byte-identical picks by cost).
* :func:`final_candidate`: the picked candidate, measured, with its full score on the search images; when no
  candidate met the target, the fully measured round with the highest metric.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...runtimes.latency import measure_latency
from .candidates import Measured, Prober, Score, Scorer
from .config import FallbackConfig

log = logging.getLogger(__name__)

LATENCY_CANDIDATES = 6
"""Candidates timed against each other with ``pick: latency`` (the cheapest by cost; each adds one model to every
interleaved repeat)."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A candidate that met the target on the search images: the promoted units (graph order), why each stays, and
    the window it came from (``[j, k)`` in graph order, with its ``family``; None for the sqnr search and round 0)."""

    kept: list[str]
    why: dict[str, str]
    window: tuple[int, int] | None
    family: str = ""

    @property
    def info(self) -> dict[str, Any]:
        """What the probe logs and records with the candidate's round."""
        return {"window": list(self.window), "family": self.family} if self.window else {}


def pick(cands: Sequence[Candidate], probe: Prober, config: FallbackConfig, fp32_model: Path, feeds: Sequence[Any], *,
         transitions_of: Callable[[Sequence[str]], int]) -> Candidate | None:
    """The candidate to write (module docstring); None when ``cands`` is empty.

    Args:
        probe: builds a candidate not measured yet (the all-float window, known to meet) and records each timed
            candidate's ``latency_vs_fp32`` on its round.
        fp32_model: the float model timed beside the candidates.
        feeds: model inputs the timing cycles over.
        transitions_of: Q/DQ edges of a promoted set (:func:`.graph.transitions`).
    """
    unique: dict[tuple[str, ...], Candidate] = {}
    for c in cands:
        unique.setdefault(tuple(c.kept), c)
    order = sorted(unique.values(), key=lambda c: (len(c.kept) + config.transition_cost * transitions_of(c.kept), len(c.kept)))
    if not order or config.pick == "cost" or len(order) == 1:
        return order[0] if order else None
    weigh = order[:LATENCY_CANDIDATES]
    models: dict[str, Any] = {"fp32": fp32_model}
    for i, c in enumerate(weigh):
        probe(c.kept, c.info)  # measured already, except the all-float window
        models[f"candidate{i}"] = probe.seen[tuple(c.kept)].folder / "model_int8.onnx"
    timings = measure_latency(models, feeds, config.latency)
    fp32 = {(t.runtime, t.threads): t.median_ms for t in timings if t.model == "fp32"}
    ratio: dict[int, list[float]] = {}
    for t in timings:
        if t.model != "fp32":
            ratio.setdefault(int(t.model.removeprefix("candidate")), []).append(t.median_ms / fp32[(t.runtime, t.threads)])
    mean = {i: sum(r) / len(r) for i, r in ratio.items()}
    for i, c in enumerate(weigh):
        probe.annotate(c.kept, latency_vs_fp32=round(mean[i], 4))
    best = min(range(len(weigh)), key=lambda i: (mean[i], i))
    log.info("fallback: %d candidates timed; the fastest runs at %.2f x FP32's latency", len(weigh), mean[best])
    return weigh[best]


def final_candidate(probe: Prober, scorer: Scorer, choice: Candidate | None) -> tuple[Measured, Score, Candidate]:
    """The candidate to write, its full score on the search images and the candidate itself (with its reasons);
    when nothing met the target, the round with the highest metric among fully measured ones (fewest promoted on ties)."""
    if choice is None:
        done = {k: v for k, v in probe.seen.items() if v.round.complete} or probe.seen
        key = max(done, key=lambda k: (done[k].round.metric, -len(k)))
        r = done[key].round
        choice = Candidate(list(key), {n: "the target was not met on the search images; this candidate had the highest metric" for n in key},
                           r.window, r.family)
    probe(choice.kept, choice.info)  # measured already, except the all-float window
    final = probe.seen[tuple(choice.kept)]
    r = final.round
    if r.complete:
        return final, Score(r.metric, r.worst_set, dict(r.per_set), True, r.images), choice
    return final, scorer.score(final.folder / "model_int8.onnx", full=True), choice


__all__ = ["Candidate", "LATENCY_CANDIDATES", "final_candidate", "pick"]

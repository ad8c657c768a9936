"""Search strategies: which nodes to promote (keep in float, or widen to 16 bits). Plain functions.

Each takes a *probe*, ``probe(kept, info) -> Round`` (:class:`.result.Round`: measures the candidate with
``kept`` promoted; ``info`` is logged with it), and returns what to keep. The probe decides what "meets
the target" means; the strategies only order the candidates.

* :func:`bisect_window`: Polygraphy's ``debug precision`` bisection (NVIDIA TensorRT tools) over the nodes
  in graph order: the shortest prefix ``nodes[:k]`` that meets the target (binary search on ``k``), then the
  latest start ``j`` such that ``nodes[j:k]`` still does (skipped when pruning follows). At most ``2 log2(n)`` rounds. It assumes promoting
  more of the graph does not lower the metric (not exactly true; every answer is a measured candidate).
* :func:`prune_window`: hand blocks of the window back to 8 bits while the target holds, when that lowers
  the cost (promoted nodes + ``transition_cost`` x Q/DQ edges, :func:`.graph.transitions`): one round per
  block; a failed round is the recorded reason its block stays promoted.
* :func:`sqnr_search`: promote activations in order of local sensitivity (:func:`rank_sensitivity`), ``step``
  per round, until the target is met.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...artifacts.fallback import Round

Probe = Callable[[Sequence[str], Mapping[str, Any]], Round]
Cost = Callable[[Sequence[str]], float]


def bisect_window(names: Sequence[str], probe: Probe, *, limit: int, full_meets: bool, find_start: bool = True) -> tuple[int, int] | None:
    """The window ``(j, k)`` of :func:`bisect_window`'s module description, or None when even
    ``names[:limit]`` misses the target.

    Args:
        names: node names in graph order.
        limit: longest prefix considered (``max_kept``).
        full_meets: the caller knows ``names[:limit]`` meets the target (every node in float is the FP32
            model itself); otherwise that round is measured first.
        find_start: also bisect for the latest start ``j`` (else ``j = 0``: when :func:`prune_window` follows,
            its first blocks test the same starts, one round each, and a second bisection mostly repeats them).
    """
    if limit < 1:
        return None
    if not full_meets and not probe(names[:limit], {"window": [0, limit]}).met:
        return None
    lo, hi = 0, limit  # names[:lo] misses (lo = 0: the base model), names[:hi] meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(names[:mid], {"window": [0, mid]}).met:
            hi = mid
        else:
            lo = mid
    k = hi
    if not find_start:
        return 0, k
    lo, hi = 0, k  # names[lo:k] meets, names[hi:k] (empty at hi = k) misses
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(names[mid:k], {"window": [mid, k]}).met:
            lo = mid
        else:
            hi = mid
    return lo, k


def bisect_rounds(limit: int, prune: int) -> int:
    """Most rounds :func:`bisect_window` + :func:`prune_window` take (for progress bars)."""
    return 2 * max(1, math.ceil(math.log2(max(limit, 2)))) + 1 + prune


def prune_window(names: Sequence[str], window: tuple[int, int], probe: Probe, *, blocks: int,
                 cost: Cost) -> tuple[list[str], dict[str, str]]:
    """Split ``names[j:k]`` into ``blocks`` blocks and return each to 8 bits when the candidate without it
    meets the target and costs less.

    Returns:
        ``(kept, why)``: the nodes still promoted, in graph order, and for each of them why it stays:
        the measured round that failed without its block, or the cost rule, or the window itself.
    """
    j, k = window
    kept = list(names[j:k])
    why = {n: f"in the bisection window nodes {j}..{k - 1}: the shortest span that meets the target" for n in kept}
    if not blocks or not kept:
        return kept, why
    size = max(1, -(-len(kept) // blocks))
    for b0 in range(j, k, size):
        b1 = min(b0 + size, k)
        block = set(names[b0:b1])
        trial = [n for n in kept if n not in block]
        if not trial or len(trial) == len(kept):
            continue
        if cost(trial) >= cost(kept):
            for n in block & set(kept):
                why[n] = f"returning nodes {b0}..{b1 - 1} to 8 bits would add more Q/DQ conversions than it removes float nodes"
            continue
        r = probe(trial, {"window": [j, k], "pruned": [b0, b1]})
        if r.met:
            kept = trial
        else:
            for n in block & set(kept):
                why[n] = f"without nodes {b0}..{b1 - 1} in float the worst reference set ({r.worst_set}) reaches {r.metric:.4f}, below the target"
    return kept, {n: why[n] for n in kept}


def rank_sensitivity(model: Any, table: Any) -> list[str]:
    """Activation names ordered by local SQNR loss (most sensitive first); ``table`` from
    :func:`quantkit.quantize.compare.compare_layers` (columns ``tensor``, ``sqnr_db``).

    The loss of a tensor is the lowest SQNR (dB) among its producer's inputs minus its own. SQNR is +inf
    where a tensor is reproduced exactly and may be NaN for an all-zero tensor; non-finite values are
    clipped to [-200, 200] dB first (far beyond any real 8/16-bit SQNR), so an exact tensor ranks last.
    """
    sq = {t: float(np.nan_to_num(s, nan=200.0, posinf=200.0, neginf=-200.0)) for t, s in zip(table["tensor"], table["sqnr_db"])}
    producer_inputs = {o: list(n.input) for n in model.graph.node for o in n.output}
    loss = {}
    for t, s in sq.items():
        ins = [sq[i] for i in producer_inputs.get(t, []) if i in sq]
        loss[t] = (min(ins) if ins else 100.0) - s
    return sorted(loss, key=lambda t: (-loss[t], t))


def sqnr_search(order: Sequence[str], probe: Probe, *, step: int, limit: int) -> list[str] | None:
    """Promote ``order[:step]``, ``order[:2 step]``, ... (at most ``limit``) until a round meets the target;
    None when none does."""
    for i in range(0, min(limit, len(order)), step):
        kept = list(order[: min(i + step, limit)])
        if probe(kept, {}).met:
            return kept
    return None


__all__ = ["Cost", "Probe", "bisect_rounds", "bisect_window", "prune_window", "rank_sensitivity", "sqnr_search"]

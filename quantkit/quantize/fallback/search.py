"""Search strategies: which nodes to promote (keep in float, or widen to 16 bits). Plain functions.

Each takes a *probe*, ``probe(kept, info) -> Round`` (:class:`quantkit.artifacts.fallback.Round`: measures the candidate with
``kept`` promoted; ``info`` (``window``, ``family``, ``pruned``) is recorded with it), and returns what to keep. The probe decides what "meets
the target" means; the strategies only order the candidates.

* :func:`window_search`: Polygraphy's ``debug precision`` bisection (NVIDIA TensorRT tools), in both of its
  directions (``--direction forward`` / ``reverse``), over the nodes in graph order (a topological order): the
  shortest prefix ``nodes[:k]`` that meets the target (:func:`bisect_window`) and the shortest suffix
  ``nodes[j:]`` (:func:`bisect_suffix`: the head, up to the outputs), then the island ``nodes[j:k]`` between
  them when they overlap (one round: if one contiguous run of nodes is what breaks under 8 bits, the prefix ends
  where it ends and the suffix starts where it starts, so that island is the shortest window of all). Without
  pruning, a window whose island missed is narrowed from its free end instead. About ``2 log2(n) + 1`` rounds.
  Bisection assumes promoting more of the graph does not lower the metric (not exactly true; every answer is a
  measured candidate). Every candidate is one contiguous run of nodes: one float island, not scattered nodes.
  Each bisection stops within :data:`RESOLUTION` of its window's length.
* :func:`prune_window`: hand blocks of the window back to 8 bits while the target holds, when that lowers
  the cost (promoted nodes + ``transition_cost`` x Q/DQ edges, :func:`.graph.transitions`): one round per
  block; a failed round is the recorded reason its block stays promoted. A block is never returned when that
  would leave a lone float node between 8-bit ones (its DequantizeLinear and QuantizeLinear would cost more
  than its float run saves).
* :func:`sqnr_search`: promote activations in order of local sensitivity (:func:`rank_sensitivity`), ``step``
  per round, until the target is met.
* :func:`sensitivity_search`: rank units of the graph (:func:`compute_units`: each Conv/Gemm/MatMul with the nodes that
  follow it up to the next one, merged into at most :data:`MAX_UNITS` contiguous blocks) by the agreement lost when it
  alone is quantized (every other node in float), measured on a few search images (one round per unit: issue 37's "the
  agreement lost when only that node is quantized"); ties go to the later unit (the head and the post-processing before the stem); then bisect
  the number of top-ranked units promoted, on every search image, for the fewest that meet the target (about
  ``log2(units)`` rounds). Unlike a window, the promoted units need not be contiguous: error that enters at the
  depthwise convolutions spread through a backbone is promoted where it enters, not as one prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...artifacts.fallback import Round

Probe = Callable[[Sequence[str], Mapping[str, Any]], Round]
Cost = Callable[[Sequence[str]], float]


Window = tuple[int, int]
"""``[start, end)`` in graph order."""

RESOLUTION = 16
"""A bisection stops once its bracket is within ``1/RESOLUTION`` of the window it has found (and 1 node): a window
of 200 nodes is then found to within 12 nodes in about 5 rounds instead of 8 (a few more float nodes for fewer
candidates built); windows shorter than 32 nodes are still found to the node."""


def _smallest(meets: Callable[[int], bool], hi: int) -> int:
    """The smallest ``x`` in ``1..hi`` with ``meets(x)``, by bisection, given ``meets(hi)`` (``meets(0)`` is taken as
    false), to within ``max(1, x // RESOLUTION)``."""
    lo = 0
    while hi - lo > max(1, hi // RESOLUTION):
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _probe_window(names: Sequence[str], probe: Probe, j: int, k: int, family: str) -> bool:
    return probe(names[j:k], {"window": [j, k], "family": family}).met


def bisect_window(names: Sequence[str], probe: Probe, *, limit: int, full_meets: bool, find_start: bool = True) -> Window | None:
    """The shortest prefix ``(0, k)`` that meets the target, then (``find_start``) the latest start ``j`` such that
    ``names[j:k]`` still does; None when even ``names[:limit]`` misses.

    Args:
        names: node names in graph order.
        limit: longest prefix considered (``max_kept``).
        full_meets: the caller knows ``names[:limit]`` meets the target (every node in float is the FP32
            model itself); otherwise that round is measured first.
        find_start: also bisect for the latest start (else ``j = 0``).
    """
    if limit < 1:
        return None
    if not full_meets and not _probe_window(names, probe, 0, limit, "prefix"):
        return None
    k = _smallest(lambda x: _probe_window(names, probe, 0, x, "prefix"), limit)
    if not find_start:
        return 0, k
    return k - _smallest(lambda x: _probe_window(names, probe, k - x, k, "island"), k), k


def bisect_suffix(names: Sequence[str], probe: Probe, *, limit: int, full_meets: bool, find_end: bool = True) -> Window | None:
    """The shortest suffix ``(j, n)`` (the head, up to the outputs) that meets the target, then (``find_end``) the
    earliest end ``k`` such that ``names[j:k]`` still does; None when even ``names[n - limit:]`` misses. Arguments
    as :func:`bisect_window`'s."""
    n = len(names)
    if limit < 1:
        return None
    if not full_meets and not _probe_window(names, probe, n - limit, n, "suffix"):
        return None
    j = n - _smallest(lambda x: _probe_window(names, probe, n - x, n, "suffix"), limit)
    if not find_end:
        return j, n
    return j, j + _smallest(lambda x: _probe_window(names, probe, j, j + x, "island"), n - j)


def window_family(window: Window, n: int) -> str:
    """``prefix`` (starts at node 0), ``suffix`` (ends at the last node; the whole graph counts as a prefix) or ``island``."""
    return "prefix" if window[0] == 0 else "suffix" if window[1] == n else "island"


def window_search(names: Sequence[str], probe: Probe, *, limit: int, full_meets: bool, narrow: bool, cost: Cost) -> list[Window]:
    """The windows that met the target (module docstring), cheapest first by ``cost`` of their nodes (then shorter,
    then earlier); empty when neither ``names[:limit]`` nor ``names[-limit:]`` meets.

    Args:
        narrow: when the island between the shortest prefix and suffix is not available or misses, bisect the
            cheaper of the two from its free end (``log2`` of its length more rounds); otherwise the caller prunes.
    """
    n = len(names)
    found = [w for w in (bisect_window(names, probe, limit=limit, full_meets=full_meets, find_start=False),
                         bisect_suffix(names, probe, limit=limit, full_meets=full_meets, find_end=False)) if w is not None]
    if len(found) == 2 and found[1][0] < found[0][1]:
        island = (found[1][0], found[0][1])
        if island not in found and _probe_window(names, probe, *island, "island"):
            found.append(island)
    if narrow and found and not any(0 < j and k < n for j, k in found):
        j, k = min(found, key=lambda w: (cost(names[w[0]:w[1]]), w[1] - w[0], w))
        if j == 0 and k > 1:
            found.append((k - _smallest(lambda x: _probe_window(names, probe, k - x, k, window_family((k - x, k), n)), k), k))
        elif j > 0 and k - j > 1:
            found.append((j, j + _smallest(lambda x: _probe_window(names, probe, j, j + x, window_family((j, j + x), n)), k - j)))
    return sorted(set(found), key=lambda w: (cost(names[w[0]:w[1]]), w[1] - w[0], w))


def window_rounds(limit: int, prune: int) -> int:
    """Most rounds :func:`window_search` + :func:`prune_window` take (for progress bars)."""
    return 3 * max(1, math.ceil(math.log2(max(limit, 2)))) + 2 + prune


def _lone_node(names: Sequence[str], kept: set[str]) -> bool:
    """Some promoted node has 8-bit neighbours on both sides in graph order (a lone float node)."""
    flags = [n in kept for n in names]
    return any(f and not (i > 0 and flags[i - 1]) and not (i + 1 < len(flags) and flags[i + 1]) and 0 < i < len(flags) - 1
               for i, f in enumerate(flags))


def prune_window(names: Sequence[str], window: Window, probe: Probe, *, blocks: int,
                 cost: Cost) -> tuple[list[str], dict[str, str]]:
    """Split ``names[j:k]`` into ``blocks`` blocks and return each to 8 bits when the candidate without it
    meets the target, costs less and leaves no lone float node (module docstring).

    Returns:
        ``(kept, why)``: the nodes still promoted, in graph order, and for each of them why it stays:
        the measured round that failed without its block, or the cost rule, or the window itself.
    """
    j, k = window
    family = window_family(window, len(names))
    kept = list(names[j:k])
    why = {n: f"in the {family} window nodes {j}..{k - 1}: the shortest {family} that meets the target on the search images"
           for n in kept}
    if not blocks or not kept:
        return kept, why
    lone_before = _lone_node(names, set(kept))
    size = max(1, -(-len(kept) // blocks))
    for b0 in range(j, k, size):
        b1 = min(b0 + size, k)
        block = set(names[b0:b1])
        trial = [n for n in kept if n not in block]
        if not trial or len(trial) == len(kept):
            continue
        if cost(trial) >= cost(kept) or (not lone_before and _lone_node(names, set(trial))):
            for n in block & set(kept):
                why[n] = (f"returning nodes {b0}..{b1 - 1} to 8 bits would add more Q/DQ conversions than it removes float nodes"
                          if cost(trial) >= cost(kept) else f"returning nodes {b0}..{b1 - 1} to 8 bits would leave a lone float node")
            continue
        r = probe(trial, {"window": [j, k], "pruned": [b0, b1], "family": family})
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


MAX_UNITS = 32
"""Most units :func:`sensitivity_search` measures one by one (one round each): finer units are merged into this many
contiguous blocks of about equal node counts."""


def compute_units(model: Any, names: Sequence[str], most: int = MAX_UNITS) -> list[list[str]]:
    """``names`` (graph order) cut before each compute op (``Conv``, ``ConvTranspose``, ``Gemm``, ``MatMul``): each unit is
    one compute op and what follows it up to the next (nodes before the first join the first unit); then merged into at
    most ``most`` contiguous blocks of about equal node counts."""
    from ..placement import COMPUTE_OPS

    op = {n.name: n.op_type for n in model.graph.node}
    units: list[list[str]] = []
    for n in names:
        if not units or (op.get(n) in COMPUTE_OPS and any(op.get(x) in COMPUTE_OPS for x in units[-1])):
            units.append([n])
        else:
            units[-1].append(n)
    if len(units) <= most:
        return units
    per = len(names) / most
    merged: list[list[str]] = [[]]
    done = 0
    for u in units:
        if merged[-1] and done + len(u) / 2 > per * len(merged):
            merged.append([])
        merged[-1].extend(u)
        done += len(u)
    return merged


def sensitivity_search(units: Sequence[Sequence[str]], gain_probe: Probe, probe: Probe) -> tuple[list[str], dict[str, str]] | None:
    """The fewest top-ranked units whose promotion meets the target (module docstring); None when even every unit
    promoted misses.

    Args:
        units: node groups in graph order (:func:`compute_units`).
        gain_probe: scores a candidate to the end on a few search images (``1 - metric`` with only a unit quantized ranks it).
        probe: scores a candidate on every search image (its ``met`` decides).
    """
    if not units:
        return None
    every = [n for u in units for n in u]
    loss = [1.0 - gain_probe([n for n in every if n not in set(u)], {"family": "sensitivity", "unit": i}).metric for i, u in enumerate(units)]
    order = sorted(range(len(units)), key=lambda i: (-loss[i], -i))
    rank = {i: r for r, i in enumerate(order)}

    def kept(k: int) -> list[str]:
        top = set(order[:k])
        return [n for i, u in enumerate(units) if i in top for n in u]

    if not probe(kept(len(units)), {"family": "sensitivity"}).met:
        return None
    k = _smallest(lambda x: probe(kept(x), {"family": "sensitivity"}).met, len(units))
    why = {n: f"unit {i} ({u[0]} .. {u[-1]}): quantized alone it lost {loss[i]:.4f}, rank {rank[i] + 1} of {len(units)}; "
              f"the top {k} units meet the target" for i, u in enumerate(units) if rank[i] < k for n in u}
    return kept(k), why


def sqnr_search(order: Sequence[str], probe: Probe, *, step: int, limit: int) -> list[str] | None:
    """Promote ``order[:step]``, ``order[:2 step]``, ... (at most ``limit``) until a round meets the target;
    None when none does."""
    for i in range(0, min(limit, len(order)), step):
        kept = list(order[: min(i + step, limit)])
        if probe(kept, {}).met:
            return kept
    return None


__all__ = ["Cost", "MAX_UNITS", "Probe", "Window", "compute_units", "sensitivity_search", "bisect_suffix", "bisect_window", "prune_window", "rank_sensitivity", "sqnr_search", "window_family",
           "window_rounds", "window_search"]

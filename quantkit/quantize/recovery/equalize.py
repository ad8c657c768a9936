"""Cross-layer equalization (CLE): rescale the channels between two layers so both layers' per-channel weight
ranges match, without changing the float function.

For ``Conv1 -> [Relu] -> Conv2`` (Relu is positively homogeneous: ``relu(x / s) = relu(x) / s`` for ``s > 0``)
and channel ``i`` between them with weight ranges ``r1_i`` (``max |W1[i]|``) and ``r2_i`` (``max |W2[:, i]|``),
``s_i = sqrt(r1_i / r2_i)``: ``W1[i] /= s_i``, ``b1[i] /= s_i``, ``W2[:, i] *= s_i``; afterwards both ranges are
``sqrt(r1_i r2_i)``. Nagel et al. 2019, "Data-Free Quantization Through Weight Equalization and Bias
Correction", sec. 4.1, eq. 9. ``Conv2`` may be a grouped 1-group or depthwise ``Conv`` or a ``ConvTranspose``
(whose weight is ``[C_in, C_out / g, kh, kw]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...modelio import fresh_name


def _attr(node: Any, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _pairs(model: Any) -> list[tuple[Any, Any]]:
    g = model.graph
    inits = {i.name for i in g.initializer}
    outputs = {o.name for o in g.output}
    cons: dict[str, list[Any]] = {}
    for n in g.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)
    pairs = []
    for c1 in g.node:
        if c1.op_type != "Conv" or _attr(c1, "group", 1) != 1 or len(c1.input) < 2 or c1.input[1] not in inits:
            continue
        t = c1.output[0]
        nxt = cons.get(t, [])
        if len(nxt) == 1 and nxt[0].op_type == "Relu" and t not in outputs:
            t = nxt[0].output[0]
            nxt = cons.get(t, [])
        if t in outputs or len(nxt) != 1 or nxt[0].op_type not in ("Conv", "ConvTranspose") or nxt[0].input[0] != t:
            continue
        c2 = nxt[0]
        if len(c2.input) < 2 or c2.input[1] not in inits:
            continue
        grp = _attr(c2, "group", 1)
        if c2.op_type == "ConvTranspose" and grp != 1:
            continue
        pairs.append((c1, c2))
    return pairs


def equalize_pairs(model: Any) -> list[tuple[str, str]]:
    """Equalize every eligible pair once, in place; returns the ``(Conv1, Conv2)`` names equalized.

    The tensors between the two layers change channel by channel, so calibrated ranges of them no longer hold:
    :func:`between` names them, and the caller re-measures their ranges.
    """
    from onnx import numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    done = []
    for c1, c2 in _pairs(model):
        w1 = numpy_helper.to_array(inits[c1.input[1]]).astype(np.float64)
        w2 = numpy_helper.to_array(inits[c2.input[1]]).astype(np.float64)
        c = w1.shape[0]
        grp = _attr(c2, "group", 1)
        if c2.op_type == "ConvTranspose":
            r2 = np.abs(w2).reshape(c, -1).max(axis=1)
        elif grp == 1:
            r2 = np.abs(w2).transpose(1, 0, 2, 3).reshape(c, -1).max(axis=1)
        elif grp == c and w2.shape[0] == c:
            r2 = np.abs(w2).reshape(c, -1).max(axis=1)
        else:
            continue
        r1 = np.abs(w1).reshape(c, -1).max(axis=1)
        s = np.where((r1 > 0) & (r2 > 0), np.sqrt(r1 / np.where(r2 > 0, r2, 1.0)), 1.0)
        w1 = w1 / s.reshape(-1, 1, 1, 1)
        if c2.op_type == "ConvTranspose" or grp != 1:
            w2 = w2 * s.reshape(-1, 1, 1, 1)
        else:
            w2 = w2 * s.reshape(1, -1, 1, 1)
        names = [fresh_name(f"{c1.name}_w_cle", inits), fresh_name(f"{c2.name}_w_cle", inits)]
        new = [numpy_helper.from_array(w1.astype(np.float32), names[0]), numpy_helper.from_array(w2.astype(np.float32), names[1])]
        if len(c1.input) > 2 and c1.input[2]:
            b1 = numpy_helper.to_array(inits[c1.input[2]]).astype(np.float64) / s
            new.append(numpy_helper.from_array(b1.astype(np.float32), fresh_name(f"{c1.name}_b_cle", inits)))
            c1.input[2] = new[-1].name
        g.initializer.extend(new)
        inits.update({t.name: t for t in new})  # a chain Conv1 -> Conv2 -> Conv3: the next pair reads Conv2's new weights
        c1.input[1], c2.input[1] = names
        done.append((c1.name, c2.name))
    from .fold import prune_initializers

    prune_initializers(model)
    return done


def between(model: Any, pairs: list[tuple[str, str]]) -> list[str]:
    """The tensors from each pair's first layer to its second (the Conv output and, when present, the Relu output)."""
    by = {n.name: n for n in model.graph.node}
    out = []
    for c1, c2 in pairs:
        t, target = by[c1].output[0], by[c2].input[0]
        out.append(t)
        if t != target:
            out.append(target)
    return sorted(set(out))


__all__ = ["between", "equalize_pairs"]

"""AdaRound-style weight rounding with the scales frozen: choose, per weight, rounding down or up so that the
layer's output error on calibration inputs is smallest, instead of rounding to nearest.

Nagel et al. 2020, "Up or Down? Adaptive Rounding for Post-Training Quantization" (ICML), eq. 21-25: the weight is
``s (floor(W / s) + h(V))`` with the rectified sigmoid ``h(V) = clip(sigmoid(V) (zeta - gamma) + gamma, 0, 1)``
(``zeta = 1.1``, ``gamma = -0.1``), ``V`` optimized with Adam on the layer's reconstruction error
``|| (W~ - W) X ||^2`` over sampled input patches ``X`` plus ``lambda * sum(1 - |2h - 1|^beta)``, ``beta`` annealed
from 20 to 2, so every ``h`` ends at 0 or 1. Here the reconstruction uses the float inputs (the paper's
layer-wise variant), the error is normalized by that of nearest rounding, and a layer keeps the new rounding
only when its error is lower. The scale ``s`` is ORT's symmetric weight scale (:mod:`.weights`), and the weights
that set it (``|w| = max``) keep their nearest rounding, so ORT computes the same scale from the new float
weights, which lie on its grid: quantizing them reproduces the chosen integers.

Layers: 2-D ``Conv`` with one group or depthwise (``group == channels``) and constant weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...dtypes import INT_TYPES
from ..config import StaticQuantConfig
from .activations import iter_activations

ZETA, GAMMA = 1.1, -0.1


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _patches(x: np.ndarray, node: Any, kshape: tuple[int, int], rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` random input patches ``(P, C, kh, kw)`` of a Conv with input ``x`` ``(1, C, H, W)``."""
    kh, kw = kshape
    sh, sw = _attr(node, "strides", [1, 1])
    dh, dw = _attr(node, "dilations", [1, 1])
    p = _attr(node, "pads", [0, 0, 0, 0])
    xp = np.pad(x[0], ((0, 0), (p[0], p[2]), (p[1], p[3])))
    ho = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    wo = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    oy, ox = rng.integers(0, ho, count), rng.integers(0, wo, count)
    iy = oy[:, None] * sh + np.arange(kh) * dh
    ix = ox[:, None] * sw + np.arange(kw) * dw
    return xp[:, iy[:, :, None], ix[:, None, :]].transpose(1, 0, 2, 3)


def _optimize(w: np.ndarray, s: np.ndarray, g: np.ndarray, keep: np.ndarray, qmax: int, iterations: int, lam: float) -> tuple[np.ndarray, float, float]:
    """Rows ``w`` ``(R, d)`` with scales ``s`` ``(R, 1)`` and Gram matrices ``g`` (``(d, d)`` or ``(R, d, d)``).
    Returns ``(integers, error after / error of nearest rounding, 1.0)``."""
    def rec(e: np.ndarray) -> float:
        return float(np.einsum("rd,de,re->", e, g, e) if g.ndim == 2 else np.einsum("rd,rde,re->", e, g, e))

    base = np.floor(w / s)
    nearest = np.clip(np.round(w / s), -qmax, qmax)
    l0 = max(rec(nearest * s - w), np.finfo(np.float64).tiny)
    rest = np.clip(w / s - base, 1e-4, 1 - 1e-4)
    v = -np.log((ZETA - GAMMA) / (rest - GAMMA) - 1.0)
    m1, m2, lr = np.zeros_like(v), np.zeros_like(v), 0.01
    for t in range(1, iterations + 1):
        sig = 1.0 / (1.0 + np.exp(-v))
        raw = sig * (ZETA - GAMMA) + GAMMA
        h = np.clip(raw, 0.0, 1.0)
        e = s * (base + h) - w
        grad_h = 2.0 * s * (e @ g if g.ndim == 2 else np.einsum("rd,rde->re", e, g)) / l0
        beta = 20.0 + (2.0 - 20.0) * min(1.0, t / (0.8 * iterations))
        u = 2.0 * h - 1.0
        grad_h += lam * -beta * np.abs(u) ** (beta - 1.0) * np.sign(u) * 2.0
        grad_v = grad_h * ((raw > 0) & (raw < 1)) * sig * (1.0 - sig) * (ZETA - GAMMA)
        m1 = 0.9 * m1 + 0.1 * grad_v
        m2 = 0.999 * m2 + 0.001 * grad_v**2
        v -= lr * (m1 / (1 - 0.9**t)) / (np.sqrt(m2 / (1 - 0.999**t)) + 1e-8)
    h = (np.clip((1.0 / (1.0 + np.exp(-v))) * (ZETA - GAMMA) + GAMMA, 0, 1) >= 0.5).astype(np.float64)
    q = np.clip(np.where(keep, nearest, base + h), -qmax, qmax)
    after = rec(q * s - w) / l0
    return (q, after) if after < 1.0 else (nearest, 1.0)


def adaround(model: Any, config: StaticQuantConfig, images: Sequence[np.ndarray], input_name: str, *, iterations: int = 300,
             positions: int = 1024, lam: float = 0.01, seed: int = 0) -> dict[str, Any]:
    """Round the weights of every eligible ``Conv`` adaptively, in place (the float model gets the rounded weights).

    Returns:
        ``{"layers": changed, "of": eligible, "relative_error": mean over changed layers of the output error
        relative to nearest rounding}``.
    """
    from onnx import numpy_helper

    it = INT_TYPES[config.weight_type]
    if it.qmin >= 0 or config.symmetric_weights is False:
        return {"layers": 0, "of": 0, "relative_error": 1.0, "skipped": "only symmetric signed weights are modelled"}
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    skip = set(config.nodes_to_exclude)
    convs = []
    for n in g.node:
        if n.op_type != "Conv" or n.name in skip or len(n.input) < 2 or n.input[1] not in inits or len(inits[n.input[1]].dims) != 4:
            continue
        dims = list(inits[n.input[1]].dims)
        group = _attr(n, "group", 1)
        if group == 1 or (group == dims[0] and dims[1] == 1):
            convs.append(n)
    rng = np.random.default_rng(seed)
    gram: dict[str, np.ndarray] = {}
    for out in iter_activations(model, sorted({c.input[0] for c in convs}), images, input_name):
        for c in convs:
            w = inits[c.input[1]]
            pt = _patches(out[c.input[0]].astype(np.float64), c, (w.dims[2], w.dims[3]), rng, positions)
            if _attr(c, "group", 1) == 1:
                x = pt.reshape(len(pt), -1)
                gram[c.name] = gram.get(c.name, 0.0) + x.T @ x
            else:
                x = pt.reshape(len(pt), pt.shape[1], -1)
                gram[c.name] = gram.get(c.name, 0.0) + np.einsum("pci,pcj->cij", x, x)
    changed, errors = 0, []
    for c in convs:
        w = numpy_helper.to_array(inits[c.input[1]])
        rows = w.reshape(w.shape[0], -1).astype(np.float64)
        absmax = np.max(np.abs(rows), axis=1, keepdims=True) if config.per_channel else np.full((len(rows), 1), np.max(np.abs(rows)))
        s = np.where(absmax > 0, absmax / it.qmax, 1.0)
        keep = np.abs(rows) >= absmax
        q, rel = _optimize(rows, s, gram[c.name], keep, it.qmax, iterations, lam)
        if rel < 1.0:
            name = f"{c.name}_w_adaround"
            g.initializer.append(numpy_helper.from_array((q * s).reshape(w.shape).astype(w.dtype), name))
            c.input[1] = name
            changed += 1
            errors.append(rel)
    from .fold import prune_initializers

    prune_initializers(model)
    return {"layers": changed, "of": len(convs), "relative_error": round(float(np.mean(errors)), 4) if errors else 1.0}


__all__ = ["adaround"]

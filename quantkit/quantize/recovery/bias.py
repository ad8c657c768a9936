"""Bias correction: remove the mean output shift that weight quantization adds to each convolution.

With ``W_q`` the dequantized 8-bit weight (:func:`.weights.fake_quant_weight`) and ``eps = W_q - W``, a
convolution's output moves on average by ``eps * E[x]`` per output channel (``E[x]``: per-input-channel mean of
its input, measured on calibration images; kernel positions summed, padding ignored). Subtracting that from the
bias removes the shift: Nagel et al. 2019, "Data-Free Quantization Through Weight Equalization and Bias
Correction", sec. 4.2 (here with the empirical ``E[x]`` rather than the batch-norm-derived one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..config import StaticQuantConfig
from .activations import iter_activations
from .weights import fake_quant_weight


def correct_bias(model: Any, config: StaticQuantConfig, images: Sequence[np.ndarray], input_name: str) -> tuple[int, float]:
    """Correct the bias of every 2-D ``Conv`` with constant weights that ``config`` quantizes, in place.

    Returns:
        ``(convolutions corrected, mean |shift| over their output channels)``.
    """
    from onnx import numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    skip = set(config.nodes_to_exclude) | set(config.op_types_to_exclude)
    convs = [n for n in g.node if n.op_type == "Conv" and n.name not in skip and "Conv" not in skip and len(n.input) > 1
             and n.input[1] in inits and len(inits[n.input[1]].dims) == 4]
    if not convs or not images:
        return 0, 0.0
    sums: dict[str, np.ndarray] = {}
    for out in iter_activations(model, sorted({c.input[0] for c in convs}), images, input_name):
        for t, a in out.items():
            sums[t] = sums.get(t, 0.0) + a.astype(np.float64).mean(axis=(0, 2, 3))
    shifts = []
    for c in convs:
        w = numpy_helper.to_array(inits[c.input[1]])
        group = next((a.i for a in c.attribute if a.name == "group"), 1)
        ex = sums[c.input[0]] / len(images)
        eps = fake_quant_weight(w, weight_type=config.weight_type, per_channel=config.per_channel) - w.astype(np.float64)
        cout, cin_g = w.shape[0], w.shape[1]
        per_out = cout // group
        xg = np.stack([ex[(o // per_out) * cin_g:(o // per_out + 1) * cin_g] for o in range(cout)])  # (cout, cin_g)
        shift = np.einsum("oikl,oi->o", eps, xg)
        b = numpy_helper.to_array(inits[c.input[2]]).astype(np.float64) if len(c.input) > 2 and c.input[2] else np.zeros(cout)
        name = f"{c.name}_bias_corrected"
        g.initializer.append(numpy_helper.from_array((b - shift).astype(w.dtype), name))
        if len(c.input) > 2:
            c.input[2] = name
        else:
            c.input.append(name)
        shifts.append(np.abs(shift))
    from .fold import prune_initializers

    prune_initializers(model)
    return len(convs), round(float(np.mean(np.concatenate(shifts))), 8)


__all__ = ["correct_bias"]

"""Run the float model with chosen intermediate tensors as extra outputs, one image at a time.

Layer-wise statistics use the ordinary machinery: mark tensors as outputs (:func:`quantkit.runner.with_outputs`,
Polygraphy's ``ModifyOutputs``) and run ONNX Runtime with graph optimizations off, so every marked tensor exists.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...runner import OrtRunner, with_outputs


def iter_activations(model: Any, tensors: Sequence[str], images: Sequence[np.ndarray], input_name: str) -> Iterator[dict[str, np.ndarray]]:
    """For each image, ``{tensor: array}`` of ``tensors`` (graph inputs are passed through)."""
    inputs = {i.name for i in model.graph.input}
    marked = [t for t in tensors if t not in inputs]
    m = with_outputs(model, marked)
    with OrtRunner(m.SerializeToString(), graph_optimization_level="disable", name="float") as r:
        for x in images:
            out = r.infer({input_name: x}, output_names=marked) if marked else {}
            if input_name in tensors:
                out[input_name] = x
            yield out


__all__ = ["iter_activations"]

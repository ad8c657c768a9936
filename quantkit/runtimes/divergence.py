"""When a runtime's tensor diverges from the QDQ simulation: the one rule, for a node on its own and for a tensor in context.

A quantized tensor (a DequantizeLinear output) holds integer codes times its scale, so two runtimes' values of it
differ by whole codes: ``round((got - reference) / scale)``. Two criteria, computed by :func:`compare_tensor`:

* **beyond the tolerance**: more than ``max_mismatch`` of the elements are more than the tolerance (the tensor's
  step times ``tolerance_steps``) off. Fused integer kernels requantize with fixed-point multipliers and may land one
  step off, so one step is tolerated.
* **codes differ**: more than :data:`MAX_CODE_SHARE` of the elements have a different code, even by one. Fed the
  simulation's own input codes (:func:`quantkit.runtimes.cuts.local_model`), an ordinary integer kernel gives the
  simulation's codes almost everywhere, while a kernel that rounds differently (OpenVINO's linear Resize where
  interpolated values fall on or near half a step) moves one code on many elements. Its consumer (a Conv) then
  amplifies those one-code differences into several steps, so without this criterion the consumer is blamed and
  the Resize passes.

A node or tensor diverges when either holds (localisation, the pattern suite). Whether a model's *outputs* part from
the simulation (``quantkit compare``'s verdict, ``quantkit verify``'s output rows, the start of localisation) is
judged by the first criterion only, because one-code differences add up layer by layer and mostly wash out: cut at a
Conv output and run from the image, ONNX Runtime at level ``all`` differs from its own simulation by one code or more
on a median 17% (up to 67%) of ppocr_det's Conv outputs, while its output map differs on 0.07% of its codes
(``bench/localize_codes.py --context``; ddddocr_det: a median 33%).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

MAX_CODE_SHARE = 0.02
"""Share of a node's output elements whose codes may differ from the simulation's when the node is fed the
simulation's inputs. Measured with ``bench/localize_codes.py`` (one photo, 2-core AMD EPYC with AVX-512 VNNI, ONNX
Runtime 1.32, OpenVINO 2026.4): on their own, the Conv outputs of the demo models (ppocr_det 62, ddddocr_det 83)
differ on at most 0.003% of their elements on ONNX Runtime at level ``all`` and 0.005% on OpenVINO f32 (one code;
``bench/results/localize_codes_*.txt``).
Nodes whose results land on or near half a step differ by one code on far more: OpenVINO's 2x linear Resize on
23-25% (asymmetric, ``upsample_linear_opset9.onnx`` quantized by quantkit, 8 photos), 20-23% and 6-10%
(asymmetric, half_pixel: the pattern suite), 6.2% in ``tests/test_runtimes_localize.py``'s Conv -> Resize -> Conv;
OpenVINO's Sigmoid on 3.7-18% of five of ddddocr_det's; ONNX Runtime's own integer Add on 2.6-31% of nine of
ppocr_det's (hardswish's ``x + 3``, an FPN sum); OpenVINO's QuantizeLinear of ppocr_det's input on 76% (its
``(x/255 - 0.5) / 0.5`` at scale 2/255 puts every value within float rounding of half a step). 2% sits far above the
Conv outputs and below the Resize; the Adds, Sigmoids and that input quantization are named too where they come
first: their codes do differ."""

SLACK = 1e-3
"""Of a step: the reference computes in float64 or another order, so a value exactly on a rounding edge may be 1.00001 steps off."""


@dataclasses.dataclass(frozen=True)
class TensorCheck:
    """A runtime's tensor vs the reference. ``max_steps``: worst element, in quantization steps of the tensor (in
    units of the tolerance when the tensor has no step); ``mismatch``: share of compared elements beyond the
    tolerance; ``code_share``: share whose integer code differs by one or more (None: no step known); ``n``: elements
    compared; ``diverged``: by the rule it was checked with (module docstring)."""

    tensor: str
    max_steps: float
    mismatch: float
    n: int
    diverged: bool
    code_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def code_share(got: np.ndarray, ref: np.ndarray, step: float) -> float:
    """Share of elements whose codes differ, ``|round((got - ref) / step)| >= 1``; ``got`` and ``ref`` of one shape."""
    d = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64)) / step
    return float(np.mean(~np.isfinite(d) | (d >= 0.5))) if d.size else 0.0


def compare_tensor(name: str, got: np.ndarray, ref: np.ndarray, idx: np.ndarray | None, tolerance: float, max_mismatch: float, *,
                   step: float | None = None, max_code_share: float | None = None) -> TensorCheck:
    """Target values ``got`` (whole tensor) vs ``ref`` (at flat indices ``idx``, or the whole tensor).

    Args:
        tolerance: allowed absolute difference per element (0: exact).
        max_mismatch: share of elements allowed beyond ``tolerance``.
        step: the tensor's quantization step (its DequantizeLinear scale); None for a float tensor.
        max_code_share: share of elements allowed a different code (:data:`MAX_CODE_SHARE` for a node on its own);
            None: not a criterion (a tensor in context). Needs ``step``.
    """
    flat = np.asarray(got, np.float64).reshape(-1)
    r = np.asarray(ref, np.float64).reshape(-1)
    if idx is not None:
        if idx.size and int(idx.max()) >= flat.size:
            return TensorCheck(name, float("inf"), 1.0, int(r.size), True, 1.0 if step else None)
        flat = flat[idx]
    if flat.shape != r.shape:
        return TensorCheck(name, float("inf"), 1.0, int(r.size), True, 1.0 if step else None)
    err = np.abs(flat - r)
    tol = tolerance if tolerance > 0 else 1e-12
    beyond = ~np.isfinite(err) | (err > tol * (1 + SLACK))
    mismatch = float(beyond.mean()) if beyond.size else 0.0
    unit = step if step else tol
    worst = float(np.nanmax(err / unit)) if err.size else 0.0
    codes = code_share(flat, r, step) if step else None
    diverged = mismatch > max_mismatch or (max_code_share is not None and codes is not None and codes > max_code_share)
    return TensorCheck(name, worst, mismatch, int(r.size), diverged, codes)

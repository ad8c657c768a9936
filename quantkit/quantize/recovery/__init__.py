"""Accuracy recovery before the precision fallback: techniques that make the all-8-bit model closer to FP32,
so fewer nodes need float. Each is one option of :class:`RecoveryConfig` and one module:

* :mod:`.fold`: fold constant affine nodes into convolutions, hard-swish as ``x * HardSigmoid(x)``;
* :mod:`.equalize`: cross-layer equalization;
* :mod:`.adaround`: adaptive rounding of the weights, scales frozen;
* :mod:`.ranges`: per-tensor choice of the calibration range;
* :mod:`.bias`: bias correction of weight-quantization error.

:func:`apply_recovery` runs the enabled ones in that order; the fallback records what each changed and
the metric after it (``fallback.json: recovery``).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"RecoveryConfig": "config", "apply_recovery": "apply", "Recovered": "apply"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(name)

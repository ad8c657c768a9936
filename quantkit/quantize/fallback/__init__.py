"""Automatic precision fallback: keep the fewest nodes of an 8-bit model in float (or 16 bits) until its
agreement with FP32 reaches a target on every reference set, then time it against FP32.

Modules: :mod:`.config` (:class:`FallbackConfig`, params ``fallback``), :mod:`.metric` (agreement metrics,
:func:`agreement_metric`), :mod:`.graph` (node names, islands, Q/DQ transitions), :mod:`.search` (search
strategies as plain functions: prefix, suffix and island windows), :mod:`.candidates` (build and score candidates on cached
FP32 outputs), :mod:`.choose` (which candidate is written), :mod:`.holdout` (the held-out split and the written figure),
:mod:`quantkit.runtimes.latency` (interleaved timing per runtime and thread count), :mod:`quantkit.artifacts.fallback` (``fallback.json``),
:mod:`.run` (:func:`precision_fallback`), :mod:`.accuracy_control` (:func:`nncf_accuracy_control`: NNCF's accuracy
control as a peer, ``quantize.engine: nncf``). Imported lazily: reading a result loads no runtime.
"""

from __future__ import annotations

import importlib
from typing import Any

_RESULT = "quantkit.artifacts.fallback"  # fallback.json is a typed artifact
_LATENCY = "quantkit.runtimes.latency"  # shared with quantkit measure
_WHERE = {
    "FallbackConfig": "config", "FallbackResult": _RESULT, "KeptNode": _RESULT, "LatencyRow": _RESULT, "Round": _RESULT,
    "RecoveryStep": _RESULT, "SetFigure": _RESULT, "LatencyConfig": _LATENCY, "measure_latency": _LATENCY, "interleaved_latency": _LATENCY,
    "Metric": "metric", "agreement_metric": "metric", "pixel_iou": "metric", "decision_f1": "metric", "task_metric": "metric",
    "precision_fallback": "run", "rank_sensitivity": "search", "nncf_accuracy_control": "accuracy_control",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        module = _WHERE[name]
        return getattr(importlib.import_module(module if module.startswith("quantkit.") else f".{module}", __name__), name)
    raise AttributeError(name)

"""Quantization engine: typed configs, bounded-memory calibration, the scales record, comparisons.

One verb, :func:`quantize` (the config picks the engine, a plug-in of :mod:`.engines`). See ``docs/ARCHITECTURE.md``.
Everything is imported lazily: reading a record (:mod:`quantkit.artifacts`) never loads ONNX Runtime's
quantization tools.

Module map (one line each; the calibration loop runs engine -> calibration.calibrate -> tap / reading -> the states)::

    config            StaticQuantConfig, DynamicQuantConfig, TensorOverride: one named field per knob
    ort_bridge        the one module that talks to onnxruntime.quantization: configs to ORT arguments, ranges to TensorsData
    engines           quantize() and the engine registry: Engine, StaticJob, register_engine (keyed by the config's engine)
    engine            ONNX Runtime's engines (ort, ort-dynamic) and write_static(), the core every ORT-quantized file goes through
    files             what every engine shares: the intake read, the model prepared, the file finished, the record built
    nncf_engine       quantize.engine: nncf: the one module that imports nncf (nncf.quantize, its int8 activations as uint8)
    calibration/      bounded-memory, resumable range collection reproducing ORT's calibrators: calibrate (collect_ranges),
                      checkpoint, tap, reading, minmax, histogram, fine_histogram, cutoffs, derive (one line each there)
    scales            the scales and zero points read from a written model into TensorScale rows (ORT's names; any QDQ file)
    outputs           what the written model computes at its outputs: effective levels, collapsed channels, findings
    runtime_check     the gate before a model is written: the runtime loads and runs it at its deployment level
    compare           layer by layer FP32 against the QDQ simulation (SQNR, cosine, clipping), streaming
    runtime_compare   FP32, the QDQ simulation and each runtime's execution of the same INT8 file, per output
    aimet             AIMET encodings 1.0.0 export and import
    recovery/         accuracy recovery before the fallback: fold, equalize, bias, adaround, ranges (one module each),
                      apply (runs them in order), activations (float tensors per image), weights (fake-quant weights)
    fallback/         precision fallback: config, graph (names, islands), candidates (build + score), metric,
                      search (bisect, prune, SQNR ranking), run (precision_fallback), accuracy_control (NNCF's, as a peer)

Modules that do the same thing twice (noted for a later pass, not changed here):

- ``compare._Acc`` and ``runtime_compare._Acc``: the same streaming SQNR / cosine / max-error sums, each with
  its own extras (clipping count; step mismatches). One accumulator with both would do.
- ``fallback.metric.pixel_iou`` computes pixel IoU of thresholded maps itself, beside ``fallback.metric.task_metric``,
  which asks the task adapter (``db_text``, ``segmentation`` already own pixel IoU): task knowledge outside the
  adapters (STYLE.md habit 11). It carries an ``upper_bound`` for early stopping that the adapter path lacks; that
  bound is the reason to keep it, and the thing to move into the adapter's metric.
- The symmetric weight scale (``absmax / qmax``, round, clip) is written in ``recovery.weights.fake_quant_weight``
  and again inside ``recovery.adaround``; ``recovery.adaround._attr`` and ``recovery.equalize._attr`` read a node
  attribute twice over.
- Three ways of running a model with intermediate tensors as outputs: ``ort_bridge.calibration_plan`` (ORT's own
  ``augment_graph``, for histogram parity with ORT), ``tap`` (quantkit's reading sessions) and
  ``quantkit.runtimes.with_outputs`` (compare, recovery.activations). The first two exist for ORT parity and
  speed; they are not duplicates of the third to remove, but a reader should know all three.
- ``histogram`` and ``fine_histogram`` look alike but are not duplicates: exact two passes on ORT's bins against
  one pass within a tolerance.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DynamicQuantConfig": "config", "StaticQuantConfig": "config", "TensorOverride": "config",
    "MODEL_FILE": "engine", "RECORD_FILE": "engine", "quantize": "engines", "replay": "reuse",
    "Engine": "engines", "StaticJob": "engines", "register_engine": "engines", "engine_for": "engines",
    "RangeSource": "engine", "write_static": "engine",
    "quantize_with_ranges": "reuse",
    "clipping_rates": "compare", "compare_layers": "compare", "plot_layer_errors": "compare", "TensorComparison": "compare",
    "precision_fallback": "fallback", "FallbackResult": "fallback", "FallbackConfig": "fallback",
    "export_aimet": "aimet", "import_aimet": "aimet",
    "effective_levels": "outputs", "ChannelRange": "outputs", "OutputLevels": "outputs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(name)

"""Latency of models side by side: interleaved runs (A, B, A, B, ...), medians, per runtime and thread count.

A loaded machine slows every model it runs, so comparing two models timed one after the other says more
about the load than about the models. Here every repeat runs each model once on the same input, in a
rotating order, and the medians of those runs are compared, pair by pair.
ONNX Runtime sessions are timed with ``session.intra_op.allow_spinning = 0``: several sessions take turns on the
same cores here, and a spinning idle session would slow the timed one (see ``_ort``); a deployed model runs alone
with spinning on, which one session alone measured about 10% faster at 2 threads, for FP32 and INT8 alike.

Runtimes enter through a *runner factory*: ``factory(model, threads) -> Runner`` (a
:class:`quantkit.runner.Runner`: ``activate / infer / deactivate``, wall time per call in
``inference_times``). :func:`runner_factory` gives the built-in ones; a runtime plug-in adds its own
factory without this module changing.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..config import Config
from ..errors import ConfigError
from .base import Runtime as Runner
from .ort import OrtRuntime as OrtRunner

RunnerFactory = Callable[[Any, int], Runner]
"""``factory(model path or bytes, intra-op threads) -> Runner`` (not yet activated)."""


@dataclasses.dataclass(frozen=True)
class LatencyConfig(Config):
    """How latency is measured (params.yaml ``fallback.latency``).

    Fields:
        runtimes: runtimes to time on, by name (:func:`runner_factory`); ``onnxruntime`` is the CPU
            execution provider with every graph optimization.
        threads: intra-op thread counts; each is timed separately (e.g. ``[1, 2]``: one core, the whole
            2-core machine).
        repeats: timed runs of each model per thread count (the median is reported); at least 3.
        warmup: untimed runs of each model first (session initialisation, caches).
    """

    VERSIONED = False

    runtimes: tuple[str, ...] = ("onnxruntime",)
    threads: tuple[int, ...] = (1, 2)
    repeats: int = 15
    warmup: int = 2

    def validate(self) -> None:
        if not self.runtimes:
            raise ConfigError("fallback.latency.runtimes: name at least one runtime, e.g. [onnxruntime]")
        for r in self.runtimes:
            if r not in RUNTIMES:
                raise ConfigError(f"fallback.latency.runtimes: {r!r} is not a known runtime; use one of {', '.join(sorted(RUNTIMES))}")
        if not self.threads or any(t < 1 for t in self.threads):
            raise ConfigError(f"fallback.latency.threads: {list(self.threads)} must be thread counts >= 1, e.g. [1, 2]")
        if self.repeats < 3:
            raise ConfigError(f"fallback.latency.repeats: {self.repeats} must be >= 3 (a median of fewer runs is noise)")
        if self.warmup < 0:
            raise ConfigError(f"fallback.latency.warmup: {self.warmup} must be >= 0")


def _ort(model: Any, threads: int) -> Runner:
    # Spinning off: with it on (ORT's default), the idle sessions' intra-op threads busy-wait after their own run and
    # take the cores from the session being timed. Measured on 2 cores (PP-OCR det 640, FP32 / deployed / candidate
    # interleaved, 2 threads): FP32 118.5 ms with spinning vs 73.4 ms without; one session alone: 59 / 65 ms.
    return OrtRunner(model, graph_optimization_level="all", intra_op_num_threads=threads, name="onnxruntime", allow_spinning=False)


def _openvino(model: Any, threads: int) -> Runner:
    from . import deployment_options, make_runtime

    return make_runtime("openvino", model, name="openvino", **deployment_options("openvino", threads))


def _openvino_default(model: Any, threads: int) -> Runner:
    from . import deployment_options, make_runtime

    opts = {**deployment_options("openvino", threads), "inference_precision": "default"}
    return make_runtime("openvino", model, name="openvino", **opts)


RUNTIMES: dict[str, RunnerFactory] = {"onnxruntime": _ort, "openvino": _openvino}
"""Runner factories by runtime name, each at its deployment settings (ORT level ``all``; OpenVINO CPU, f32 pinned)."""

FLOAT_RUNS: dict[str, dict[str, RunnerFactory]] = {"onnxruntime": {"fp32": _ort},
                                                    "openvino": {"fp32": _openvino, "fp32-default": _openvino_default}}
"""Per runtime, the ways it runs a float model that an INT8 model must beat, by label: its deployment settings (``fp32``:
ORT at level ``all``, OpenVINO with f32 pinned) and, for OpenVINO, its own default precision (``fp32-default``: bf16 on
CPUs with AVX-512 BF16 / AMX, which ran the demo detectors as fast as their INT8 files, issue 32). A runtime's best
float run is the fastest of these."""


def runner_factory(runtime: str) -> RunnerFactory:
    """The runner factory of a runtime by name.

    Raises:
        ConfigError: an unknown runtime name.
    """
    if runtime not in RUNTIMES:
        raise ConfigError(f"runtime {runtime!r} is not known; use one of {', '.join(sorted(RUNTIMES))}")
    return RUNTIMES[runtime]


@dataclasses.dataclass(frozen=True)
class Timing:
    """Median wall time of one model on one runtime at one thread count (milliseconds per inference).

    ``runs_ms``: every timed run, in order; ``median_ms`` their median.
    """

    runtime: str
    threads: int
    model: str
    median_ms: float
    runs_ms: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "threads": self.threads, "model": self.model, "median_ms": round(self.median_ms, 3),
                "runs_ms": [round(t, 3) for t in self.runs_ms]}


def interleaved_latency(models: Mapping[str, Any], feeds: Sequence[Mapping[str, np.ndarray]], *, threads: int, repeats: int,
                        warmup: int = 2, runtime: str = "onnxruntime", factory: RunnerFactory | None = None,
                        label_factories: Mapping[str, RunnerFactory] | None = None) -> dict[str, Timing]:
    """Time ``models`` (``{label: path or bytes}``) interleaved at one thread count.

    ``label_factories`` gives some labels their own runner factory (another runtime, another precision), so runs of
    different runtimes or settings interleave too; the others use ``factory`` (default: ``runtime``'s). A Timing's
    ``runtime`` is ``runtime`` for every label.

    Every repeat ``r`` runs each model once on ``feeds[r % len(feeds)]``; the model order rotates by one
    each repeat (A B C, B C A, ...), so no model always runs first after another's cache pollution. All
    runners are activated before the first timed run and deactivated after the last.

    Returns:
        ``{label: Timing}`` with ``repeats`` runs each (milliseconds, :func:`time.perf_counter` around the
        runtime's ``run`` call).

    Raises:
        ConfigError: no models, no feeds, ``repeats < 1``.
        ModelError: a runtime cannot load a model.
    """
    if not models or not feeds or repeats < 1:
        raise ConfigError("interleaved_latency: give at least one model, one input and one repeat")
    make = factory or runner_factory(runtime)
    labels = list(models)
    own = dict(label_factories or {})
    runners = {k: own.get(k, make)(models[k], threads) for k in labels}
    try:
        for r in runners.values():
            r.activate()
        for i in range(warmup):
            for k in labels:
                runners[k].infer(dict(feeds[i % len(feeds)]))
        runs: dict[str, list[float]] = {k: [] for k in labels}
        for i in range(repeats):
            feed = dict(feeds[i % len(feeds)])
            for j in range(len(labels)):
                k = labels[(i + j) % len(labels)]
                runners[k].infer(feed)
                runs[k].append(1000.0 * runners[k].inference_times[-1])
    finally:
        for r in runners.values():
            r.deactivate()
    return {k: Timing(runtime, threads, k, statistics.median(v), tuple(v)) for k, v in runs.items()}


def measure_latency(models: Mapping[str, Any], feeds: Sequence[Mapping[str, np.ndarray]], config: LatencyConfig,
                    factories: Mapping[str, RunnerFactory] | None = None) -> list[Timing]:
    """:func:`interleaved_latency` for every runtime and thread count of ``config``.

    ``factories`` maps runtime names to runner factories (default :data:`RUNTIMES`); a runtime named in
    ``config`` but absent raises :class:`ConfigError`. ``QUANTKIT_THREADS`` must not be set (it would
    override every thread count: :class:`quantkit.runner.OrtRunner`).
    """
    if os.environ.get("QUANTKIT_THREADS", "").strip():
        raise ConfigError("QUANTKIT_THREADS is set: it overrides the thread counts latency is measured at; unset it")
    table = dict(factories or RUNTIMES)
    out: list[Timing] = []
    for rt in config.runtimes:
        if rt not in table:
            raise ConfigError(f"fallback.latency.runtimes: no runner for {rt!r}; use one of {', '.join(sorted(table))}")
        for t in config.threads:
            out.extend(interleaved_latency(models, feeds, threads=t, repeats=config.repeats, warmup=config.warmup, runtime=rt,
                                           factory=table[rt]).values())
    return out


__all__ = ["FLOAT_RUNS", "LatencyConfig", "RUNTIMES", "RunnerFactory", "Timing", "interleaved_latency", "measure_latency", "runner_factory"]

"""The gate before a quantized model is written: the runtime loads and runs it at its deployment level.

ONNX Runtime's quantizer writes some type combinations its own CPU provider refuses at the default
optimization level, e.g. 4-bit activations with 8-bit weights in QDQ (measured with ORT 1.32 on a two-Conv
model: every 4-bit activation type with uint8/int8 weights fails to load at ``ORT_ENABLE_ALL``, where the
QDQ pairs are fused into a ``QLinearConv`` that has no 4-bit kernel; it loads with optimizations off), and ORT
1.32 crashes running some others (a quantized ``Mul`` fed by an empty ``GatherND`` result). So a model is
loaded and run once, on zeros, at the level it will be deployed with, in a child process, before anything is
written.

:func:`check_runs` is the one place that decides; it takes the runtime as a name so the runtime plug-ins
(``quantkit.runtimes``) can be pointed at the targets named in ``params.yaml``. Today it knows
``onnxruntime-cpu`` (:class:`quantkit.runner.OrtRunner`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import numpy as np

from ..dtypes import int_type
from ..errors import ModelError, TargetSupportError

DEPLOYMENT_LEVEL = "all"
"""ONNX Runtime's default graph optimization level (``ORT_ENABLE_ALL``), the one a deployed session uses."""
RUNTIMES = ("onnxruntime-cpu",)

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64, "tensor(int64)": np.int64,
       "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(bool)": np.bool_}


def zeros_feed(session: Any) -> dict[str, np.ndarray]:
    """Zeros for every input of an ORT session (symbolic dimensions as 1)."""
    feed = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in i.shape]
        feed[i.name] = np.zeros(shape, _NP.get(i.type, np.float32))
    return feed


def combination_fix(config: Any) -> str:
    """What to change when the runtime refuses a quantized model, from the config's types (one phrase)."""
    a, w = getattr(config, "activation_type", None), getattr(config, "weight_type", None)
    fmt = getattr(config, "format", "dynamic")
    combo = f"activation_type {a} with weight_type {w} ({fmt})" if a else f"weight_type {w} ({fmt})"
    if a and int_type(a).bits == 4 and int_type(w).bits == 8:
        return f"{combo} is not loadable: set weight_type: int4 (4-bit weights with 4-bit activations load) or activation_type: uint8"
    return f"{combo} is not loadable: change activation_type/weight_type (uint8/int8 loads everywhere) or keep the failing nodes in float"


CHECK_TIMEOUT_S = 600
"""Longest a load-and-run check may take (a large model's session creation included)."""


def check_runs(model: str | os.PathLike[str], *, name: str, fix: str, runtime: str = "onnxruntime-cpu", level: str = DEPLOYMENT_LEVEL) -> None:
    """Load the model file in ``runtime`` at graph optimization ``level`` and run it once on zeros, in a child
    process: ONNX Runtime 1.32 crashes (SIGSEGV) on some quantized models, e.g. a QDQ ``Mul`` fed by an empty
    ``GatherND`` result at ``extended``/``all``, and a crash must become a refusal, not end this process.

    Args:
        model: the quantized model file.
        name: the file name to put in the message.
        fix: what to change, one phrase (e.g. :func:`combination_fix`).
        runtime: one of :data:`RUNTIMES`.
        level: ``"disable" | "basic" | "extended" | "all"`` (ORT's levels).

    Raises:
        TargetSupportError: (exit 5) the runtime cannot load or run the model, or crashes (one line: runtime,
            level, ORT's first line or the signal, ``fix``).
        ValueError: an unknown ``runtime``.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {RUNTIMES}, not {runtime!r}")
    cmd = [sys.executable, "-m", "quantkit.quantize.runtime_check", os.fspath(model), level]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        why = f"no answer within {CHECK_TIMEOUT_S} s"
    else:
        if proc.returncode == 0:
            return
        if proc.returncode < 0:
            why = f"it crashed with {signal.Signals(-proc.returncode).name} running the model on an all-zero input"
        else:
            why = ((proc.stdout.strip() or proc.stderr.strip()).splitlines() or [f"exit {proc.returncode}"])[-1]
    raise TargetSupportError(f"{name}: {runtime} cannot run the quantized model at optimization level '{level}' "
                             f"({why[:240]}); {fix}; nothing was written")


def _main(argv: list[str]) -> int:
    """Child process of :func:`check_runs`: ``MODEL LEVEL``; exit 0 when it loads and runs, else 3 with ORT's
    first line on stdout."""
    from ..runner import OrtRunner

    path, level = argv
    try:
        with OrtRunner(path, graph_optimization_level=level) as r:
            r.infer(zeros_feed(r.session))
    except ModelError as e:  # OrtRunner's one line: "NAME: ONNX Runtime cannot load the model (FIRST LINE); ..."
        msg = str(e)
        sys.stdout.write((msg[msg.find("(") + 1: msg.rfind(")")] if "(" in msg else msg) + "\n")
        return 3
    except Exception as e:  # a failure while running: ORT's own exception types
        sys.stdout.write(((str(e).strip().splitlines() or [type(e).__name__])[0]) + "\n")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

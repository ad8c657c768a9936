"""The gate before a quantized model is written: the runtime loads and runs it at its deployment level.

ONNX Runtime's quantizer writes some type combinations its own CPU provider refuses at the default
optimization level, e.g. 4-bit activations with 8-bit weights in QDQ (measured with ORT 1.32 on a two-Conv
model: every 4-bit activation type with uint8/int8 weights fails to load at ``ORT_ENABLE_ALL``, where the
QDQ pairs are fused into a ``QLinearConv`` that has no 4-bit kernel; it loads with optimizations off), and ORT
1.32 crashes running some others (a quantized ``Mul`` fed by an empty ``GatherND`` result). So a model is
loaded and run once, on zeros, at the level it will be deployed with, in a child process, before anything is
written.

The child is started once and serves every check of this process (one JSON line in, one out): a fallback search
checks each of its 15-25 candidates, and a new Python with ONNX Runtime imported costs about 1 s per check on a
2-core machine, more than loading and running most candidates. A check during which the child dies (a crash) is
a refusal; the next check starts a new child.

:func:`check_runs` is the one place that decides; it takes the runtime as a name so the runtime plug-ins
(``quantkit.runtimes``) can be pointed at the targets named in ``params.yaml``. Today it knows
``onnxruntime-cpu`` (:class:`quantkit.runner.OrtRunner`).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

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
    why = _CHECKER.check(os.fspath(model), level)
    if why is None:
        return
    raise TargetSupportError(f"{name}: {runtime} cannot run the quantized model at optimization level '{level}' "
                             f"({why[:240]}); {fix}; nothing was written")


class _Checker:
    """The long-lived child process behind :func:`check_runs` (``python -m quantkit.quantize.runtime_check
    --serve``), started on the first check and again after a crash; one check at a time (a lock)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.err: IO[bytes] | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        self.err = tempfile.TemporaryFile()  # the child's stderr (ORT's warnings): read back only when it dies
        # `python -m` puts its working directory first on sys.path: run it where this process's quantkit package
        # lies, so the child imports the same code even when started inside another checkout of quantkit
        root = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen([sys.executable, "-m", "quantkit.quantize.runtime_check", "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1, cwd=root)
        return self.proc

    def _died(self, proc: subprocess.Popen[str]) -> str:
        rc = proc.wait()
        self.proc = None
        if rc < 0:
            return f"it crashed with {signal.Signals(-rc).name} running the model on an all-zero input"
        tail = b""
        if self.err is not None:
            self.err.seek(0)
            tail = self.err.read()[-4000:]
        lines = tail.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else f"exit {rc}"

    def check(self, model: str, level: str) -> str | None:
        """None when the model loads and runs at ``level``, else why not (one line)."""
        with self.lock:
            proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps([os.path.abspath(model), level]) + "\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                return self._died(proc)
            ready, _, _ = select.select([proc.stdout], [], [], CHECK_TIMEOUT_S)
            if not ready:
                proc.kill()
                proc.wait()
                self.proc = None
                return f"no answer within {CHECK_TIMEOUT_S} s"
            line = proc.stdout.readline()
            if not line:  # the child died during the check
                return self._died(proc)
            answer = json.loads(line)
            return None if answer["ok"] else str(answer["why"])

    def close(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
            if proc is not None and proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.close()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


_CHECKER = _Checker()
atexit.register(_CHECKER.close)


def _check_one(path: str, level: str) -> str | None:
    """Load and run ``path`` at ``level`` in this process: None, or ORT's first line."""
    from ..runner import OrtRunner

    try:
        with OrtRunner(path, graph_optimization_level=level) as r:
            r.infer(zeros_feed(r.session))
    except ModelError as e:  # OrtRunner's one line: "NAME: ONNX Runtime cannot load the model (FIRST LINE); ..."
        msg = str(e)
        return msg[msg.find("(") + 1: msg.rfind(")")] if "(" in msg else msg
    except Exception as e:  # a failure while running: ORT's own exception types
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def _serve() -> int:
    """Child process of :func:`check_runs`: reads ``[MODEL, LEVEL]`` JSON lines, answers each with
    ``{"ok": true}`` or ``{"ok": false, "why": FIRST LINE}``; ends at end of input. Anything else that writes to
    file descriptor 1 (a native library) is sent to stderr, so the answers stay one line each."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        path, level = json.loads(line)
        why = _check_one(path, level)
        out.write(json.dumps({"ok": why is None, "why": why}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        sys.exit(_serve())
    print("usage: python -m quantkit.quantize.runtime_check --serve", file=sys.stderr)
    sys.exit(2)

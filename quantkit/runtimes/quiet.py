"""Silence ONNX Runtime on paths where quantkit reports the failure itself.

ONNX Runtime writes to stderr from two places: its C++ logger (default severity WARNING, set process-wide
by ``onnxruntime.set_default_logger_severity``) and Python loggers under ``onnxruntime`` (e.g.
``quant_pre_process`` logs an ERROR with a full traceback when its optimizer cannot load a model with a
custom-domain op, then carries on). Where quantkit turns the failure into its own one-line error, that
output is noise printed before it; :func:`quiet_onnxruntime` holds both back for the duration of a block.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Iterator

ORT_DEFAULT_SEVERITY = 2
"""ONNX Runtime's default logger severity (0 verbose .. 4 fatal); restored after a quiet block."""


@contextlib.contextmanager
def quiet_onnxruntime() -> Iterator[None]:
    """Within the block: ORT's C++ logger at FATAL only, the ``onnxruntime`` Python loggers off, and Python
    warnings ignored. Errors still raise as exceptions; the caller reports them."""
    import onnxruntime as ort

    py_logger = logging.getLogger("onnxruntime")
    old_level = py_logger.level
    ort.set_default_logger_severity(4)
    py_logger.setLevel(logging.CRITICAL + 1)  # children without their own level inherit it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        ort.set_default_logger_severity(ORT_DEFAULT_SEVERITY)
        py_logger.setLevel(old_level)

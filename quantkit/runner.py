"""Compatibility names for the runtime plug-ins (:mod:`quantkit.runtimes`).

``OrtRunner`` is :class:`quantkit.runtimes.ort.OrtRuntime` (same arguments: ``model``, ``providers``,
``graph_optimization_level``, ``intra_op_num_threads``, ``name``), ``Runner`` the plug-in base class and
``with_outputs`` the output-marking helper. New code should use :func:`quantkit.runtimes.make_runtime`.
"""

from __future__ import annotations

from .runtimes.base import Runtime as Runner
from .runtimes.base import with_outputs
from .runtimes.ort import OrtRuntime as OrtRunner

__all__ = ["OrtRunner", "Runner", "with_outputs"]

"""Inference runtimes as plug-ins behind one small interface (:class:`Runtime`).

Built in:

* ``onnxruntime`` (:class:`~quantkit.runtimes.ort.OrtRuntime`): CPU execution provider (or any installed
  EP), each graph optimization level (``disable`` = the QDQ simulation, ``all`` = deployment), explicit
  intra-op threads.
* ``openvino`` (:class:`~quantkit.runtimes.openvino.OpenVinoRuntime`): CPU device, inference precision
  pinned to f32 (recorded). Optional: ``pip install "quantkit[openvino]"``.

Use::

    from quantkit.runtimes import available_runtimes, make_runtime
    for name in available_runtimes():
        with make_runtime(name, "model_int8.onnx") as rt:
            out = rt.infer({"x": x})
            print(rt.info().label, rt.node_precisions({"x": x})[:3])

**Adding a runtime** (TensorRT, a vendor NPU SDK): subclass :class:`Runtime` in a module that alone imports
the runtime's Python package; implement ``activate_impl`` (load + compile; raise
:class:`quantkit.errors.ModelError` with the runtime's reason), ``deactivate_impl``, ``infer_impl``,
``input_names_impl``, ``output_names_impl``, ``info_impl`` (name, version, device, inference precision and
every option that changes numbers), the class methods ``version`` and ``is_available``, and where the runtime
can tell: ``node_precisions_impl`` (per executed node: type, precision, ONNX nodes covered) and
``probe_support`` (load + run, naming refused nodes). Then register it, either in code
(``register_runtime("tensorrt", "my_pkg.trt:TensorRTRuntime")``) or from an installed package through the
entry point group ``quantkit.runtimes`` (``tensorrt = "my_pkg.trt:TensorRTRuntime"`` in its
``pyproject.toml``). ``quantkit verify --runtime tensorrt``, ``quantkit doctor`` and the pattern suite then
use it like the built-in ones.
"""

from __future__ import annotations

import importlib
import logging
from importlib import metadata
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from .base import (
    INTEGER_PRECISIONS,
    NodeIssue,
    NodePrecision,
    Runtime,
    RuntimeInfo,
    SupportProbe,
    onnx_node_names,
    with_outputs,
)

log = logging.getLogger(__name__)

_REGISTRY: dict[str, str] = {
    "onnxruntime": "quantkit.runtimes.ort:OrtRuntime",
    "openvino": "quantkit.runtimes.openvino:OpenVinoRuntime",
}
ALIASES = {"ort": "onnxruntime", "ov": "openvino"}
ENTRY_POINT_GROUP = "quantkit.runtimes"
_entry_points_loaded = False


def register_runtime(name: str, target: str | type[Runtime]) -> None:
    """Register a runtime plug-in under ``name``: a :class:`Runtime` subclass or ``"module:Class"`` (imported lazily)."""
    _REGISTRY[name] = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        _REGISTRY.setdefault(ep.name, ep.value)


def registered_runtimes() -> list[str]:
    """Every registered runtime name, installed or not."""
    _load_entry_points()
    return sorted(_REGISTRY)


def runtime_class(name: str) -> type[Runtime]:
    """The plug-in class registered under ``name`` (aliases ``ort``, ``ov``).

    Raises:
        ConfigError: no runtime of that name is registered.
    """
    _load_entry_points()
    key = ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise ConfigError(f"runtime {name!r} is not registered; use one of {', '.join(registered_runtimes())} "
                          "(or register a plug-in: see quantkit.runtimes)")
    module, _, attr = _REGISTRY[key].partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


DEPLOYMENT_OPTIONS: dict[str, dict[str, Any]] = {"onnxruntime": {"graph_optimization_level": "all"}, "openvino": {"inference_precision": "f32"}}
"""Each runtime's options as the device runs it: ORT with every graph optimization (QDQ fused into integer
kernels); OpenVINO with the CPU plugin's inference precision pinned to f32 (it picks bf16 by itself on CPUs that
have it, which is not what an INT8 model's float parts compute elsewhere)."""


def deployment_options(runtime: str, threads: int = 0) -> dict[str, Any]:
    """:data:`DEPLOYMENT_OPTIONS` of ``runtime`` as :func:`make_runtime` keyword arguments, with ``threads``
    intra-op threads when non-zero (0 = the runtime's default)."""
    opts = dict(DEPLOYMENT_OPTIONS.get(runtime, {}))
    if threads:
        opts["intra_op_num_threads" if runtime == "onnxruntime" else "num_threads"] = threads
    return opts


def available_runtimes() -> list[str]:
    """Registered runtimes whose Python package is installed here, in registry order."""
    out = []
    for name in registered_runtimes():
        try:
            if runtime_class(name).is_available():
                out.append(name)
        except ImportError as e:  # a third-party plug-in module that cannot import
            log.info("runtime %s unavailable: %s", name, e)
    order = list(_REGISTRY)
    return sorted(out, key=order.index)


def make_runtime(name: str, model: Any, /, **options: Any) -> Runtime:
    """A runtime ``name`` over ``model`` (path, bytes or ``onnx.ModelProto``), not yet activated.

    ``options`` are the plug-in's keyword arguments (``graph_optimization_level``, ``intra_op_num_threads``,
    ``providers`` for onnxruntime; ``device``, ``inference_precision``, ``num_threads`` for openvino;
    ``outputs`` and ``name`` for all).

    Raises:
        ConfigError: unknown runtime, an option the plug-in does not take, or the runtime's package is not
            installed (the message says what to install).
    """
    cls = runtime_class(name)
    if not cls.is_available():
        extra = {"openvino": ' (pip install "quantkit[openvino]")'}.get(cls.NAME, "")
        raise ConfigError(f"runtime {name!r}: its Python package is not installed here{extra}")
    try:
        return cls(model, **options)
    except TypeError as e:
        raise ConfigError(f"runtime {name!r}: {e}") from None


def resolve_runtime_names(names: Sequence[str], *, keep_unknown: bool = False) -> tuple[str, ...]:
    """``names`` with ``all`` expanded to the installed runtimes (registry order) and aliases resolved, without repeats.

    Args:
        keep_unknown: keep a name no plug-in is registered for (a target verified elsewhere, such as ``tensorrt``,
            or a typo), logged with the registered names, instead of raising; the caller records it as not installed.

    Raises:
        ConfigError: a name no plug-in is registered for (without ``keep_unknown``).
    """
    out: list[str] = []
    for n in names:
        if n == "all":
            out.extend(available_runtimes())
            continue
        try:
            out.append(runtime_class(n).NAME)
        except ConfigError:
            if not keep_unknown:
                raise
            log.warning("no runtime plug-in named %r (registered: %s); recorded as not installed", n, ", ".join(registered_runtimes()))
            out.append(n)
    return tuple(dict.fromkeys(out))


def runtime_versions() -> dict[str, str]:
    """``{runtime: version}`` of every installed runtime."""
    return {n: runtime_class(n).version() for n in available_runtimes()}


__all__ = [
    "ALIASES", "DEPLOYMENT_OPTIONS", "INTEGER_PRECISIONS", "NodeIssue", "NodePrecision", "Runtime", "RuntimeInfo", "SupportProbe",
    "available_runtimes", "deployment_options", "make_runtime", "onnx_node_names", "register_runtime", "registered_runtimes",
    "resolve_runtime_names", "runtime_class",
    "runtime_versions", "with_outputs",
]

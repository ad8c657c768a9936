"""The one module that calls ``torch.onnx.export``: the arguments quantkit passes, the call itself (its stdout
and warnings kept out of the user's terminal), and, when an operator cannot be exported, the submodule that holds it.

Exporter: ``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter); the dynamo exporter needs
``onnxscript``, which quantkit does not depend on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import TorchExportConfig
from .._io import scratch_dir

log = logging.getLogger(__name__)

EXPORTER = "torch.onnx.export (TorchScript exporter, dynamo=False)"


def first_line(e: BaseException) -> str:
    t = str(e).strip()
    return t.splitlines()[0] if t else type(e).__name__


@contextlib.contextmanager
def _stdout_to_log() -> Iterator[None]:
    """Route file descriptor 1 to the debug log while exporting.

    torch 2.13's TorchScript exporter enables its C++ ONNX log unconditionally (``setup_onnx_logging``
    tests the function object ``_jit_is_onnx_log_enabled`` instead of calling it) and so writes "Torch IR
    graph at exception" to stdout; a library must not print.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace").strip()
            if text:
                log.debug("torch.onnx.export output:\n%s", text)


def export_kwargs(config: TorchExportConfig, *, preserve: bool = False) -> dict[str, Any]:
    """The keyword arguments quantkit passes to ``torch.onnx.export`` (``preserve``: the localisation graph)."""
    kw: dict[str, Any] = {"dynamo": False, "opset_version": config.opset, "input_names": [config.preprocessing.input_name],
                          "output_names": list(config.output_names) or None, "do_constant_folding": True}
    if preserve:
        import torch

        kw["training"] = torch.onnx.TrainingMode.PRESERVE
        kw["do_constant_folding"] = False  # folding in a training-amenable mode draws a warning, and changes nothing here
    return kw


def export_bytes(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, tuple[str, ...]]:
    """``torch.onnx.export(module, args, <temp file>, **kwargs)`` with its stdout routed to the log.

    Returns the model bytes and the first line of each distinct warning the exporter gave (its deprecation
    notices for ``dynamo=False`` left out: that choice is deliberate, see the module docstring).
    """
    import torch

    with scratch_dir("export") as d, _stdout_to_log(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = Path(d) / "model.onnx"
        torch.onnx.export(module, args, path, **kwargs)
        data = path.read_bytes()
    notes: list[str] = []
    for w in caught:
        text = first_line(w.message) if isinstance(w.message, BaseException) else str(w.message).strip().splitlines()[0]
        if issubclass(w.category, DeprecationWarning) or "legacy TorchScript-based ONNX export" in text or text in notes:
            continue
        notes.append(text)
    return data, tuple(notes)


def _parents(names: list[str]) -> dict[str, str]:
    """Each name's nearest proper ancestor among ``names`` (``''`` when none)."""
    have = set(names)
    out = {}
    for n in names:
        parts = n.split(".")
        out[n] = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in have), "")
    return out


def failing_submodule(module: Any, x: Any, kwargs: dict[str, Any], error: BaseException) -> str | None:
    """``'name (Class)'`` of the deepest submodule that fails to export on its own with the same operator as
    ``error``; ``None`` when none reproduces it (or the module runs no hooks).

    Every submodule's inputs are captured with forward pre-hooks on one run; then, from the top, each called
    child of the current module is exported alone (with its captured inputs) and the search descends into the
    first child that fails with the same operator, so only the children along one path are exported.
    """
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        return None
    captured: dict[str, tuple[Any, ...]] = {}
    handles = [sub.register_forward_pre_hook(lambda m, args, _n=name: captured.setdefault(_n, args)) for name, sub in module.named_modules() if name]
    try:
        with torch.no_grad():
            module(x)
    except Exception:  # noqa: BLE001 - the module itself fails on x: nothing to localise
        return None
    finally:
        for h in handles:
            h.remove()
    op = re.search(r"'(\w+::\w+)'", str(error))
    subs = dict(module.named_modules())
    alone = {k: v for k, v in kwargs.items() if k not in ("input_names", "output_names")}
    parents = _parents(list(captured))

    def fails(name: str) -> bool:
        try:
            export_bytes(subs[name], captured[name], alone)
        except Exception as e:  # noqa: BLE001 - exporter errors vary by operator
            return op is None or op.group(1) in str(e)
        return False

    current = ""
    while True:
        child = next((n for n in captured if parents[n] == current and fails(n)), None)
        if child is None:
            break
        current = child
    return f"{current} ({type(subs[current]).__name__})" if current else None


def flatten_outputs(value: Any) -> list[Any]:
    """A module's tensors in the order the TorchScript exporter makes them graph outputs (tuples, lists and
    dict values, depth first; non-tensors dropped)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten_outputs(v)]
    return []

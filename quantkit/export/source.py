"""Resolve ``quantkit export``'s MODULE argument to a ``torch.nn.Module`` in eval mode.

MODULE is one of:

* ``package.module:factory``: imported with the working folder first on ``sys.path`` (as ``python -m`` and
  uvicorn do); ``factory(**export.factory_kwargs)`` must return a ``torch.nn.Module``. It runs inside
  ``torch.random.fork_rng()`` seeded with ``export.seed``, so random weights are the same every run and
  the caller's RNG state is untouched;
* ``path/to/file.py:factory``: the same, from a source file;
* a TorchScript archive (``torch.jit.save``; any suffix but ``.pt2``), read with ``torch.jit.load``;
* a ``torch.export`` archive (``.pt2``, ``torch.export.save``), read with ``torch.export.load`` and
  ``torch.export.unflatten`` (which restores the submodule hierarchy, so layers keep their names).

quantkit does not unpickle whole models (``torch.save(model)``): save them with one of the above.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from .._io import sha256_file
from ..errors import ConfigError, InputFileError, ModelError

log = logging.getLogger(__name__)

SourceKind = Literal["factory", "module", "torchscript", "torch.export"]
"""``module``: a ``torch.nn.Module`` object handed to the Python API."""

_ATTR = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
FORMS = "'package.module:factory', 'path/file.py:factory', a TorchScript file (torch.jit.save) or a torch.export file (.pt2)"


@dataclasses.dataclass(frozen=True)
class TorchSource:
    """A loaded MODULE. ``sha256`` is the digest of the file it came from (the archive, or the factory's
    source file; empty when the factory has no source file); ``hookable`` is False for TorchScript modules,
    which do not run forward hooks (so layer-by-layer localisation is not available for them)."""

    spec: str
    kind: SourceKind
    module: Any
    sha256: str
    factory_kwargs: dict[str, Any]

    @property
    def name(self) -> str:
        return Path(self.spec).name if self.kind in ("torchscript", "torch.export") else type(self.module).__name__

    @property
    def hookable(self) -> bool:
        import torch

        return not isinstance(self.module, torch.jit.ScriptModule)


def import_torch() -> Any:
    """Import torch or raise a one-line :class:`ConfigError` saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ConfigError("quantkit export needs PyTorch, which is not installed; pip install 'quantkit[export]' (torch==2.13.0)") from None
    return torch


def _first_line(e: BaseException) -> str:
    t = str(e).strip()
    return t.splitlines()[0] if t else type(e).__name__


@contextlib.contextmanager
def _on_path(folder: Path) -> Iterator[None]:
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _import(target: str, spec: str) -> Any:
    """Import ``package.module`` (working folder first on sys.path) or a ``.py`` file."""
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise InputFileError(f"{spec}: {target} not found; check the path")
        name = "quantkit_export_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise InputFileError(f"{spec}: {target} cannot be imported as Python source")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module  # dataclasses and typing look modules up by name
        try:
            with _on_path(path.resolve().parent):
                loader_spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - user code: any error is reported in one line
            sys.modules.pop(name, None)
            log.debug("importing %s failed", target, exc_info=True)
            raise ModelError(f"{spec}: importing {target} raised {type(e).__name__}: {_first_line(e)}; fix the file") from None
        return module
    try:
        with _on_path(Path.cwd()):
            return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name and (target == e.name or target.startswith(e.name + ".")):
            raise InputFileError(f"{spec}: no module named {e.name!r}; run from the folder that holds it, install its package, "
                                 f"or give a file: path/to/file.py:factory") from None
        log.debug("importing %s failed", target, exc_info=True)
        raise ModelError(f"{spec}: importing {target} raised ModuleNotFoundError: {_first_line(e)}; install what it imports") from None
    except Exception as e:  # noqa: BLE001 - user code
        log.debug("importing %s failed", target, exc_info=True)
        raise ModelError(f"{spec}: importing {target} raised {type(e).__name__}: {_first_line(e)}; fix the module") from None


def _from_factory(spec: str, kwargs: dict[str, Any], seed: int) -> TorchSource:
    torch = import_torch()
    target, _, attr = spec.rpartition(":")
    if not target or not _ATTR.match(attr):
        raise ConfigError(f"MODULE {spec!r}: expected {FORMS}")
    module = _import(target, spec)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{spec}: {target} has no attribute {attr!r}; check the factory's name")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{spec}: {attr} is a {type(obj).__name__}, not a callable factory")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            built = obj(**kwargs)
    except Exception as e:  # noqa: BLE001 - user code
        log.debug("factory %s failed", spec, exc_info=True)
        raise ModelError(f"{spec}: the factory raised {type(e).__name__}: {_first_line(e)}; fix it or export.factory_kwargs") from None
    if not isinstance(built, torch.nn.Module):
        raise ModelError(f"{spec}: the factory returned a {type(built).__name__}, not a torch.nn.Module; return the model itself")
    try:
        src = inspect.getsourcefile(obj) or ""
    except TypeError:
        src = ""
    return TorchSource(spec, "factory", built, sha256_file(src) if src and os.path.isfile(src) else "", dict(kwargs))


def _from_file(spec: str) -> TorchSource:
    torch = import_torch()
    path = Path(spec)
    digest = sha256_file(path)
    try:
        if path.suffix == ".pt2":
            with warnings.catch_warnings():  # torch 2.13's loader warns about its own pytree internals
                warnings.simplefilter("ignore", FutureWarning)
                module = torch.export.unflatten(torch.export.load(str(path)))
            kind: SourceKind = "torch.export"
        else:
            with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; reading it is still supported
                warnings.simplefilter("ignore", DeprecationWarning)
                module = torch.jit.load(str(path), map_location="cpu")
            kind = "torchscript"
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError/ValueError/zip errors for foreign files
        what = "torch.export (torch.export.save)" if path.suffix == ".pt2" else "TorchScript (torch.jit.save)"
        raise ModelError(f"{spec}: not a {what} archive ({_first_line(e)}); save the model with torch.jit.save or "
                         f"torch.export.save (.pt2), or pass a factory 'package.module:function'") from None
    return TorchSource(spec, kind, module, digest, {})


def load_source(spec: str, factory_kwargs: dict[str, Any] | None = None, *, seed: int = 0) -> TorchSource:
    """Load MODULE ``spec`` (see the module docstring) and put it in eval mode.

    Raises:
        ConfigError: torch is missing, ``spec`` has none of the accepted forms, the factory does not exist,
            or ``factory_kwargs`` are given for a file.
        InputFileError: the module, ``.py`` file or archive is not found.
        ModelError: importing or calling the factory raised, it returned something other than a
            ``torch.nn.Module``, or the file is not a TorchScript / ``torch.export`` archive.
    """
    kwargs = dict(factory_kwargs or {})
    path = Path(spec)
    if path.is_file() and path.suffix != ".py":
        if kwargs:
            raise ConfigError(f"{spec}: export.factory_kwargs apply to a factory, not to a saved model; remove them")
        source = _from_file(spec)
    elif ":" in spec:
        source = _from_factory(spec, kwargs, seed)
    elif path.is_file():
        raise ConfigError(f"MODULE {spec!r}: a Python file needs the factory's name: {spec}:function")
    elif path.suffix in (".pt", ".pth", ".pt2", ".py", ".ts") or os.sep in spec:
        raise InputFileError(f"{spec}: file not found; check the path")
    else:
        raise ConfigError(f"MODULE {spec!r}: expected {FORMS}")
    source.module.eval()
    return source


def weights_digest(module: Any) -> str:
    """SHA-256 over ``module.state_dict()``: for each entry in order, its name, dtype, shape and raw bytes."""
    torch = import_torch()
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()

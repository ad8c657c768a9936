"""The task adapter registry: built-in adapters and user plug-ins (entry point group ``quantkit.tasks``).

Each built-in adapter registers itself here when its module is defined; the package (:mod:`quantkit.tasks`, run
before any of its modules) imports them all (:mod:`.builtin`), so every lookup finds them."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import ConfigError
from .base import TaskAdapter

log = logging.getLogger(__name__)

T = TypeVar("T", bound=TaskAdapter)

ADAPTERS: dict[str, type[TaskAdapter]] = {}
ENTRY_POINT_GROUP = "quantkit.tasks"
"""Entry-point group for user adapters: ``[project.entry-points."quantkit.tasks"] my_task = "pkg.mod:MyAdapter"``."""


def register_adapter(cls: type[T]) -> type[T]:
    """Class decorator: make ``cls`` available as ``task.adapter: <cls.name>``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} must set a class attribute 'name'")
    if not cls.AGREEMENT:
        raise TypeError(f"{cls.__name__} must declare at least one AGREEMENT metric (the primary one first)")
    ADAPTERS[cls.name] = cls
    return cls


def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in ADAPTERS:
            continue
        try:
            cls = ep.load()
        except Exception as e:  # a broken plug-in must not break the built-in tasks
            log.warning("task adapter entry point %r (%s) failed to load: %s", ep.name, ep.value, e)
            continue
        if not (isinstance(cls, type) and issubclass(cls, TaskAdapter)):
            log.warning("task adapter entry point %r (%s) is not a TaskAdapter subclass; ignored", ep.name, ep.value)
            continue
        ADAPTERS.setdefault(ep.name, cls)


def adapter_class(name: str) -> type[TaskAdapter]:
    """The registered adapter class ``name`` (built-in, or from the ``quantkit.tasks`` entry points).

    Raises:
        ConfigError: no such adapter (names the registered ones).
    """
    if name not in ADAPTERS:
        _load_entry_points()
    if name not in ADAPTERS:
        raise ConfigError(f"task.adapter: {name!r} is not registered; use one of {', '.join(sorted(ADAPTERS))} "
                          f"or register your own (entry point group {ENTRY_POINT_GROUP!r})")
    return ADAPTERS[name]


def label_keys() -> set[str]:
    """The ``labels`` keys some registered task reads as ground truth (``boxes``, ``class``, ``text``, ...)."""
    _load_entry_points()
    return {cls.LABELS for cls in ADAPTERS.values() if cls.LABELS}


def make_adapter(name: str, options: Mapping[str, Any] | None = None) -> TaskAdapter:
    """Build a registered adapter from its name and options (strict: unknown options raise ConfigError)."""
    return adapter_class(name).from_dict(dict(options or {}), where=f"task.options ({name})")

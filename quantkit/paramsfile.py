"""Edits to a DVC ``params.yaml`` that keep the user's file as it is: comments, key order, flow lists, quoting.

Read and written round-trip with ruamel.yaml (the YAML library DVC itself reads params with), written atomically
(a temporary file renamed over the original), and checked with the same key check every command applies
(:func:`quantkit.config._check_keys`) before anything is written.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._io import atomic_write_text
from .errors import ConfigError, InputFileError


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap the user's long lines
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def _node(value: Any) -> Any:
    """``value`` as ruamel round-trip nodes: lists and mappings of at most 4 scalars in flow style (``[640, 640]``,
    ``{layout: rows}``), other mappings in block style."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, Mapping):
        m = CommentedMap()
        for k, v in value.items():
            m[k] = _node(v)
        if len(value) <= 4 and not any(isinstance(v, (Mapping, list, tuple)) for v in value.values()):
            m.fa.set_flow_style()  # a few scalars (task options) on one line, as the demo's params write them
        return m
    if isinstance(value, (list, tuple)):
        s = CommentedSeq(_node(v) for v in value)
        s.fa.set_flow_style()
        return s
    return value


def model_names(params_path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Names under ``models`` in the params file (empty when the file or the section is absent).

    Raises:
        InputFileError: the file is not YAML.
    """
    data = _load(Path(params_path))[1]
    models = data.get("models") if isinstance(data, Mapping) else None
    return tuple(str(k) for k in models) if isinstance(models, Mapping) else ()


def _load(p: Path) -> tuple[Any, Any]:
    y = _yaml()
    if not p.exists():
        return y, None
    try:
        return y, y.load(p.read_text(encoding="utf-8"))
    except Exception as e:  # noqa: BLE001  (ruamel's parser and scanner errors share no public base)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputFileError(f"{p}: not valid YAML ({first}); fix the syntax") from None


def set_model_entry(params_path: str | os.PathLike[str], name: str, entry: Mapping[str, Any], *, force: bool = False) -> Path:
    """Write ``models.<name>: entry`` into the params file, creating the file or the ``models`` section if absent.

    Everything else in the file keeps its bytes' meaning and its comments; an existing entry of that name is
    replaced in place (its comments go with it) only with ``force``.

    Raises:
        ConfigError: ``models.<name>`` exists and ``force`` is False; ``models`` is not a mapping; the result
            fails the params key check (naming the key).
        InputFileError: the file is not YAML.
    """
    from ruamel.yaml.comments import CommentedMap

    from .config import _check_keys

    p = Path(params_path)
    y, data = _load(p)
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        raise ConfigError(f"{p}: the top level is not a mapping; a params file maps section names to their options")
    models = data.get("models")
    if models is None:
        data["models"] = models = CommentedMap()
    if not isinstance(models, CommentedMap):
        raise ConfigError(f"{p}: models is not a mapping of model names to entries; fix it first")
    if name in models and not force:
        raise ConfigError(f"{p}: models.{name} already exists; pick another name, or pass --force to replace it")
    models[name] = _node(entry)
    _check_keys(p, _plain(data))
    buf = io.StringIO()
    y.dump(data, buf)
    atomic_write_text(p, buf.getvalue())
    return p


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    return node

"""Typed, frozen configs with strict round-tripping (habit 2 of STYLE.md).

A config is a ``@dataclass(frozen=True)`` subclass of :class:`Config`. ``from_dict`` rejects unknown
keys (naming the field and listing the valid ones), checks types (``bool``, ``int``, ``float``, ``str``,
``Literal``, ``Optional``, ``tuple[...]``, ``dict[str, ...]`` and nested configs), then calls the
subclass's ``validate`` hook. ``to_dict`` is the exact inverse. The DVC ``params.yaml`` sections are
these dicts, so a stage is reproducible from its params alone.

What YAML users write is read as meant where that is unambiguous. PyYAML follows YAML 1.1, which reads
unquoted ``yes/no/on/off/true/false`` as booleans and ``1e-4`` (no dot) as text; YAML 1.2 readers (DVC's
ruamel) keep ``yes``/``off`` as text. So: a ``Literal`` field given a boolean takes the one choice spelled
as that boolean (``note_check: off`` -> ``"off"``); a ``bool`` field accepts those spellings as text; a
``float`` field accepts a numeric string. An ``int``, ``float`` or ``str`` field given a boolean is refused
saying it was read as a boolean and why; a ``str`` field given a number says to quote it.

A config built directly in Python (``StaticQuantConfig(per_channel="no")``) is checked the same way when it is
constructed, with the same messages but none of the YAML readings: a Python caller's ``"no"`` is a mistake,
not a boolean (:meth:`Config._check_types`). Non-finite floats are refused on both paths (JSON has none).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import math
import numbers
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from ._io import fingerprint
from .errors import ConfigError, InputFileError
from .sections import check_keys as _check_keys

C = TypeVar("C", bound="Config")
log = logging.getLogger(__name__)


_YAML_BOOLS = {"true": True, "yes": True, "on": True, "y": True, "false": False, "no": False, "off": False, "n": False}
"""YAML 1.1 boolean spellings (yaml.org/type/bool.html), lower-cased; PyYAML reads these (any case) as booleans."""
_BOOL_WHY = "YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans"
_EXPECTED = {int: "an integer", float: "a number", str: "a string"}
_FIELD_MESSAGE = re.compile(r"[A-Za-z_][\w.\[\]]*: ")
_COERCED: contextvars.ContextVar[type | None] = contextvars.ContextVar("quantkit_config_coerced", default=None)
"""The class :meth:`Config.from_dict` is building from values ``_coerce`` has just checked (None otherwise)."""
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _is_number(value: Any) -> bool:
    return isinstance(value, str) and _NUMBER.fullmatch(value.strip()) is not None


def _literal_from_bool(value: bool, choices: tuple[Any, ...], where: str) -> Any:
    """The one string choice that a YAML 1.1 boolean was spelled as (``note_check: off`` -> ``"off"``), else refuse."""
    spellings = {k for k, v in _YAML_BOOLS.items() if v is value}
    matches = [c for c in choices if isinstance(c, str) and c.lower() in spellings]
    if len(matches) == 1:
        return matches[0]
    raise ConfigError(f"{where}: read as the boolean {str(value).lower()} ({_BOOL_WHY}); write one of {', '.join(map(repr, choices))}"
                      + (" in quotes" if any(isinstance(c, str) for c in choices) else ""))


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


@functools.lru_cache(maxsize=None)
def _schema(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """``(resolved type hints, {name: field})`` of a config class, once per class (``get_type_hints`` re-evaluates
    every annotation string: 0.5 s of loading a calibration record of ~700 tensors)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, where: str, strict: bool = False) -> Any:
    """``value`` as field type ``tp`` (``where`` names the field in messages), or raise :class:`ConfigError`.

    ``strict=False`` reads what a params file holds (YAML spellings, see the module docstring). ``strict=True``
    checks what Python code passed to a constructor: the same checks and messages, but no YAML reading (``"no"``
    is not a boolean, ``"1e-4"`` not a number); a list becomes a tuple, an int in a float field a float, and
    numpy scalars are accepted as they are. A type this function does not know is left unchecked then.
    """
    if tp is float and type(value) is float and math.isfinite(value):  # the common case first: a record holds ~1e5 floats
        return value
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        choices = get_args(tp)
        if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices) and not strict:
            return _literal_from_bool(value, choices, where)
        try:
            known = value in choices and isinstance(value, bool) == isinstance(choices[choices.index(value)], bool)
        except (TypeError, ValueError):  # an array or other value that does not compare to a choice
            known = False
        if not known:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, choices))}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{where}: must be set (got {'None' if strict else 'null'})")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where, strict)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {tp}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]", strict) for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} values, got {len(value)}")
        return tuple(_coerce(v, a, f"{where}[{i}]", strict) for i, (a, v) in enumerate(zip(args, value)))
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        (et,) = get_args(tp) or (Any,)
        return [_coerce(v, et, f"{where}[{i}]", strict) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        kt, vt = get_args(tp) or (str, Any)
        return {_coerce(k, kt, f"{where} key", strict): _coerce(v, vt, f"{where}.{k}", strict) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Config):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}" + (f" (pass a {tp.__name__})" if strict else ""))
        return tp.from_dict(value, where=where)
    if tp is bool:
        if strict and getattr(value, "ndim", None) == 0 and getattr(getattr(value, "dtype", None), "kind", "") == "b":  # numpy's boolean
            return value
        if isinstance(value, str) and value.lower() in _YAML_BOOLS and not strict:
            return _YAML_BOOLS[value.lower()]  # YAML 1.2 readers (ruamel, DVC's -S) keep yes/on/off as text
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected {'True or False' if strict else 'true or false'}, got {value!r}")
        return value
    if isinstance(value, bool):  # an int, float or str field given a boolean (from YAML 1.1: yes/no/on/off)
        if strict:
            raise ConfigError(f"{where}: expected {_EXPECTED.get(tp, _type_name(tp))}, got {value!r}")
        raise ConfigError(f"{where}: read as the boolean {str(value).lower()} ({_BOOL_WHY}); expected {_EXPECTED.get(tp, _type_name(tp))}"
                          + ("; quote the value" if tp is str else ""))
    if tp is int:
        if strict and isinstance(value, numbers.Integral):  # numpy integers too
            return value
        if not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}" + ("; write it without quotes" if _is_number(value) else ""))
        return value
    if tp is float:
        if isinstance(value, str) and _is_number(value) and not strict:
            value = float(value)  # PyYAML (YAML 1.1) reads 1e-4 (no dot) as text
        if not isinstance(value, numbers.Real):
            raise ConfigError(f"{where}: expected a number, got {value!r}" + ("; write it without quotes" if strict and _is_number(value) else ""))
        if not math.isfinite(value):  # JSON (artifacts, config hashes) has no inf or nan
            raise ConfigError(f"{where}: {value} is not a finite number; give a finite value")
        return float(value) if type(value) is int or not strict else value
    if tp is str:
        if strict and isinstance(value, os.PathLike):
            return os.fspath(value)
        if not isinstance(value, str):
            if strict:
                raise ConfigError(f"{where}: expected a string, got {value!r} (a {type(value).__name__})")
            raise ConfigError(f"{where}: expected a string, got {value!r} (read as a {type(value).__name__}); quote the value")
        return value
    if strict:
        return value  # a type the params reader does not know (a config never read from params.yaml): left unchecked
    raise TypeError(f"config field type {_type_name(tp)} at {where} is not supported")  # a bug, not user error


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Config:
    """Base of every quantkit config. Subclasses are frozen dataclasses with typed fields.

    ``SCHEMA_VERSION`` is bumped whenever a field's meaning changes; it is written by ``to_dict`` as
    ``schema_version`` and checked by ``from_dict``.
    """

    SCHEMA_VERSION: ClassVar[int] = 1
    VERSIONED: ClassVar[bool] = True
    """False for value types nested inside a versioned artifact (e.g. one row of a table): no ``schema_version`` key."""
    PARAMS_OPTIONAL: ClassVar[bool] = False
    """True for tuning sections whose defaults are a sound choice (drift, report, bundle, verify): a params file
    without the section reads as the defaults (logged). False where a default would be a silent assumption about
    the user's model (intake, task): the section must be written."""

    def __post_init__(self) -> None:
        coerced, cls = _COERCED.get(), type(self)
        if coerced is not None:
            _COERCED.set(None)  # only this object is from_dict's: configs its validate() builds are checked
        if coerced is not cls:
            self._check_types()
        self.validate()

    def _check_types(self) -> None:
        """Check every field against its annotation, as :meth:`from_dict` does (same messages, no YAML spellings:
        ``per_channel="no"`` is refused, not read as false); a list given for a tuple field becomes a tuple, an int
        given for a float field a float.

        Raises:
            ConfigError: ``Class.field: ...`` naming the field, the value and what it expects.
        """
        hints, fields = _schema(type(self))
        where = type(self).__name__
        for name in fields:
            value = getattr(self, name)
            checked = _coerce(value, hints[name], f"{where}.{name}", strict=True)
            if checked is not value:
                object.__setattr__(self, name, checked)

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the field when a value is out of range. Default: no-op."""

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON/YAML-ready dict; ``from_dict(to_dict())`` gives an equal config."""
        out = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        if self.VERSIONED:
            out["schema_version"] = self.SCHEMA_VERSION
        return out

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any], *, where: str | None = None) -> C:
        """Build from a dict, strictly. Missing keys take the field default.

        Raises:
            ConfigError: unknown key, wrong type, value out of range or schema version mismatch.
        """
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        data = dict(data)
        version = data.pop("schema_version", cls.SCHEMA_VERSION) if cls.VERSIONED else cls.SCHEMA_VERSION
        if version != cls.SCHEMA_VERSION:
            raise ConfigError(f"{where}.schema_version: {version} is not supported (expected {cls.SCHEMA_VERSION}); migrate the config")
        hints, fields = _schema(cls)
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ConfigError(f"{where}: unknown option {unknown[0]!r}; valid options are {', '.join(sorted(fields))}")
        kwargs = {}
        for name, value in data.items():
            kwargs[name] = _coerce(value, hints[name], f"{where}.{name}")
        missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{where}: required option {missing[0]!r} is missing")
        token = _COERCED.set(cls)  # every value was just checked: __post_init__ need not check the types again
        try:
            return cls(**kwargs)
        except ConfigError as e:  # validate() names only "field: ..."; say which section it is in
            msg, section = str(e), where.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
            msg = msg[len(section) + 1:] if msg.startswith(section + ".") else msg
            if not _FIELD_MESSAGE.match(msg) or msg.split(":", 1)[0].split(".", 1)[0] not in fields:
                raise
            raise type(e)(f"{where}.{msg}") from None
        finally:
            _COERCED.reset(token)

    def replace(self: C, **changes: Any) -> C:
        """Return a copy with ``changes`` applied and validated (strict, like ``from_dict``)."""
        return type(self).from_dict({**self.to_dict(), **{k: _plain(v) for k, v in changes.items()}})

    def config_hash(self) -> str:
        """SHA-256 fingerprint of ``to_dict()``; two configs with the same hash behave the same."""
        return fingerprint(self.to_dict())


def config_from_params(cls: type[C], path: str | Path | None, section: str, *, model: str | None = None) -> C:
    """Build config ``cls`` from ``section`` of the params file ``path`` (defaults when ``path`` is None).

    With ``model``, the section is :func:`section_for_model`'s: ``models.<model>.<section>`` merged key by key over
    the top-level ``section`` (nested mappings merged too), so a model's entry overrides only the keys it writes.
    ``section`` may be dotted (``bundle.verify``). Every error names the file: ``PATH:section.field: ...``.

    Raises:
        InputFileError: the params file is missing or not YAML.
        ConfigError: the section (or the model) is missing, or an option is unknown, mistyped or out of range.
    """
    if path is None:
        return cls()
    if cls.PARAMS_OPTIONAL and not has_section(path, section, model=model):
        _check_keys(Path(path), _read_params(Path(path)))  # a misspelt or misplaced key is named even where defaults apply
        log.info("%s: no %r section; using its defaults ('quantkit params %s' lists them)", path, section, section)
        return cls()
    data, where = section_for_model(path, section, model)
    try:
        try:
            return cls.from_dict(data, where=f"{path}:{where}")
        except ConfigError:
            top = _walk(_read_params(Path(path)), section)
            if where != section and isinstance(top, dict):  # merged: name the top-level section when the fault is there
                cls.from_dict(top, where=f"{path}:{section}")
            raise
    except ConfigError as e:
        msg = str(e)
        if msg.startswith(f"{path}:"):
            raise
        raise type(e)(f"{path}:{msg}") from None  # checks in validate() name only "section.field"


def merge_over(base: Any, override: Any) -> Any:
    """``override`` merged key by key over ``base``: mappings recursively, anything else (a list, a value) replaced
    whole. Neither argument is changed."""
    if not (isinstance(base, dict) and isinstance(override, dict)):
        return override
    return {**base, **{k: merge_over(base[k], v) if k in base else v for k, v in override.items()}}


def section_for_model(path: str | Path, section: str, model: str | None) -> tuple[dict[str, Any], str]:
    """``(data, where)``: the top-level ``section`` of the params file with ``models.<model>.<section>`` merged over it
    key by key (:func:`merge_over`); ``where`` names what was read (``quantize``, ``models.m.quantize``, or
    ``quantize + models.m.quantize``) for messages. This is the one resolver of per-model settings.

    Raises:
        InputFileError: the file is missing or not YAML.
        ConfigError: ``model`` is not under ``models``, or neither place has the section, or it is not a mapping.
    """
    p = Path(path)
    data = _read_params(p)
    _check_keys(p, data)
    top = _walk(data, section)
    own = None
    if model is not None:
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, dict) or model not in models:
            names = ", ".join(sorted(models)) if isinstance(models, dict) else ""
            raise ConfigError(f"{p}: model {model!r} is not under 'models' (it has {names or 'none'}); fix --model")
        own = _walk(models[model], section)
    for value, name in ((top, section), (own, f"models.{model}.{section}")):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{p}: section {name!r} must be a mapping")
    if top is None and own is None:
        raise ConfigError(f"{p}: section {section!r} is missing; add it ('quantkit params {section}' lists its keys and defaults)")
    return (dict(top), section) if own is None else (merge_over(top or {}, own), f"models.{model}.{section}")


def _read_params(p: Path) -> Any:
    """The parsed params file (``{}`` when empty).

    Raises:
        InputFileError: the file is missing or not YAML.
    """
    import yaml

    try:
        return yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise InputFileError(f"{p}: params file not found; pass --params PATH") from None
    except yaml.YAMLError as e:
        raise InputFileError(f"{p}: not valid YAML ({str(e).splitlines()[0]}); fix the syntax") from None


def load_params(path: str | Path, section: str) -> dict[str, Any]:
    """Read one top-level section of a YAML params file (DVC's ``params.yaml``).

    ``section`` may be dotted (``bundle.verify``).

    Raises:
        InputFileError: the file is missing or not YAML.
        ConfigError: the section is missing or not a mapping.
    """
    p = Path(path)
    data = _read_params(p)
    _check_keys(p, data)
    node: Any = data
    for part in section.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{p}: section {section!r} is missing; add it ('quantkit params {section}' lists its keys and defaults)")
        node = node[part]
    if not isinstance(node, dict):
        raise ConfigError(f"{p}: section {section!r} must be a mapping")
    return node


def has_section(path: str | Path | None, section: str, *, model: str | None = None) -> bool:
    """Whether the params file has ``section`` (or ``models.<model>.<section>``). False when ``path`` is None.

    Raises:
        InputFileError: the params file is missing or not YAML.
    """
    if path is None:
        return False
    p = Path(path)
    data = _read_params(p)
    models = data.get("models") if isinstance(data, dict) else None
    if model is not None and isinstance(models, dict) and _walk(models.get(model), section) is not None:
        return True
    return _walk(data, section) is not None


def _walk(node: Any, section: str) -> Any:
    """The value at dotted ``section`` of a parsed YAML mapping, or None."""
    for part in section.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


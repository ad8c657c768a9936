"""Which kind of quantkit file a JSON object is, so a loader handed the wrong file says what it got.

``CalibrationRecord.load("thresholds/minmax.json")`` should say "this is a threshold set", not complain about a
schema version. A typed file class is recognised by its fields (:func:`fits`): every
:class:`~quantkit.artifacts.base.Artifact` subclass registers itself here when it is defined, and so does the
export note (:func:`register_kind`; importing :mod:`quantkit.artifacts` defines them all). The JSON files
quantkit writes that are not typed classes (``intake.json``, an image set's ``manifest.json``, a bundle's
``bundle.json`` pointer and in-archive manifest) are recognised by keys their writers always put in them
(:data:`OTHER_FILES`). Only a match with exactly one kind names it; anything else is left to the loader's own
checks. This module sits below every file class, so that each of them can ask it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ._overwrite import a_kind
from .config import Config

OTHER_FILES: tuple[tuple[str, str, str, frozenset[str]], ...] = (
    ("intake report", "intake.json", "quantkit intake", frozenset({"fixed_input", "numeric_check", "export_note"})),
    ("image set manifest", "manifest.json", "quantkit calibset register", frozenset({"set_id", "images", "kind"})),
    ("bundle pointer", "bundle.json", "quantkit bundle", frozenset({"bundle", "sha256", "threshold_fingerprint"})),
    ("bundle manifest", "manifest.json inside a bundle", "quantkit bundle", frozenset({"format", "members"})),
)
"""``(kind, file name, the command that writes it, keys every such file has)`` for JSON files that are not
:class:`Artifact` classes (``IntakeResult.to_dict``, ``calibset.manifest._manifest_dict``, ``bundle.build``'s
pointer, ``BundleManifest.to_dict``)."""


_TYPED: dict[type[Config], tuple[str, str, str]] = {}
"""Typed file classes -> ``(kind, file name, the command that writes it)``, in the order they registered."""


def register_kind(cls: type[Config], kind: str, filename: str = "", writer: str = "") -> None:
    """Make ``cls`` (a :class:`~quantkit.config.Config` written as one JSON file) a kind :func:`describe` names."""
    _TYPED[cls] = (kind, filename, writer)


def _named(kind: str, filename: str, writer: str) -> str:
    origin = ", ".join(x for x in (filename, f"written by '{writer}'" if writer else "") if x)
    return a_kind(kind) + (f" ({origin})" if origin else "")


def only_fields(cls: type[Config], data: Mapping[str, Any]) -> bool:
    """Whether every key of ``data`` besides ``schema_version`` is a field of ``cls``."""
    return set(data) - {"schema_version"} <= {f.name for f in dataclasses.fields(cls)}


def fits(cls: type[Config], data: Mapping[str, Any]) -> bool:
    """Whether ``data`` has the fields of ``cls`` as written today: at least one key besides ``schema_version``,
    none that is not a field (:func:`only_fields`), and every field without a default."""
    keys = set(data) - {"schema_version"}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return bool(keys) and only_fields(cls, data) and required <= keys


def describe(data: Mapping[str, Any]) -> str | None:
    """What ``data`` is, e.g. ``"a threshold set (thresholds.json, written by 'quantkit bind')"``, when it fits exactly
    one known kind of file; else None."""
    found = [_named(*named) for c, named in list(_TYPED.items()) if fits(c, data)]
    found += [_named(kind, name, writer) for kind, name, writer, keys in OTHER_FILES if keys <= set(data)]
    return found[0] if len(found) == 1 else None


def other_kind(cls: type[Config], data: Mapping[str, Any]) -> str | None:
    """What ``data`` is when it is not a ``cls`` but another kind of quantkit file (:func:`describe`), else None
    (it fits ``cls``, or is no kind this module knows: an older schema version, a damaged file)."""
    if fits(cls, data):
        return None
    return describe(data)

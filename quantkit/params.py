"""The params reference: every ``params.yaml`` section, key, type, default and description, from the code.

:data:`SECTIONS` is the one registry ``section name -> config class`` (``"module:Class"``, imported only when
the reference is built, so registering costs nothing; kept in :mod:`quantkit.sections`, below the config loader that
checks section names against it). A new section is one line there, or, from a plug-in,
``register_section("my_section", "my_pkg.config:MyConfig")``. :func:`reference` walks each class's
dataclass fields (nested configs become their own subsections) and :func:`render_markdown` writes
``docs/params.md`` (``quantkit params --out docs/params.md``; a test fails when the page is stale).

Descriptions are read from the code, in this order: an attribute docstring (a string literal right after
the field), a ``name: text`` entry in the class docstring (``Attributes:``-style; ``a / b:`` and ``a, b:``
entries document several fields), a ````name```` clause in the class docstring's prose, and the same from
classes the docstring names as ``:class:`Other```. A field none of these describes shows an empty text.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from ._overwrite import FileKind, text_with
from .config import Config, _plain
from .errors import ConfigError
from .sections import NOT_CONFIG, SECTIONS, known_top_level  # noqa: F401 - the reference's own names for them

def register_section(name: str, target: str | type[Config]) -> None:
    """Register ``name`` (a ``params.yaml`` section) as read into ``target`` (a class or ``"module:Class"``)."""
    SECTIONS[name] = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


def config_class(section: str) -> type[Config]:
    """The config class registered for ``section``.

    Raises:
        ConfigError: no such section (the message lists the registered ones).
    """
    if section not in SECTIONS:
        raise ConfigError(f"params section {section!r} is not registered; known sections: {', '.join(sorted(SECTIONS))}")
    module, _, name = SECTIONS[section].partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One key of a section: ``type`` as written in YAML terms, ``default`` as YAML flow text (``required``
    when there is none), ``doc`` the description found in the code ('' if none)."""

    key: str
    type: str
    default: str
    doc: str


@dataclasses.dataclass(frozen=True)
class SectionDoc:
    """A section (``intake``) or subsection (``intake.preprocessing``, ``demo.sets.<name>``) and its keys."""

    section: str
    config: str
    summary: str
    keys: tuple[KeyDoc, ...]


def type_text(tp: Any) -> str:
    """A field type in YAML terms: ``int``, ``'a' | 'b'``, ``[int, int]``, ``[str, ...]``, ``{str: number}``, ``null``."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is type(None):
        return "null"
    if tp is float:
        return "number"
    if tp is Any:
        return "any"
    if isinstance(tp, type) and issubclass(tp, Config):
        return "mapping"
    if isinstance(tp, type):
        return tp.__name__
    if origin is Literal:
        return " | ".join(json.dumps(a) if not isinstance(a, str) else f"'{a}'" for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"[{type_text(args[0])}, ...]"
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    if origin is list:
        return f"[{type_text(args[0]) if args else 'any'}, ...]"
    if origin is dict:
        return "{" + (f"{type_text(args[0])}: {type_text(args[1])}" if args else "str: any") + "}"
    return str(tp).replace("typing.", "")


def _default_text(f: dataclasses.Field) -> str:  # type: ignore[type-arg]
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    plain = _plain(value)
    if isinstance(plain, dict) and isinstance(value, Config):
        return "(see below)"
    return json.dumps(plain, sort_keys=True, ensure_ascii=False)


_ENTRY = re.compile(r"^(\s*)([A-Za-z_][\w ,/()\-\[\].]*?):\s+(\S.*)$")


def _docstring_entries(doc: str, fields: set[str]) -> dict[str, str]:
    """``name: text`` entries (with more-indented continuation lines) naming one or more of ``fields``."""
    out: dict[str, str] = {}
    lines = textwrap.dedent(doc).splitlines()
    i = 0
    while i < len(lines):
        m = _ENTRY.match(lines[i])
        names = [n for n in re.findall(r"[A-Za-z_]\w*", re.sub(r"\([^)]*\)", "", m.group(2)))] if m else []
        if not m or not names or any(n not in fields for n in names):
            i += 1
            continue
        indent, text = len(m.group(1)), [m.group(3).strip()]
        i += 1
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
            text.append(lines[i].strip())
            i += 1
        for n in names:
            out.setdefault(n, " ".join(text))
    return out


def _prose_clauses(doc: str, fields: set[str]) -> dict[str, str]:
    """``\\`\\`name\\`\\` clause`` fragments of prose: the text after a field's name up to the next field's name."""
    prose = re.split(r"\n\s*(?:Attributes|Fields|Args|Parameters)\b[^\n]*:\s*\n", doc)[0]
    flat = " ".join(prose.split())
    marks = [(m.start(), m.end(), m.group(1)) for m in re.finditer(r"``(\w+)``", flat) if m.group(1) in fields]
    out: dict[str, str] = {}
    for k, (_, end, name) in enumerate(marks):
        stop = marks[k + 1][0] if k + 1 < len(marks) else len(flat)
        clause = re.split(r"\.\s", flat[end:stop])[0].strip(" ,;.")  # up to the next field, within the sentence
        clause = re.sub(r"\s*(,|;|\.)?\s*(and|or)?$", "", clause).strip()
        if len(clause.split()) >= 3 and len(clause) > len(out.get(name, "")):
            out[name] = clause
    return out


def _attribute_docstrings(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out = {}
    for st, nxt in zip(body, body[1:]):
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and isinstance(nxt, ast.Expr) \
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            out[st.target.id] = " ".join(nxt.value.value.split())
    return out


def field_docs(cls: type[Config], _seen: frozenset[type] = frozenset()) -> dict[str, str]:
    """Description of each field of ``cls`` found in the code (see the module docstring for the order)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    related: list[type] = []
    for klass in cls.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, Config)) or klass is Config:
            continue
        doc = inspect.getdoc(klass) or ""
        for source in (_attribute_docstrings(klass), _docstring_entries(doc, fields), _prose_clauses(doc, fields)):
            for k, v in source.items():
                docs.setdefault(k, v)
        module = sys.modules.get(klass.__module__)
        for name in re.findall(r":class:`~?\.?([\w.]+)`", doc):
            other = getattr(module, name.rsplit(".", 1)[-1], None)
            if isinstance(other, type) and issubclass(other, Config) and other not in _seen and other is not cls:
                related.append(other)
    for other in related:
        for k, v in field_docs(other, _seen | {cls}).items():
            if k in fields:
                docs.setdefault(k, v)
    return {k: docs.get(k, "") for k in fields}


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def describe(section: str, cls: type[Config]) -> list[SectionDoc]:
    """The section for ``cls`` and one subsection per nested config field (``dict[str, Config]`` as ``<name>``)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    keys, subs = [], []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        keys.append(KeyDoc(f.name, type_text(tp), _default_text(f), docs.get(f.name, "")))
        nested = [a for a in (tp, *get_args(tp)) if isinstance(a, type) and issubclass(a, Config)]
        if nested:
            name = f"{section}.{f.name}" + (".<name>" if get_origin(tp) is dict else "")
            subs.extend(describe(name, nested[0]))
    return [SectionDoc(section, f"{cls.__module__}.{cls.__qualname__}", _summary(cls), tuple(keys)), *subs]


def reference(section: str | None = None) -> list[SectionDoc]:
    """Every registered section (sorted), or ``section`` (a registered section, or a subsection such as
    ``intake.preprocessing``) and its subsections.

    Raises:
        ConfigError: ``section`` is not registered and is no subsection of a registered one.
    """
    if section is None or section in SECTIONS:
        out: list[SectionDoc] = []
        # a section and the registered ones under it ("task" -> "task.options (db_text)", ...; "bundle" -> "bundle.verify")
        names = sorted(SECTIONS) if section is None else [section] + sorted(s for s in SECTIONS if s.startswith((section + ".", section + " ")))
        for name in names:
            out.extend(describe(name, config_class(name)))
        return out
    parent = max((s for s in SECTIONS if section.startswith(s + ".")), key=len, default=None)
    found = [d for d in reference(parent) if d.section == section or d.section.startswith(section + ".")] if parent else []
    if not found:
        raise ConfigError(f"params section {section!r} is not registered; known sections: {', '.join(sorted(SECTIONS))} (and their subsections)")
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


MARKDOWN_TITLE = "# params.yaml reference"
MARKDOWN_KIND = FileKind("params reference page", text_with(MARKDOWN_TITLE + "\n"))
"""What ``quantkit params --out`` may replace: an earlier page (:func:`quantkit._overwrite.check_output_file`)."""


def render_markdown(sections: list[SectionDoc]) -> str:
    """``docs/params.md``: a table per (sub)section, then the top-level keys that are not configs."""
    lines = [MARKDOWN_TITLE, "",
             "Generated from the config classes by `quantkit params --out docs/params.md`; do not edit by hand (a test",
             "compares this page with the code). Every section is one typed config: an unknown key is an error. Types are",
             "YAML terms (`number` is an int or a float, `[a, b]` a list, `{str: x}` a mapping); `required` has no default.", ""]
    for s in sections:
        lines += [f"## `{s.section}`", "", f"{_cell(s.summary)} (`{s.config}`)", "", "| key | type | default | description |",
                  "|---|---|---|---|"]
        lines += [f"| `{k.key}` | `{_cell(k.type)}` | `{_cell(k.default)}` | {_cell(k.doc)} |" for k in s.keys]
        lines.append("")
    lines += ["## Other top-level keys", ""] + [f"- `{k}`: {v}" for k, v in sorted(NOT_CONFIG.items())] + [""]
    return "\n".join(lines)


def render_text(sections: list[SectionDoc]) -> str:
    """Plain text for a terminal: per section, one block per key."""
    out = []
    for s in sections:
        out.append(f"[{s.section}]  {s.summary}")
        for k in s.keys:
            out.append(f"  {k.key}: {k.type} = {k.default}")
            if k.doc:
                out.extend("      " + line for line in textwrap.wrap(k.doc, 96))
        out.append("")
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class EffectiveKey:
    """One setting a model runs with: ``key`` dotted from its section (``fallback.target``), ``value`` as YAML flow
    text, and ``source``: ``models.<name>.<key>`` (the model's own), ``<key>`` (the top-level section) or ``default``."""

    key: str
    value: str
    source: str


EFFECTIVE_SECTIONS = ("intake", "task", "sets", "quantize", "quantize_candidate", "fallback", "thresholds", "drift", "report",
                      "measure", "bundle", "bundle.verify", "verify")
"""The sections a model's stages read through :func:`quantkit.config.config_from_params` with ``model=``, in pipeline order."""


def effective_settings(path: str | Path, model: str) -> list[EffectiveKey]:
    """Every setting ``model`` of the params file ``path`` runs with, each with where it came from (the one resolver,
    :func:`quantkit.config.section_for_model`, applied to each of :data:`EFFECTIVE_SECTIONS` the file or the model
    has; the rest are the config's defaults).

    Raises:
        InputFileError: the file is missing or not YAML.
        ConfigError: ``model`` is not under ``models``, or a section does not validate (the message names it).
    """
    from .config import _read_params, _walk, config_from_params, load_params, section_for_model

    models = load_params(path, "models")
    if model not in models:
        raise ConfigError(f"{path}: model {model!r} is not under 'models' (it has {', '.join(sorted(models)) or 'none'}); fix --model")
    data = _read_params(Path(path))
    out: list[EffectiveKey] = []
    for section in EFFECTIVE_SECTIONS:
        cls = config_class(section)
        if not has_any(data, models[model], section) and not cls.PARAMS_OPTIONAL:
            continue
        if any(s.startswith(section + ".") for s in SECTIONS):  # nested sections (bundle.verify) are their own configs
            raw, where = section_for_model(path, section, model) if has_any(data, models[model], section) else ({}, section)  # absent: defaults
            raw = {k: v for k, v in raw.items() if f"{section}.{k}" not in SECTIONS}
            values = cls.from_dict(raw, where=f"{path}:{where}").to_dict()
        elif section == "task":  # the adapter's options as it runs with them, defaults included
            task = config_from_params(cls, path, section, model=model)
            values = {"adapter": task.adapter, "options": task.make().options()}  # type: ignore[attr-defined]
        else:
            values = config_from_params(cls, path, section, model=model).to_dict()
        for key, value in _flatten(values, section):
            own = _walk(models[model], key)
            source = f"models.{model}.{key}" if own is not None else key if _walk(data, key) is not None else "default"
            out.append(EffectiveKey(key, json.dumps(value, sort_keys=True, ensure_ascii=False), source))
    targets = data.get("targets") if isinstance(data, dict) else None
    own_targets = models[model].get("targets") if isinstance(models[model], dict) else None
    for runtime, spec in ((own_targets or targets) or {}).items():
        out.append(EffectiveKey(f"targets.{runtime}", json.dumps(spec, sort_keys=True), f"models.{model}.targets" if own_targets else "targets"))
    return out


def has_any(data: Any, entry: Any, section: str) -> bool:
    """Whether the top level of ``data`` or the model's ``entry`` has ``section``."""
    from .config import _walk

    return _walk(data, section) is not None or _walk(entry, section) is not None


def _flatten(value: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(dotted key, leaf value)`` pairs of a nested mapping (``schema_version`` left out); lists stay whole."""
    if not isinstance(value, dict):
        return [(prefix, value)]
    out: list[tuple[str, Any]] = []
    for k, v in value.items():
        if k != "schema_version":
            out.extend(_flatten(v, f"{prefix}.{k}"))
    return out


def render_effective(model: str, keys: list[EffectiveKey]) -> str:
    """A terminal table of :func:`effective_settings`: key, value, and where it came from."""
    width = max((len(k.key) for k in keys), default=10)
    lines = [f"{model}: the settings its stages run with (models.{model}.<section> merged key by key over <section>)"]
    lines += [f"  {k.key:<{width}}  {k.value:<40}  {k.source}" for k in keys]
    return "\n".join(lines) + "\n"

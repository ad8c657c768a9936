"""Edits to a DVC ``params.yaml`` that keep the user's file as it is: comments, key order, flow lists, quoting.

Read and written round-trip with ruamel.yaml (the YAML library DVC itself reads params with), written atomically
(a temporary file renamed over the original), and checked with the same key check every command applies
(:func:`quantkit.config._check_keys`) before anything is written.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._io import atomic_write_text
from .config import _check_keys, _read_params, load_params
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

    The entry is inserted as text at the end of the ``models`` block (or replaces the old entry's lines with
    ``force``), so every other byte of the file stays as the user wrote it: comments, aligned columns, wrapped flow
    mappings (a full ruamel re-dump would re-flow those). The result is parsed back and must equal the old content
    plus the entry; where the text edit cannot guarantee that (e.g. ``models`` written in flow style), the file is
    re-dumped with ruamel's round-trip instead, which keeps comments but not alignment.

    Raises:
        ConfigError: ``models.<name>`` exists and ``force`` is False; ``models`` is not a mapping; the result
            fails the params key check (naming the key).
        InputFileError: the file is not YAML.
    """
    from ruamel.yaml.comments import CommentedMap


    p = Path(params_path)
    y, data = _load(p)
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        raise ConfigError(f"{p}: the top level is not a mapping; a params file maps section names to their options")
    models = data.get("models")
    if models is not None and not isinstance(models, CommentedMap):
        raise ConfigError(f"{p}: models is not a mapping of model names to entries; fix it first")
    if models is not None and name in models and not force:
        raise ConfigError(f"{p}: models.{name} already exists; pick another name, or pass --force to replace it")
    expected = _plain(data)
    expected.setdefault("models", {})
    expected["models"] = {**(expected["models"] or {}), name: _plain(entry)}
    _check_keys(p, expected)
    old = p.read_text(encoding="utf-8") if p.exists() else ""
    text = _inserted(old, name, entry, y)
    if text is None or _parsed(text) != expected:
        if models is None:
            data["models"] = models = CommentedMap()
        models[name] = _node(entry)
        buf = io.StringIO()
        y.dump(data, buf)
        text = buf.getvalue()
    atomic_write_text(p.resolve(), text)  # a symlinked params file: its target is edited, the link stays
    return p


def _entry_text(name: str, entry: Mapping[str, Any], indent: int, y: Any) -> str:
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    m[name] = _node(entry)
    buf = io.StringIO()
    y.dump(m, buf)
    return "".join(" " * indent + line if line.strip() else line for line in buf.getvalue().splitlines(keepends=True))


def _inserted(text: str, name: str, entry: Mapping[str, Any], y: Any) -> str | None:
    """``text`` with ``name: entry`` as the last entry of its block-style top-level ``models`` mapping (an old entry
    of that name removed first), or None when ``models`` is not a block mapping this edit understands."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    top = [i for i, ln in enumerate(lines) if ln[:1] not in ("", " ", "\t", "#", "\n", "\r") and not ln.startswith("---")]
    head = next((i for i in top if re.match(r"models\s*:\s*(#.*)?$", lines[i].rstrip("\r\n"))), None)
    if head is None:
        if any(re.match(r"models\s*:", lines[i]) for i in top):
            return None  # models: {...} in flow style
        sep = "\n" if lines and lines[-1].strip() else ""
        return "".join(lines) + sep + "models:\n" + _entry_text(name, entry, 2, y)
    end = next((i for i in top if i > head), len(lines))
    while end > head + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")) \
            and (not lines[end - 1].strip() or not lines[end - 1].startswith(" ")):
        end -= 1  # blank lines and column-0 comments before the next section stay with it
    body = [i for i in range(head + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")]
    indent = min((len(lines[i]) - len(lines[i].lstrip(" ")) for i in body), default=2)
    keys = [i for i in body if len(lines[i]) - len(lines[i].lstrip(" ")) == indent]
    own = next((i for i in keys if re.match(rf"{re.escape(name)}\s*:", lines[i].lstrip(" "))), None)
    if own is not None:
        after = next((i for i in keys if i > own), end)
        while after > own + 1 and (not lines[after - 1].strip() or lines[after - 1].lstrip().startswith("#")):
            after -= 1  # comments just above the next entry belong to it
        del lines[own:after]
        end -= after - own
    return "".join(lines[:end]) + _entry_text(name, entry, indent, y) + "".join(lines[end:])


def _parsed(text: str) -> Any:
    """``text`` read as the original was (ruamel, YAML 1.2), as plain dicts and lists; None if it does not parse."""
    try:
        return _plain(_yaml().load(text) or {})
    except Exception:  # noqa: BLE001  (ruamel's errors share no public base)
        return None


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    return node


def pipeline_models(path: str | Path) -> list[str]:
    """The names under ``models`` of the params file ``path``, in file order (the main job's models).

    Raises:
        InputFileError: the file is missing or not YAML.
        ConfigError: ``models`` is missing, empty or not a mapping, or an entry lacks ``file`` or has an unknown ``source``.
    """
    p = Path(path)
    models = load_params(p, "models")
    if not models:
        raise ConfigError(f"{p}: 'models' is empty; add a model ('quantkit models add NAME FILE' writes one)")
    for name, entry in models.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):  # source: load_params' key check
            raise ConfigError(f"{p}: models.{name}.file is missing; give the model's .onnx path (e.g. models/{name}.onnx)")
    return [str(n) for n in models]


def targets(path: str | Path | None) -> dict[str, str] | None:
    """The params file's ``targets`` as ``{runtime: placement}`` in the file's order (for a target that chooses among
    recipes, ``{runtime: "a|b|..."}``, the recipes in order: :func:`target_recipes`); None without a file or without the
    key (then each runtime runs the deployed record's own file). Each target runtime of the main job gets its own INT8
    file (dvc.yaml ``place``): the deployed record's ranges with that placement, or the recipe the measurement picks
    (:mod:`quantkit.quantize.recipes`); names are checked where the file is made.

    Raises:
        InputFileError: the file is missing or not YAML. ConfigError: ``targets`` is not such a mapping (its runtimes and
            recipes: :func:`quantkit.quantize.recipes.check_targets`).
    """
    entries = _target_entries(path)
    if entries is None:
        return None
    return {rt: e["placement"] if "placement" in e else "|".join(e["recipes"]) for rt, e in entries.items()}


def target_recipes(path: str | Path | None, runtime: str) -> tuple[str, ...]:
    """``targets.<runtime>.recipes`` (the recipes the main job measures and chooses among for that runtime), or ``()``
    when the target names one ``placement`` (or there is no such target).

    Raises:
        InputFileError: the file is missing or not YAML. ConfigError: ``targets`` is malformed.
    """
    entry = (_target_entries(path) or {}).get(runtime) or {}
    return tuple(entry.get("recipes", ()))


def _target_entries(path: str | Path | None) -> dict[str, dict[str, Any]] | None:
    if path is None:
        return None
    p = Path(path)
    section = _read_params(p).get("targets")
    if section is None:
        return None
    example = "e.g. {onnxruntime: {placement: ort}, openvino: {recipes: [openvino, nncf]}}"
    if not isinstance(section, dict) or not section:
        raise ConfigError(f"{p}: targets must map each target runtime to its Q/DQ placement or recipes, {example}")
    out = {}
    for runtime, entry in section.items():
        if isinstance(entry, dict) and entry.get("recipes") == []:
            raise ConfigError(f"{p}: targets.{runtime}.recipes is empty; list at least one recipe (ort, ort-float-decode, openvino, nncf, "
                              "nncf:ort), or write {placement: NAME}")
        ok = isinstance(entry, dict) and len(entry) == 1 and (
            (set(entry) == {"placement"} and isinstance(entry["placement"], str))
            or (set(entry) == {"recipes"} and isinstance(entry["recipes"], list) and entry["recipes"]
                and all(isinstance(r, str) for r in entry["recipes"])))
        if not ok:
            raise ConfigError(f"{p}: targets.{runtime} must be {{placement: NAME}} or {{recipes: [NAME, ...]}} (ort, openvino, nncf, "
                              f"nncf:ort, ...), {example}")
        out[str(runtime)] = dict(entry)
    return out


DEMO_DIR = "models/demo"
"""Where the ``demo_model`` stage writes each of ``demo.models`` (``models/demo/<name>.onnx``, dvc.yaml)."""


def check_model_source(path: str | Path, name: str, model_file: str | Path) -> None:
    """Check ``models.<name>``'s ``source`` against the file intake was given (``model_file``, relative to the params
    file's folder as dvc.yaml passes it): ``source: demo`` needs a demo model's file, ``models/demo/<d>.onnx`` with
    ``d`` in ``demo.models`` (only those are written by a stage); ``source: file`` (the default) must not be one
    (``dvc repro`` rewrites it from the wheel).

    Raises:
        InputFileError: the params file is missing or not YAML.
        ConfigError: the entry's source and file disagree, naming the key and the fix.
    """
    p = Path(path)
    data = _read_params(p)
    models = data.get("models") if isinstance(data, dict) else None
    entry = models.get(name) if isinstance(models, dict) else None
    if not isinstance(entry, dict):  # no such model: config_from_params names it
        return
    demo = data.get("demo") if isinstance(data.get("demo"), dict) else {}
    written = {f"{DEMO_DIR}/{d}.onnx" for d in (demo.get("models") or ())}
    rel = Path(os.path.relpath(Path(model_file).resolve(), p.resolve().parent)).as_posix()
    source = entry.get("source", "file")
    if source == "demo" and rel not in written:
        raise ConfigError(f"{p}: models.{name}.source is demo, but {rel} is not a demo model's file ({', '.join(sorted(written)) or 'demo.models is empty'}); "
                          "for your own file set source: file")
    if source == "file" and rel in written:
        raise ConfigError(f"{p}: models.{name}.file {rel} is written by the demo_model stage from a wheel (dvc repro rewrites it); "
                          "copy your model elsewhere (e.g. models/<name>.onnx), or set source: demo for the demo's model")


def set_model_keys(params_path: str | os.PathLike[str], name: str, changes: Mapping[str, Any]) -> Path:
    """Set dotted keys under ``models.<name>`` (``{"sets.deployed.calibration": "x", "quantize.method": "percentile"}``),
    creating mappings on the way; the model's entry is rewritten through :func:`set_model_entry` (``force``), so every
    other line of the file stays as the user wrote it; atomically, checked like ``models add``.

    Raises:
        ConfigError: no such model, a key path through a value that is not a mapping, or a result the key check refuses.
        InputFileError: the file is missing or not YAML.
    """
    p = Path(params_path)
    models = load_params(p, "models")
    if name not in models or not isinstance(models[name], Mapping):
        raise ConfigError(f"{p}: model {name!r} is not under 'models'; check the model's name")
    entry = _plain(models[name])
    for dotted, value in changes.items():
        node, parts = entry, dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{p}: models.{name}.{dotted}: {part} is not a mapping; fix it by hand")
        node[parts[-1]] = value
    return set_model_entry(p, name, entry, force=True)

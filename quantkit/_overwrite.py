"""What an output path may replace, so that a careless ``--out`` never destroys a file.

Three rules, checked before a command does its (slow) work and again where it writes:

1. An output is never one of the command's inputs, never inside an input folder and never a folder that holds
   an input (:func:`check_not_input`); nor is it inside another command's output folder
   (:func:`check_not_output_dir`).
2. A folder output replaces only a missing or empty folder, or one that the *same* command wrote
   (:func:`check_output_dir`). Every output folder carries :data:`OUTPUT_MARKER`, whose content
   names the command that wrote it: ``{"command": "quantize"}`` (:func:`marker_text`). Re-running a command
   into its own output (``dvc repro``, a manual re-run) replaces it; another command's output is refused.
   Markers written before they named their command are empty: the command is then read from the files the
   folder holds (:data:`LEGACY_SIGNATURES`, e.g. ``intake.json`` -> ``intake``), so re-running a command into
   its old output still works; an old folder whose files name no command is refused to every command that
   names itself (delete it once by hand). A writer that names no command (``command=None``, e.g. the shift
   report's ``plots/``) writes an empty marker and replaces only such unnamed folders.
3. A single-file output replaces only a file of the same kind that quantkit wrote, recognised by its content
   (:class:`FileKind`, e.g. :meth:`quantkit.artifacts.base.Artifact.recognizes`) (:func:`check_output_file`).

Every refusal is one :class:`~quantkit.errors.InputFileError` line naming the path, who wrote it and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import InputFileError

PathLike = str | os.PathLike[str]

OUTPUT_MARKER = ".quantkit-output"
"""File :func:`quantkit._io.atomic_output_dir` puts in every folder it writes, naming the command that wrote it
(:func:`marker_text`), so it knows what it may replace (older versions left it empty)."""

LEGACY_SIGNATURES: tuple[tuple[tuple[str, ...], frozenset[str]], ...] = (
    (("export.json",), frozenset({"export"})),
    (("intake.json",), frozenset({"intake"})),
    (("fallback.json",), frozenset({"fallback"})),
    (("record.json", "model_int8.onnx"), frozenset({"quantize", "record replay"})),
    (("summary.json", "per_image.csv"), frozenset({"evaluate"})),
    (("bundle.json",), frozenset({"bundle"})),
    (("manifest.json", "images"), frozenset({"demo make-set"})),
)
"""For a folder with an empty (older) marker: the files that tell which command wrote it, first match wins
(a fallback folder also holds ``record.json``). ``quantize`` and ``record replay`` write the same files."""


def set_folder(cset: Any) -> Any:
    """The folder of a calibration set given as a path or as a :class:`~quantkit.calibset.CalibrationSet` (its
    ``root``); None for None. (A path's own ``root`` attribute is its anchor, so paths are told apart first.)"""
    return cset if cset is None or isinstance(cset, (str, os.PathLike)) else cset.root


class _Unreadable:
    """A marker that is neither empty nor ``{"command": ...}``: not one quantkit wrote."""

    def __repr__(self) -> str:
        return "unreadable marker"


UNREADABLE = _Unreadable()


@dataclasses.dataclass(frozen=True)
class FileKind:
    """A kind of single-file output: ``name`` (in messages, e.g. ``threshold set``) and ``recognize(path)``,
    True when the existing file at ``path`` is one of this kind that quantkit wrote (never raises)."""

    name: str
    recognize: Callable[[Path], bool]


def a_kind(kind: str) -> str:
    """``kind`` with its article: ``a threshold set``, ``an evaluation summary``."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def check_not_input(out: PathLike, inputs: Iterable[PathLike | None], *, flag: str = "--out") -> None:
    """Refuse an output path that is an input, lies inside an input folder or contains an input.

    ``None`` entries of ``inputs`` are skipped. Paths are compared resolved (symbolic links followed).

    Raises:
        InputFileError: one line naming the output, the input and the fix.
    """
    o = Path(out)
    ro = o.resolve()
    for inp in inputs:
        if inp is None:
            continue
        i = Path(inp)
        ri = i.resolve()
        if ro == ri:
            raise InputFileError(f"{o}: {flag} is also an input of this command ({i}); writing it would destroy that input: "
                                 f"pass another {flag}")
        if ri in ro.parents and ri.is_dir():
            raise InputFileError(f"{o}: {flag} lies inside the input folder {i}; writing there would change that input: "
                                 "write the output outside it")
        if ro in ri.parents:
            raise InputFileError(f"{o}: {flag} contains the input {i}; replacing it would destroy that input: pass another {flag}")


def marker_text(command: str | None) -> str:
    """Content of the output marker a command writes: ``{"command": ...}`` (empty without a command)."""
    return "" if command is None else json.dumps({"command": command}, sort_keys=True) + "\n"


def _legacy_commands(folder: Path) -> frozenset[str]:
    for files, commands in LEGACY_SIGNATURES:
        if all((folder / f).exists() for f in files):
            return commands
    return frozenset()


def folder_writer(folder: PathLike) -> frozenset[str] | _Unreadable | None:
    """The commands that may have written output ``folder``, from its marker: one command for a marker that names
    it; for an empty marker (an older quantkit, or a writer that names no command) those :data:`LEGACY_SIGNATURES` infer
    from its files, possibly none; :data:`UNREADABLE` for a marker quantkit did not write; None without a marker."""
    marker = Path(folder) / OUTPUT_MARKER
    if not marker.is_file():
        return None
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return UNREADABLE
    if not text:
        return _legacy_commands(Path(folder))
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return UNREADABLE
    command = data.get("command") if isinstance(data, dict) else None
    return frozenset({command}) if isinstance(command, str) and command else UNREADABLE


def _who(writer: frozenset[str]) -> str:
    return " or ".join(f"'quantkit {c}'" for c in sorted(writer)) if writer else "a quantkit command that did not record its name (an older version)"


def _fix(flag: str, what: str) -> str:
    return f"pass another {flag}, or delete the {what} yourself if you no longer need it"


def _writer_text(writer: frozenset[str] | _Unreadable) -> str:
    return "a quantkit command" if isinstance(writer, _Unreadable) else _who(writer)


def _refuse_inside_output(path: Path, flag: str) -> None:
    for parent in path.resolve().parents:
        writer = folder_writer(parent)
        if writer is not None:
            raise InputFileError(f"{path}: {flag} lies inside {parent}, the output of {_writer_text(writer)}; writing there would "
                                 f"change that output: write the output outside it")


def check_output_dir(path: PathLike, command: str | None, *, inputs: Iterable[PathLike | None] = (), flag: str = "--out") -> None:
    """Refuse an output folder ``command`` may not replace (rules 1 and 2 of the module docstring).

    Call it before the work starts; :func:`quantkit._io.atomic_output_dir` calls it again under the output's lock.

    Raises:
        InputFileError: ``path`` is a file, an input (or holds or lies inside one), a non-empty folder without
            a quantkit marker, or an output folder another command wrote (the message names that command).
    """
    dest = Path(path)
    check_not_input(dest, inputs, flag=flag)
    _refuse_inside_output(dest, flag)
    if dest.exists() and not dest.is_dir():
        raise InputFileError(f"{dest}: is a file; pass a folder path for this output")
    if not dest.is_dir() or not any(dest.iterdir()):
        return
    writer = folder_writer(dest)
    if writer is None:
        raise InputFileError(f"{dest}: folder exists and holds files quantkit did not write; pass a new or empty output folder")
    if isinstance(writer, _Unreadable):
        raise InputFileError(f"{dest}: folder has an output marker quantkit did not write; {_fix(flag, 'folder')}")
    if command in writer or (command is None and not writer):  # a re-run; an unnamed writer over an unnamed folder
        return
    mine = f"'quantkit {command}'" if command else "this command"
    raise InputFileError(f"{dest}: folder holds the output of {_who(writer)}, which {mine} will not replace; {_fix(flag, 'folder')}")


def check_not_output_dir(path: PathLike, *, flag: str = "--out") -> None:
    """Refuse to write files into ``path`` when it is, or lies inside, a command's output folder (one carrying a
    marker): for commands that add files to a folder instead of replacing it (``report``, ``measure``,
    ``fleet score``), and for any output inside such a folder.

    Raises:
        InputFileError: the folder is an output folder (the message names its command when known).
    """
    _refuse_inside_output(Path(path), flag)
    writer = folder_writer(path)
    if writer is None:
        return
    raise InputFileError(f"{path}: folder holds the output of {_writer_text(writer)}; writing into it would change that output; {_fix(flag, 'folder')}")


def check_output_file(path: PathLike, kind: FileKind, *, inputs: Iterable[PathLike | None] = (), flag: str = "--out") -> None:
    """Refuse a single-file output path (rules 1 and 3 of the module docstring).

    Raises:
        InputFileError: ``path`` is a folder, an input, inside an input folder or another command's output folder,
            or an existing file that is not a ``kind`` quantkit wrote.
    """
    dest = Path(path)
    check_not_input(dest, inputs, flag=flag)
    _refuse_inside_output(dest, flag)
    check_replaceable_file(dest, kind, flag=flag)


def check_replaceable_file(path: PathLike, kind: FileKind, *, flag: str = "--out") -> None:
    """Rule 3 alone (what :meth:`quantkit.artifacts.base.Artifact.save` checks): ``path`` is missing or a ``kind``
    quantkit wrote.

    Raises:
        InputFileError: ``path`` is a folder, or an existing file that is not a ``kind`` quantkit wrote.
    """
    dest = Path(path)
    if dest.is_dir():
        raise InputFileError(f"{dest}: is a folder; {flag} takes the path of the {kind.name} file")
    if dest.exists() and not kind.recognize(dest):
        raise InputFileError(f"{dest}: exists and is not {a_kind(kind.name)} quantkit wrote, so it is not replaced; {_fix(flag, 'file')}")


# -- recognizers ---------------------------------------------------------------------------------------------

_MAX_READ = 64 << 20  # a larger "JSON output" is not one of ours


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is not one (unreadable, not JSON, not an object, huge)."""
    try:
        if path.stat().st_size > _MAX_READ:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def json_with_keys(required: Iterable[str], allowed: Iterable[str] | None = None) -> Callable[[Path], bool]:
    """Recognizer: a JSON object holding every ``required`` key and (when given) no key outside ``allowed``."""
    need, may = frozenset(required), None if allowed is None else frozenset(allowed) | frozenset(required)

    def recognize(path: Path) -> bool:
        data = read_json_object(path)
        return data is not None and need <= data.keys() and (may is None or data.keys() <= may)

    return recognize


def text_with(prefix: str, *contains: str) -> Callable[[Path], bool]:
    """Recognizer: a UTF-8 text file starting with ``prefix`` and containing every string of ``contains``."""

    def recognize(path: Path) -> bool:
        try:
            if path.stat().st_size > _MAX_READ:
                return False
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return False
        return text.startswith(prefix) and all(c in text for c in contains)

    return recognize

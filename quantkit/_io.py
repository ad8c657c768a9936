"""Atomic, deterministic file output and content digests.

Every artifact quantkit writes goes through these helpers: data is written to a temporary file in the
destination folder and moved into place with :func:`os.replace`, so a crash or an error never leaves a
half-written file and never clobbers the previous good one. JSON is written with sorted keys and a
trailing newline, so the same inputs give the same bytes (habit 5 of STYLE.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

_CHUNK = 1 << 20


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the hex SHA-256 of a file's bytes, read in 1 MiB chunks (memory independent of size).

    Raises:
        FileNotFoundError: if ``path`` does not exist (callers turn it into an InputFileError).
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Return the hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` deterministically: sorted keys, 2-space indent, trailing newline.

    Floats use Python's shortest round-trip repr, so a value read back is bit-identical.
    """
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def fingerprint(obj: Any) -> str:
    """SHA-256 over the compact canonical JSON of ``obj`` (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return sha256_bytes(text.encode("utf-8"))


OUTPUT_MARKER = ".quantkit-output"
"""Empty file :func:`atomic_output_dir` puts in every folder it writes, so it knows what it may replace."""


def _check_parent(dest: Path) -> None:
    from .errors import InputFileError

    for parent in dest.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputFileError(f"{dest}: {parent} is a file, not a folder; choose another output path")
            break


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, os.replace).

    Raises:
        InputFileError: ``path`` is an existing folder, or one of its parents is a file.
    """
    from .errors import InputFileError

    dest = Path(path)
    if dest.is_dir():
        raise InputFileError(f"{dest}: is a folder; pass a file path for this output")
    _check_parent(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return dest


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as canonical JSON (see :func:`canonical_json`) to ``path`` atomically."""
    return atomic_write_text(path, canonical_json(obj))


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    """Read a JSON file, turning a missing or malformed file into a one-line InputFileError."""
    from .errors import InputFileError

    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(f"{p}: {what} not found; check the path or run the stage that writes it") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputFileError(f"{p}: not a valid JSON {what} ({e}); regenerate it") from None


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike[str], *, marker: bool = True) -> Iterator[Path]:
    """Build a folder in a temporary sibling and swap it into ``path`` only if the block succeeds.

    Yields the temporary folder to write into. On success an existing ``path`` is replaced whole; on
    any exception the temporary folder is removed and ``path`` is left as it was. The folder gets an
    empty :data:`OUTPUT_MARKER` file (``marker=False``: none, for a folder that must never be replaced,
    such as an image set, which the caller refuses to overwrite itself); an existing ``path`` is only
    replaced when it is empty or carries that marker, so a user's own folder (or a file) is never deleted.

    Raises:
        InputFileError: ``path`` is a file, or a non-empty folder quantkit did not write.
    """
    from .errors import InputFileError

    dest = Path(path).resolve()
    if dest.exists() and not dest.is_dir():
        raise InputFileError(f"{path}: is a file; pass a folder path for this output")
    if dest == Path.cwd().resolve() or dest in Path.cwd().resolve().parents:
        raise InputFileError(f"{path}: is the current folder or one above it; pass a new output folder")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / OUTPUT_MARKER).is_file():
        raise InputFileError(f"{path}: folder exists and holds files quantkit did not write; pass a new or empty output folder")
    _check_parent(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp creates 0700; give the usual folder mode
    try:
        yield tmp
        if marker:
            (tmp / OUTPUT_MARKER).touch()
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

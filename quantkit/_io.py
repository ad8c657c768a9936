"""Atomic, deterministic file output and content digests.

Every artifact quantkit writes goes through these helpers: data is written to a temporary file in the
destination folder and moved into place with :func:`os.replace`, so a crash or an error never leaves a
half-written file and never clobbers the previous good one. Output folders are also locked while they are
written (:func:`output_lock`), so two commands never write one output at once. JSON is written with sorted keys and a
trailing newline, so the same inputs give the same bytes (habit 5 of STYLE.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from ._overwrite import OUTPUT_MARKER, check_output_dir, marker_text
from .errors import InputFileError, OutputBusyError

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


def _check_parent(dest: Path) -> None:
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
    dest = Path(path)
    if dest.is_dir():
        raise InputFileError(f"{dest}: is a folder; pass a file path for this output")
    _check_parent(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(dest)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(dest), suffix=".tmp", dir=dest.parent)
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
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(f"{p}: {what} not found; check the path or run the stage that writes it") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputFileError(f"{p}: not a valid JSON {what} ({e}); regenerate it") from None


LOCK_SUFFIX = ".lock"


def _holder_text(lock_path: Path) -> str:
    try:
        info = json.loads(lock_path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    return f"pid {info.get('pid')} on {info.get('host', '?')} since {info.get('since', '?')} ({info.get('command', '?')})"


@contextlib.contextmanager
def output_lock(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the exclusive writer lock of output ``path`` (a file or folder) for the block.

    The lock is ``fcntl.flock`` on a hidden ``.NAME.lock`` file beside ``path`` holding the holder's pid, host,
    command line and start time; it is removed on release, and the kernel releases the lock when the holder
    dies (even by SIGKILL), so a dead writer never blocks the next one. A writer that finds the lock held
    fails at once (no waiting). On platforms without ``fcntl`` (Windows) the block runs unlocked.

    Yields:
        the lock file's path.

    Raises:
        OutputBusyError: another process holds the lock (the message names it).
    """
    import socket
    import sys
    import time

    dest = Path(path).absolute()
    lock_path = dest.with_name(f".{dest.name}{LOCK_SUFFIX}")
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield lock_path
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusyError(f"{path}: another quantkit command is writing it ({_holder_text(lock_path)}); wait for it to finish "
                                  "or write to another output") from None
        try:  # the previous holder may have unlinked the file between our open and flock: lock the live one
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "command": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(holder, sort_keys=True).encode("utf-8"))
        yield lock_path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        os.close(fd)  # releases the flock


def _temp_prefix(dest: Path) -> str:
    """Temporary siblings are ``.NAME.PID.xxxxxxxx.tmp``: the writer's pid tells whether it is still alive."""
    return f".{dest.name}.{os.getpid()}."


def temp_dir_beside(dest: str | os.PathLike[str]) -> Path:
    """A new empty folder ``.NAME.PID.xxxxxxxx.tmp`` beside ``dest`` (mode 0700): the name :func:`remove_dead_temps` (and so
    :func:`atomic_output_dir`) recognizes, so a folder a killed writer left is removed by the next writer of ``dest``."""
    d = Path(dest).absolute()
    return Path(tempfile.mkdtemp(prefix=_temp_prefix(d), suffix=".tmp", dir=d.parent))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def remove_dead_temps(dest: str | os.PathLike[str], *, legacy: bool = False, own: bool = False) -> list[Path]:
    """Remove the temporary siblings of ``dest`` (files or folders ``.NAME.PID.xxxxxxxx.tmp``) whose writer
    process no longer runs (killed by SIGKILL, OOM, power loss); returns what was removed. ``legacy`` also
    removes ``.NAME.xxxxxxxx.tmp`` folders without a pid, and ``own`` this process's own (both only safe with
    :func:`output_lock` held)."""
    d = Path(dest).absolute()
    if not d.parent.is_dir():
        return []
    with_pid = re.compile(re.escape(f".{d.name}.") + r"(\d+)\.[A-Za-z0-9_]{8}\.tmp")
    no_pid = re.compile(re.escape(f".{d.name}.") + r"[A-Za-z0-9_]{8}\.tmp")
    removed = []
    for p in d.parent.iterdir():
        m = with_pid.fullmatch(p.name)
        pid = int(m.group(1)) if m is not None else None
        dead = (pid is not None and ((own and pid == os.getpid()) or (pid != os.getpid() and not _pid_alive(pid)))) or \
            (legacy and no_pid.fullmatch(p.name) is not None and p.is_dir())
        if dead and not p.is_symlink():
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            removed.append(p)
    return removed


@contextlib.contextmanager
def scratch_dir(kind: str) -> Iterator[str]:
    """A temporary folder ``<system temp>/.quantkit-KIND.PID.xxxxxxxx.tmp`` (mode 0700), removed on exit: the name
    :func:`temp_dir_beside` gives a sibling of ``<system temp>/quantkit-KIND``, so on entry :func:`remove_dead_temps` removes
    the folders of that kind whose process no longer runs (killed by SIGKILL, OOM): a killed ``quantize`` or NNCF run no
    longer leaves its copies of the model in the temp folder for good."""
    dest = Path(tempfile.gettempdir()) / f"quantkit-{kind}"
    with contextlib.suppress(OSError):
        remove_dead_temps(dest)
    d = temp_dir_beside(dest)
    try:
        yield str(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def recover_output(dest: str | os.PathLike[str]) -> None:
    """Clean up after a writer of folder ``dest`` that died mid-write (call with :func:`output_lock` held).

    Removes temporary siblings of dead writers (:func:`remove_dead_temps`); a ``.NAME.old`` folder (the
    two-step swap's backup) is put back at ``dest`` when ``dest`` is missing (the writer died between the
    two renames), else removed.
    """
    d = Path(dest).absolute()
    remove_dead_temps(d, legacy=True)
    old = d.with_name(f".{d.name}.old")
    if old.is_dir() and not old.is_symlink():
        if not d.exists():
            os.replace(old, d)
        else:
            shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``, kernel 3.15, glibc 2.28);
    False when the platform or file system cannot, so the caller falls back to two renames."""
    import ctypes
    import errno

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_into_place(tmp: Path, dest: Path) -> None:
    if not dest.exists():
        os.replace(tmp, dest)
    elif _exchange(tmp, dest):
        shutil.rmtree(tmp)  # tmp now holds the previous output
    else:
        old = dest.with_name(f".{dest.name}.old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(dest, old)
        os.replace(tmp, dest)  # a crash between these two is repaired by recover_output
        shutil.rmtree(old)


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike[str], *, marker: bool = True, command: str | None = None,
                      inputs: Iterable[str | os.PathLike[str] | None] = (), flag: str = "--out") -> Iterator[Path]:
    """Build a folder in a temporary sibling and swap it into ``path`` only if the block succeeds.

    Yields the temporary folder to write into. On success an existing ``path`` is replaced whole (one
    atomic exchange where the OS offers it, see :func:`_exchange`); on any exception (KeyboardInterrupt
    and the CLI's SIGTERM included) the temporary folder is removed and ``path`` is left as it was. While
    the block runs, ``path`` is locked (:func:`output_lock`): a second writer fails at once naming this
    one, and whatever a killed writer left behind is cleaned up first (:func:`recover_output`). The folder gets an
    :data:`OUTPUT_MARKER` file naming ``command`` (``marker=False``: none, for a folder that must never be replaced,
    such as an image set, which the caller refuses to overwrite itself). An existing ``path`` is only replaced
    when it is empty or an output of the same ``command``, and never when it is, holds or lies inside one of
    ``inputs`` (:func:`quantkit._overwrite.check_output_dir`), so a user's folder, another command's output and
    the command's own inputs are never deleted. ``flag`` names the path in messages (``--out``, a params key).

    Raises:
        InputFileError: ``path`` is a file, an input, a non-empty folder quantkit did not write, or another
            command's output.
        OutputBusyError: another process is writing ``path``.
    """
    dest = Path(path).resolve()
    if dest.exists() and not dest.is_dir():
        raise InputFileError(f"{path}: is a file; pass a folder path for this output")
    if dest == Path.cwd().resolve() or dest in Path.cwd().resolve().parents:
        raise InputFileError(f"{path}: is the current folder or one above it; pass a new output folder")
    inputs = list(inputs)  # may be a generator: read once, checked under the lock
    _check_parent(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(dest):
        recover_output(dest)
        check_output_dir(path, command, inputs=inputs, flag=flag)
        tmp: Path | None = None
        try:
            tmp = temp_dir_beside(dest)
            os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp creates 0700; give the usual folder mode
            yield tmp
            if marker:
                (tmp / OUTPUT_MARKER).write_text(marker_text(command), encoding="utf-8")
            _swap_into_place(tmp, dest)
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            remove_dead_temps(dest, own=True)  # an interrupt inside mkdtemp leaves a folder under a name not yet known here
            raise

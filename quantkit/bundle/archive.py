"""Deterministic tar writing and safe tar extraction for deployment bundles.

Writing (:func:`write_tar`): USTAR format, ``manifest.json`` first and every other member sorted by
name, ``mtime=0``, ``uid=gid=0``, empty ``uname``/``gname``, mode ``0o644``, regular files only, no
directory entries; gzip (optional) with ``mtime=0`` and no file name in its header. The same member
bytes therefore give the same archive bytes on any machine.

Reading (:func:`safe_extract`) trusts nothing in the archive. A member is rejected when its name is
absolute, contains ``..``, ``.``, an empty component, a backslash, a drive letter or NUL; when it is
not a regular file (symlink, hardlink, device, FIFO, directory); when its name occurs twice; when it
is not listed in ``manifest.json`` (or a listed one is absent); or when Python's own
``tarfile.data_filter`` (PEP 706) refuses it. Files are written only below the destination folder,
with ``O_EXCL``, while their SHA-256 is computed; nothing is executed and nothing is unpickled.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import tarfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._io import sha256_file
from ..errors import VerificationError

MANIFEST_NAME = "manifest.json"
BUNDLE_FORMAT = "quantkit-bundle"
MEMBER_MODE = 0o644
MAX_MANIFEST_BYTES = 64 << 20
_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")


def member_name_problem(name: str) -> str | None:
    """Why ``name`` is not an acceptable bundle member path, or ``None`` when it is.

    Accepted names are relative POSIX paths of at most 255 characters whose components are neither
    empty, ``.`` nor ``..``, with no backslash, drive letter or NUL.
    """
    if not name:
        return "empty name"
    if "\x00" in name:
        return "name contains NUL"
    if len(name) > 255:
        return "name longer than 255 characters"
    if name.startswith("/") or _DRIVE.match(name):
        return "absolute path"
    if "\\" in name:
        return "backslash in path"
    parts = name.split("/")
    if ".." in parts:
        return "path escapes the bundle folder ('..')"
    if any(p in ("", ".") for p in parts):
        return "non-normalised path ('.' or empty component)"
    return None


def write_tar(dest: str | os.PathLike[str], files: Mapping[str, str | os.PathLike[str]], *, compress: bool = False) -> str:
    """Write ``files`` (member name -> source file) as a deterministic tar at ``dest``.

    ``dest`` is written directly (callers write into a temporary folder and move it into place).

    Returns:
        Hex SHA-256 of the archive bytes.

    Raises:
        ValueError: a member name is not acceptable (a bug in the caller, not a user error).
    """
    for name in files:
        problem = member_name_problem(name)
        if problem:
            raise ValueError(f"bundle member {name!r}: {problem}")
    order = sorted(files)
    if MANIFEST_NAME in files:
        order.remove(MANIFEST_NAME)
        order.insert(0, MANIFEST_NAME)
    with open(dest, "wb") as raw:
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) if compress else None
        with tarfile.open(fileobj=gz or raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name in order:
                src = Path(files[name])
                info = tarfile.TarInfo(name)
                info.size = src.stat().st_size
                info.mtime = 0
                info.mode = MEMBER_MODE
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.type = tarfile.REGTYPE
                with open(src, "rb") as f:
                    tar.addfile(info, f)
        if gz is not None:
            gz.close()
        raw.flush()
        os.fsync(raw.fileno())
    return sha256_file(dest)


@dataclasses.dataclass(frozen=True)
class MemberDigest:
    """One member's digest check: expected (manifest) vs actual (archive) SHA-256 and size in bytes."""

    name: str
    expected_sha256: str
    actual_sha256: str
    expected_size: int
    actual_size: int

    @property
    def ok(self) -> bool:
        return self.expected_sha256 == self.actual_sha256 and self.expected_size == self.actual_size

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}

    def __repr__(self) -> str:
        return f"MemberDigest({self.name!r}, ok={self.ok})"


@dataclasses.dataclass(frozen=True)
class ExtractedBundle:
    """A bundle unpacked into ``root``: its parsed manifest and one :class:`MemberDigest` per member."""

    root: Path
    manifest: dict[str, Any]
    digests: tuple[MemberDigest, ...]

    def path(self, name: str) -> Path:
        """Local path of member ``name`` (a name listed in the manifest)."""
        return self.root / name

    def __repr__(self) -> str:
        bad = sum(not d.ok for d in self.digests)
        return f"ExtractedBundle({self.root}, {len(self.digests)} members, {bad} bad)"


def _kind(m: tarfile.TarInfo) -> str:
    if m.issym():
        return "symlink"
    if m.islnk():
        return "hardlink"
    if m.isdir():
        return "directory"
    if m.ischr() or m.isblk():
        return "device"
    if m.isfifo():
        return "FIFO"
    return "regular file" if m.isreg() else f"type {m.type!r}"


def _unsafe(path: Path, why: str) -> VerificationError:
    return VerificationError(f"{path}: unsafe or corrupt archive: {why}; do not use this bundle, rebuild it with 'quantkit bundle'")


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> dict[str, Any]:
    if member.size > MAX_MANIFEST_BYTES:
        raise _unsafe(path, f"{MANIFEST_NAME} is {member.size} bytes (limit {MAX_MANIFEST_BYTES})")
    f = tar.extractfile(member)
    if f is None:  # pragma: no cover - regular files always have a file object
        raise _unsafe(path, f"{MANIFEST_NAME} cannot be read")
    try:
        manifest = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _unsafe(path, f"{MANIFEST_NAME} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT or not isinstance(manifest.get("members"), dict):
        raise _unsafe(path, f"{MANIFEST_NAME} is not a {BUNDLE_FORMAT} manifest")
    for name, entry in manifest["members"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("size"), int):
            raise _unsafe(path, f"{MANIFEST_NAME}: entry for {name!r} lacks sha256/size")
    return manifest


def safe_extract(path: str | os.PathLike[str], dest: str | os.PathLike[str]) -> ExtractedBundle:
    """Unpack bundle ``path`` (tar or tar.gz) into the empty folder ``dest``, checking every member.

    Structural problems (unsafe names, links, devices, duplicates, unlisted or missing members, a
    truncated or unreadable archive) raise; digest or size mismatches are returned in
    :attr:`ExtractedBundle.digests` so that every bad member can be named.

    Raises:
        InputFileError: ``path`` does not exist (from :func:`open`).
        VerificationError: the archive is unsafe, truncated, not a tar, or its manifest is unusable.
    """
    src = Path(path)
    root = Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    root_real = os.path.realpath(root)
    try:
        with tarfile.open(src, mode="r:*") as tar:
            members = tar.getmembers()
            seen: set[str] = set()
            for m in members:
                problem = member_name_problem(m.name)
                if problem is None and not m.isreg():
                    problem = f"is a {_kind(m)}; only regular files are allowed"
                if problem is None and m.name in seen:
                    problem = "occurs twice"
                if problem is None:
                    try:
                        tarfile.data_filter(m, root_real)
                    except tarfile.FilterError as e:
                        problem = f"refused by tarfile's data filter ({e})"
                if problem:
                    raise _unsafe(src, f"member {m.name!r}: {problem}")
                seen.add(m.name)
            by_name = {m.name: m for m in members}
            if MANIFEST_NAME not in by_name:
                raise _unsafe(src, f"no {MANIFEST_NAME}")
            manifest = _read_manifest(tar, by_name[MANIFEST_NAME], src)
            listed = set(manifest["members"])
            extra = sorted(seen - listed - {MANIFEST_NAME})
            if extra:
                raise _unsafe(src, f"member {extra[0]!r} is not listed in {MANIFEST_NAME}")
            missing = sorted(listed - seen)
            if missing:
                raise _unsafe(src, f"member {missing[0]!r} listed in {MANIFEST_NAME} is missing (truncated archive?)")
            for name in listed:
                problem = member_name_problem(name)
                if problem:  # already covered by the checks above; kept so the manifest is never trusted
                    raise _unsafe(src, f"{MANIFEST_NAME} lists {name!r}: {problem}")
            digests = []
            for name in sorted(listed):
                digests.append(_extract_one(tar, by_name[name], root, root_real, manifest["members"][name], src))
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise _unsafe(src, f"not a readable tar archive ({type(e).__name__}: {e}); it may be truncated") from None
    return ExtractedBundle(root, manifest, tuple(digests))


def _extract_one(tar: tarfile.TarFile, m: tarfile.TarInfo, root: Path, root_real: str, entry: Mapping[str, Any], src: Path) -> MemberDigest:
    if m.size != int(entry["size"]):  # never write more than the manifest announces (disk-filling archives)
        return MemberDigest(m.name, str(entry["sha256"]), "not extracted", int(entry["size"]), int(m.size))
    target = root / m.name
    real_parent = os.path.realpath(target.parent)
    if os.path.commonpath([root_real, real_parent]) != root_real:
        raise _unsafe(src, f"member {m.name!r} would be written outside the extraction folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    f = tar.extractfile(m)
    if f is None:  # pragma: no cover - regular files always have a file object
        raise _unsafe(src, f"member {m.name!r} cannot be read")
    h = hashlib.sha256()
    size = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
            size += len(block)
            out.write(block)
    return MemberDigest(m.name, str(entry["sha256"]), h.hexdigest(), int(entry["size"]), size)

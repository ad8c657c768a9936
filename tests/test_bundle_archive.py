"""quantkit.bundle.archive: deterministic tar writing, member-name rules, bounded extraction."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from quantkit.bundle import member_name_problem, safe_extract, write_tar
from quantkit.errors import VerificationError


@pytest.mark.parametrize("name, problem", [
    ("a/b.npy", None), ("manifest.json", None), ("", "empty"), ("/abs", "absolute"), ("C:/x", "absolute"),
    ("a/../b", "escapes"), ("..", "escapes"), ("a//b", "non-normalised"), ("./a", "non-normalised"), ("a\\b", "backslash"),
    ("a\x00b", "NUL"), ("x" * 300, "longer"),
])
def test_member_name_rules(name: str, problem: str | None) -> None:
    got = member_name_problem(name)
    assert (got is None) if problem is None else (problem in got)


def _files(tmp: Path, members: dict[str, bytes]) -> dict[str, Path]:
    out = {}
    for n, b in members.items():
        p = tmp / "src" / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b)
        out[n] = p
    return out


def test_write_tar_is_deterministic_and_round_trips(tmp_path: Path) -> None:
    payload = {"b/2.bin": b"two", "a.txt": b"one"}
    manifest = {"format": "quantkit-bundle", "members": {n: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for n, b in payload.items()}}
    files = _files(tmp_path, {**payload, "manifest.json": json.dumps(manifest).encode()})
    d1 = write_tar(tmp_path / "1.tar", files)
    files_again = dict(reversed(list(files.items())))  # insertion order must not matter
    d2 = write_tar(tmp_path / "2.tar", files_again)
    assert d1 == d2 and (tmp_path / "1.tar").read_bytes() == (tmp_path / "2.tar").read_bytes()
    with tarfile.open(tmp_path / "1.tar") as tar:
        assert tar.getnames() == ["manifest.json", "a.txt", "b/2.bin"]
    ex = safe_extract(tmp_path / "1.tar", tmp_path / "out")
    assert all(d.ok for d in ex.digests) and (tmp_path / "out" / "b" / "2.bin").read_bytes() == b"two"
    with pytest.raises(ValueError, match="escapes"):
        write_tar(tmp_path / "3.tar", {"../x": files["a.txt"]})


def test_member_larger_than_announced_is_not_written(tmp_path: Path) -> None:
    manifest = {"format": "quantkit-bundle", "members": {"a.txt": {"sha256": "0" * 64, "size": 1}}}
    files = _files(tmp_path, {"a.txt": b"x" * 4096, "manifest.json": json.dumps(manifest).encode()})
    write_tar(tmp_path / "b.tar", files)
    ex = safe_extract(tmp_path / "b.tar", tmp_path / "out")
    assert not ex.digests[0].ok and ex.digests[0].actual_sha256 == "not extracted"
    assert not (tmp_path / "out" / "a.txt").exists()


def test_not_a_tar_and_foreign_manifest(tmp_path: Path) -> None:
    (tmp_path / "junk.tar").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(VerificationError, match="not a readable tar"):
        safe_extract(tmp_path / "junk.tar", tmp_path / "o1")
    files = _files(tmp_path, {"manifest.json": b'{"format": "other"}'})
    write_tar(tmp_path / "f.tar", files)
    with pytest.raises(VerificationError, match="not a quantkit-bundle manifest"):
        safe_extract(tmp_path / "f.tar", tmp_path / "o2")

"""Comparing and finding sets: :func:`diff_sets` (``quantkit calibset diff``), :func:`scan_sets` / :func:`list_sets`
(``quantkit calibset list``)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from ..errors import CalibrationSetError, InputFileError
from .manifest import IMAGES, MANIFEST, CalibrationSet

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SetDiff:
    """Images added to, removed from and changed between two sets, by file name (sorted)."""

    a: str
    b: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: int

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "added": list(self.added), "removed": list(self.removed),
                "changed": list(self.changed), "unchanged": self.unchanged, "identical": self.identical}

    def __repr__(self) -> str:
        return f"SetDiff(+{len(self.added)} -{len(self.removed)} ~{len(self.changed)} ={self.unchanged})"


def diff_sets(a: CalibrationSet, b: CalibrationSet) -> SetDiff:
    """Compare two sets by image file name: in ``b`` only (added), ``a`` only (removed), different sha256 (changed)."""
    ha = {e.file: e.sha256 for e in a.entries}
    hb = {e.file: e.sha256 for e in b.entries}
    return SetDiff(
        a=str(a.root), b=str(b.root),
        added=tuple(sorted(set(hb) - set(ha))),
        removed=tuple(sorted(set(ha) - set(hb))),
        changed=tuple(sorted(f for f in set(ha) & set(hb) if ha[f] != hb[f])),
        unchanged=sum(1 for f in set(ha) & set(hb) if ha[f] == hb[f]),
    )


@dataclasses.dataclass(frozen=True)
class SetListing:
    """What :func:`scan_sets` found: the loadable sets (sorted by path) and the manifests it skipped,
    as ``(manifest path, one-line reason)`` pairs (sorted by path)."""

    sets: tuple[CalibrationSet, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"sets": [c.to_dict() for c in self.sets], "skipped": [{"manifest": m, "reason": r} for m, r in self.skipped]}

    def __repr__(self) -> str:
        return f"SetListing({len(self.sets)} sets, skipped={len(self.skipped)})"


def scan_sets(root: str | os.PathLike[str]) -> SetListing:
    """Every registered set (a folder with ``manifest.json``) under ``root``, sorted by path; a manifest
    that does not load (malformed, edited, unreadable) is logged as a WARNING and listed in ``skipped``,
    so one bad folder somewhere below ``root`` does not hide the others.

    Hidden folders (``.dvc``, temporary ``.name.tmp`` folders) and ``images/`` folders are not searched;
    folders that cannot be read are passed over silently (as ``os.walk`` does).

    Raises:
        InputFileError: ``root`` is not a folder.
    """
    base = Path(root)
    if not base.is_dir():
        raise InputFileError(f"{base}: not a folder; pass the folder that holds your sets")
    found: list[CalibrationSet] = []
    skipped: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != IMAGES)
        if MANIFEST in filenames:
            try:
                found.append(CalibrationSet.load(dirpath))
            except (CalibrationSetError, OSError) as e:
                log.warning("skipping %s: %s", Path(dirpath) / MANIFEST, e)
                skipped.append((str(Path(dirpath) / MANIFEST), str(e)))
    return SetListing(tuple(sorted(found, key=lambda c: str(c.root))), tuple(sorted(skipped)))


def list_sets(root: str | os.PathLike[str]) -> list[CalibrationSet]:
    """The loadable sets under ``root``, sorted by path (:func:`scan_sets` without the skipped list;
    malformed manifests are skipped with a logged warning).

    Raises:
        InputFileError: ``root`` is not a folder.
    """
    return list(scan_sets(root).sets)

"""Composing a new set from registered sets (``quantkit calibset compose``), e.g. day + night.

The new folder is built in a sibling and renamed into place (:func:`quantkit._io.atomic_output_dir`), so it
appears complete or not at all, and is registered like any other set (:func:`.manifest.register_set`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .._io import atomic_output_dir
from ..errors import ConfigError
from .manifest import IMAGES, MANIFEST, CalibrationSet, register_set

log = logging.getLogger(__name__)


def compose_set(
    sources: Sequence[tuple[str | os.PathLike[str] | CalibrationSet, int | None]],
    dest: str | os.PathLike[str],
    *,
    name: str,
    kind: str = "calibration",
    site: str | None = None,
) -> CalibrationSet:
    """Compose a new set from registered sets: ``n`` images of each source (all when ``n`` is None), spread
    evenly over its manifest order (indices ``round(linspace(0, count - 1, n))``, so a time-ordered set is
    covered from start to end), copied to ``dest/images/<source name>_<file name>`` with their capture times
    and labels, and registered. Camera and lighting become the sources' values joined with ``+`` (sorted);
    the manifest's ``generator`` records every source's path, set id, name and image count.

    Every source is verified (re-hashed) first; the set is built in a sibling folder and renamed into place,
    so ``dest`` either appears complete or not at all.

    Returns:
        the new :class:`CalibrationSet`.

    Raises:
        ConfigError: no sources, ``n < 1``, ``n`` above a source's count, two sources with one name, or ``dest``
            exists (a set is never rewritten: compose into a new folder).
        CalibrationSetError: a source is not a registered set or its images changed since registration.
    """
    dest = Path(dest)
    if not sources:
        raise ConfigError("compose: give at least one source set (--from SET[:N])")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name or ""):
        raise ConfigError(f"compose name {name!r}: use letters, digits and . _ + - only (it names files), e.g. cam1-day+night")
    if dest.exists():
        raise ConfigError(f"{dest}: already exists; a set is never rewritten, compose into a new folder")
    inside = next((p for p in dest.absolute().parents if (p / MANIFEST).is_file()), None)
    if inside is not None:
        raise ConfigError(f"{dest}: inside the registered set {inside}; compose into a folder outside any set")
    loaded: list[tuple[CalibrationSet, int]] = []
    for src, n in sources:
        cs = src if isinstance(src, CalibrationSet) else CalibrationSet.load(src)
        cs.verify()
        take = cs.count if n is None else int(n)
        if take < 1 or take > cs.count:
            raise ConfigError(f"{cs.root}: asked for {take} images, the set has {cs.count}; use 1..{cs.count}")
        loaded.append((cs, take))
    names = [cs.name for cs, _ in loaded]
    if len(set(names)) != len(names):
        raise ConfigError(f"compose: source set names must differ (they prefix the copied files); got {', '.join(names)}")
    with atomic_output_dir(dest, marker=False) as tmp:
        (tmp / IMAGES).mkdir()
        labels: dict[str, Any] = {}
        captured: dict[str, str] = {}
        composition = []
        for cs, take in loaded:
            idx = sorted({int(i) for i in np.rint(np.linspace(0, cs.count - 1, take))})
            prefix = re.sub(r"[^A-Za-z0-9._+-]", "_", cs.name)
            for e in (cs.entries[i] for i in idx):
                rel = f"{IMAGES}/{prefix}_{Path(e.file).name}"
                shutil.copyfile(cs.root / e.file, tmp / rel)
                if e.labels is not None:
                    labels[rel] = dict(e.labels)
                if e.captured_at:
                    captured[rel] = e.captured_at
            composition.append({"path": str(cs.root), "set_id": cs.set_id, "name": cs.name, "camera": cs.camera,
                                "lighting": cs.lighting, "site": cs.site, "images": len(idx), "of": cs.count})
        sites = sorted({cs.site for cs, _ in loaded})
        res = register_set(tmp, name=name, kind=kind, camera="+".join(sorted({cs.camera for cs, _ in loaded})),
                           lighting="+".join(sorted({cs.lighting for cs, _ in loaded})), site=site or "+".join(sites),
                           captured_at=captured, labels=labels or None,
                           generator={"tool": "quantkit calibset compose", "composition": composition})
    log.info("composed %s from %s: %d images, set_id %s", dest, ", ".join(names), res.set.count, res.set.set_id[:12])
    return CalibrationSet.load(dest)

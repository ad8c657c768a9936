"""Which calibration sets cover the conditions a drift check flagged.

The drift check (``work/drift/<site>.json``) names, per site set, its camera and lighting and whether it
recommends recalibration. :func:`covering_sources` turns that into the sources of a composed calibration
set: the deployed calibration set, plus, for each flagged (camera, lighting), the registered set of the
pool with the same camera and lighting. Conditions no pool set matches are returned as such (the composed
set cannot cover them; someone has to capture images there).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from ..artifacts.drift import DriftResult
from ..errors import ConfigError
from .manifest import CalibrationSet


@dataclasses.dataclass(frozen=True)
class Coverage:
    """``sources``: ``(set, images)`` to compose, the base first; ``flagged``: site sets the drift check
    flagged, as ``(name, camera, lighting)``; ``uncovered``: flagged ``(camera, lighting)`` no set matches."""

    sources: tuple[tuple[CalibrationSet, int | None], ...]
    flagged: tuple[tuple[str, str, str], ...]
    uncovered: tuple[tuple[str, str], ...]


def _drift_files(drift: Sequence[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for d in drift:
        p = Path(d)
        if p.is_dir():
            files += sorted(p.glob("*.json"))
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"{p}: no drift result here; run 'quantkit drift' (dvc repro drift) first")
    if not files:
        raise ConfigError(f"{', '.join(map(str, drift))}: no drift results (*.json); run 'quantkit drift' first")
    return files


def covering_sources(base: tuple[str | os.PathLike[str] | CalibrationSet, int | None], drift: Sequence[str | os.PathLike[str]],
                     pool: Sequence[str | os.PathLike[str] | CalibrationSet]) -> Coverage:
    """The sources of a set covering every condition the drift results flag (see the module docstring).

    Args:
        base: the set everything is compared with (the deployed calibration set) and its image count
            (None: all); it is always the first source.
        drift: drift result files or folders of them.
        pool: registered calibration sets to pick from; each flagged condition takes the first (in the given
            order) with the same camera and lighting, the base's image count.

    Raises:
        ConfigError: no drift results, a pool set with the base's condition named twice, etc.
        InputFileError: a drift result or set that cannot be read.
    """
    bset = base[0] if isinstance(base[0], CalibrationSet) else CalibrationSet.load(base[0])
    sets = [p if isinstance(p, CalibrationSet) else CalibrationSet.load(p) for p in pool]
    flagged: list[tuple[str, str, str]] = []
    for f in _drift_files(drift):
        r = DriftResult.load(f)
        if r.changed:
            flagged.append((r.site_set.name or f.stem, r.site_set.camera, r.site_set.lighting))
    sources: list[tuple[CalibrationSet, int | None]] = [(bset, base[1])]
    covered = {(bset.camera, bset.lighting)}
    uncovered: list[tuple[str, str]] = []
    for _, cam, light in flagged:
        if (cam, light) in covered:
            continue
        match = next((s for s in sets if (s.camera, s.lighting) == (cam, light)), None)
        if match is None:
            if (cam, light) not in uncovered:
                uncovered.append((cam, light))
            continue
        n = None if base[1] is None else min(base[1], match.count)
        sources.append((match, n))
        covered.add((cam, light))
    return Coverage(tuple(sources), tuple(flagged), tuple(uncovered))


__all__ = ["Coverage", "covering_sources"]

"""What the DVC pipeline (``dvc.yaml``) writes, read with DVC's own loader (``foreach``/``matrix`` and ``${...}``
resolved against the params exactly as ``dvc repro`` resolves them).

A user's file must never be one of these: ``dvc repro`` deletes a stage's outputs before running it.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError



def stage_outputs(root: str | os.PathLike[str]) -> dict[Path, str]:
    """``{absolute output path: stage name}`` of every stage in ``root/dvc.yaml`` (empty when there is none).

    Uses ``dvc.repo.Repo(root, uninitialized=True).index`` (works without ``dvc init``).

    Raises:
        ConfigError: DVC cannot read ``dvc.yaml`` (its first message line; e.g. a ``${...}`` the params lack).
    """
    base = Path(root).resolve()
    if not (base / "dvc.yaml").is_file():
        return {}
    from dvc.repo import Repo

    try:
        with Repo(str(base), uninitialized=True) as repo:
            return {Path(o.fs_path).resolve(): s.name for s in repo.index.stages for o in s.outs}
    except Exception as e:  # noqa: BLE001  (DVC's errors share no public base beyond DvcException, not always raised)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{base / 'dvc.yaml'}: DVC cannot read it ({first}); fix dvc.yaml or params.yaml first") from None


def written_by(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> tuple[Path, str] | None:
    """The ``(output, stage)`` of ``root/dvc.yaml`` that is ``path`` or a folder holding it, or None."""
    p = Path(path).resolve()
    for out, stage in stage_outputs(root).items():
        if p == out or out in p.parents:
            return out, stage
    return None

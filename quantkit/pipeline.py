"""What the DVC pipeline (``dvc.yaml``) writes, read with DVC's own loader (``foreach``/``matrix`` and ``${...}``
resolved against the params exactly as ``dvc repro`` resolves them).

A user's file must never be one of these: ``dvc repro`` deletes a stage's outputs before running it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError


ORT_TARGET = "onnxruntime"
"""The target runtime whose file the main job judges on the site sets (evaluate, drift and the fleet run ONNX Runtime)."""


def deployed_files(work: str | os.PathLike[str], *, chosen: bool) -> tuple[Path, Path]:
    """``(quantize folder, threshold set)`` of a model's deployed INT8 under its work folder ``work`` (dvc.yaml's layout):
    with ``chosen``, the file chosen for ONNX Runtime and its thresholds (``targets/onnxruntime/quantize``,
    ``targets/onnxruntime/thresholds.json``: the recipe ONNX Runtime runs, which evaluate, drift and the fleet judge), else
    the deployed calibration's own file (``quantize/deployed``, ``thresholds/deployed.json``)."""
    w = Path(work)
    if chosen:
        return w / "targets" / ORT_TARGET / "quantize", w / "targets" / ORT_TARGET / "thresholds.json"
    return w / "quantize" / "deployed", w / "thresholds" / "deployed.json"


def stage_outputs(root: str | os.PathLike[str], params: Mapping[str, Any] | None = None) -> dict[Path, str]:
    """``{absolute output path: stage name}`` of every stage in ``root/dvc.yaml`` (empty when there is none).

    Uses ``dvc.repo.Repo(root, uninitialized=True).index`` (works without ``dvc init``). With ``params``, the stages
    are resolved against those params instead of ``root/params.yaml`` (e.g. with a model entry about to be added, whose
    own stages then count): ``dvc.yaml`` and the params are laid in a temporary folder and the outputs mapped back.

    Raises:
        ConfigError: DVC cannot read ``dvc.yaml`` (its first message line; e.g. a ``${...}`` the params lack).
    """
    base = Path(root).resolve()
    if not (base / "dvc.yaml").is_file():
        return {}
    if params is None:
        return _outputs(base, base)
    import yaml

    with tempfile.TemporaryDirectory(prefix="quantkit-dvc-") as tmp:
        shutil.copyfile(base / "dvc.yaml", Path(tmp) / "dvc.yaml")
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(dict(params), sort_keys=False), encoding="utf-8")
        return _outputs(Path(tmp).resolve(), base)


def _outputs(where: Path, base: Path) -> dict[Path, str]:
    from dvc.repo import Repo

    try:
        with Repo(str(where), uninitialized=True) as repo:
            return {base / Path(o.fs_path).resolve().relative_to(where): s.name for s in repo.index.stages for o in s.outs}
    except Exception as e:  # noqa: BLE001  (DVC's errors share no public base beyond DvcException, not always raised)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{base / 'dvc.yaml'}: DVC cannot read it ({first}); fix dvc.yaml or params.yaml first") from None


def written_by(path: str | os.PathLike[str], root: str | os.PathLike[str],
               params: Mapping[str, Any] | None = None) -> tuple[Path, str] | None:
    """The ``(output, stage)`` of ``root/dvc.yaml`` (resolved against ``params`` when given, see
    :func:`stage_outputs`) that is ``path`` or a folder holding it, or None."""
    p = Path(path).resolve()
    for out, stage in stage_outputs(root, params).items():
        if p == out or out in p.parents:
            return out, stage
    return None

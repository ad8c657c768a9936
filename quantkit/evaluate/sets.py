"""Every site set of a folder of sets, evaluated into one folder: ``out/<set name>/`` each (the main job's per-model
``evaluate`` stage over the model's ``sets.site`` folder)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .._io import atomic_output_dir
from ..calibset.model_sets import set_folders
from ..tasks.base import TaskAdapter
from .run import EvalResult, evaluate


def evaluate_sets(sets_dir: str | os.PathLike[str], fp32_dir: str | os.PathLike[str],
                  quantized: Mapping[str, tuple[str | os.PathLike[str], str | os.PathLike[str]]],
                  task: TaskAdapter, out: str | os.PathLike[str], *, min_agreement: float = 0.5,
                  near_line_steps: int = 3) -> list[EvalResult]:
    """:func:`~quantkit.evaluate.run.evaluate` on each set of ``sets_dir`` (a folder whose subfolders are sets), each
    into ``out/<subfolder name>/``; ``out`` is written whole or not at all (any set failing leaves it as it was).

    Returns:
        One result per set, sorted by set folder name; each result's ``path`` names where it will be once written.

    Raises:
        InputFileError: ``sets_dir`` holds no set; as :func:`~quantkit.evaluate.run.evaluate` for each set.
    """
    sets = set_folders(sets_dir)
    inputs = [sets_dir, fp32_dir, *(p for pair in quantized.values() for p in pair)]
    results = []
    with atomic_output_dir(out, command="evaluate", inputs=inputs) as tmp:
        for s in sets:
            r = evaluate(s, fp32_dir, quantized, task, tmp / s.name, min_agreement=min_agreement, near_line_steps=near_line_steps)
            results.append(EvalResult(Path(out) / s.name, r.summary, r.low_agreement))
    return results

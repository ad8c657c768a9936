"""One model's outputs over an image set, kept for threshold searches (every model runs once per image)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..note import ExportNote, Transform
from ..progress import progress
from ..tasks import Decision, TaskAdapter


@dataclasses.dataclass(frozen=True, repr=False)
class ModelPass:
    """Outputs of one model over a set, one image at a time: ``outputs[i]`` is ``{name: array}`` (batch 1).

    ``truth[i]``: the image's ground truth decoded by the task (model-input pixels), None when unlabelled;
    ``labelled``: the images carried labels for this task at all (an empty list of boxes is a label: a
    negative image).
    """

    files: tuple[str, ...]
    outputs: tuple[dict[str, np.ndarray], ...]
    transforms: tuple[Transform, ...]
    latency_ms: tuple[float, ...]
    truth: tuple[Decision | None, ...]

    def __len__(self) -> int:
        return len(self.files)

    @property
    def labelled(self) -> bool:
        return len(self) > 0 and all(t is not None for t in self.truth)

    @property
    def negatives_only(self) -> bool:
        """Every image is labelled and holds no positive item (what ``fixed_far`` needs)."""
        return self.labelled and all(len(t) == 0 for t in self.truth)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"ModelPass({len(self)} images)"


def run_pass(model: str | os.PathLike[str], set_dir: str | os.PathLike[str], note: ExportNote, task: TaskAdapter, *,
             desc: str = "") -> ModelPass:
    """Run ``model`` once per image of the set at ``set_dir`` (batch 1, streaming) and keep the outputs.

    Raises:
        CalibrationSetError: the set is missing, empty or has an unreadable image.
        ModelError: the model cannot be loaded, or its outputs do not fit the task's layout.
    """
    from ..calibset import CalibrationSet
    from ..calibset.reader import CalibrationSetReader
    from ..runner import OrtRunner

    cset = CalibrationSet.load(set_dir)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    files: list[str] = []
    outs: list[dict[str, Any]] = []
    tfs: list[Transform] = []
    lat: list[float] = []
    truth: list[Decision | None] = []
    with OrtRunner(model) as runner:
        for entries, x, transforms in progress(reader.iter_with_transforms(), total=len(reader), desc=desc or Path(model).name):
            out = runner.infer({note.preprocessing.input_name: x})
            if not outs:
                task.check_outputs({k: list(v.shape) for k, v in out.items()})
            files.append(entries[0].file)
            outs.append(out)
            tfs.append(transforms[0])
            lat.append(runner.inference_times[-1] * 1e3)
            truth.append(task.truth(entries[0].labels, transforms[0]))
    return ModelPass(tuple(files), tuple(outs), tuple(tfs), tuple(lat), tuple(truth))

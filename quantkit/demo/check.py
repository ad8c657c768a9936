"""Does the FP32 model find what the demo rendered? Its accuracy against a labelled set's ground truth.

The model runs on inputs from :class:`quantkit.calibset.CalibrationSetReader` (the given preprocessing); the task
adapter decodes its outputs and compares them with the set's labels (:meth:`quantkit.tasks.TaskAdapter.truth`,
:meth:`~quantkit.tasks.TaskAdapter.accuracy`): for the DB text detector, polygons matched one-to-one at IoU >=
``match_iou`` (precision, recall, F1).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..errors import CalibrationSetError


@dataclasses.dataclass(frozen=True)
class AccuracyResult:
    """The task's accuracy metrics (pooled over ``images``) and the summed counts behind them."""

    images: int
    task: str
    metrics: dict[str, float | None]  # None: nothing to count (e.g. precision when nothing was detected)
    counts: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={'n/a' if v is None else f'{v:.3f}'}" for k, v in self.metrics.items())
        return f"AccuracyResult({self.task}, {self.images} images, {vals})"


def check_accuracy(cset: Any, model: str | os.PathLike[str], task: Any, *, preprocessing: Any = None,
                   limit: int | None = None) -> AccuracyResult:
    """Run ``model`` over (the first ``limit`` images of) ``cset`` and compare its decisions with the labels.

    Args:
        task: a :class:`quantkit.tasks.TaskAdapter` at the thresholds to check.
        preprocessing: the model's :class:`quantkit.note.Preprocessing` (default: PP-OCR det's).

    Raises:
        CalibrationSetError: an image carries no ground truth for the task.
        ModelError: the model cannot be loaded, or its outputs do not fit the task.
    """
    from ..calibset.reader import CalibrationSetReader
    from ..modelio import load_model
    from ..note import Preprocessing
    from ..runner import OrtRunner

    pre = preprocessing or Preprocessing()
    task = task.with_model(load_model(model, load_external_data=False))
    sub = cset if limit is None else dataclasses.replace(cset, entries=cset.entries[:limit])
    counts: dict[str, float] = {}
    decisions: list[Any] = []
    n = 0
    with OrtRunner(model) as runner:
        for entries, x, tfs in CalibrationSetReader(sub, pre).iter_with_transforms():
            out = runner.infer({pre.input_name: x})
            truth = task.truth(entries[0].labels, tfs[0])
            if truth is None:
                raise CalibrationSetError(f"{cset.root / entries[0].file}: no labels.{task.LABELS}; the check needs a labelled (demo) set")
            got = task.decide(out)
            if len(decisions) < 64:  # enough to see a misread head (task.check_reference); masks are not kept for every image
                decisions.append(got)
            for k, v in task.accuracy(truth, got).items():
                counts[k] = counts.get(k, 0.0) + v
            n += 1
    task.check_reference(decisions)
    # a metric with nothing to count (precision with no detection, mean IoU with no match) is undefined: None, not its
    # `empty` value (1.0 reads as perfect)
    return AccuracyResult(n, task.name, {m.name: round(float(m.value(counts)), 6) if counts.get(m.den, 0.0) > 0 else None
                                         for m in task.ACCURACY}, counts)

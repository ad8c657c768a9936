"""Classification: scores ``[N, C]`` or ``[N, C, 1, 1]`` -> one class per image (fires when its score passes ``cls_thresh``).

Agreement with FP32: top-1 agreement (the same argmax class; primary) and decision F1 (both fire, with the
same class); against a ground-truth ``labels.class``: top-1 accuracy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError
from .base import (
    DecisionTensor,
    MetricSpec,
    Outputs,
    Shapes,
    TaskAdapter,
    ThresholdSpec,
)
from .decision import Decision, empty_decision
from .matching import item_counts
from .registry import register_adapter

TOP1 = MetricSpec("top1", "top-1 agreement vs FP32", "top1_same", "images",
                  description="share of images where the quantized model picks the same class as FP32")
DECISION_F1 = MetricSpec("decision_f1", "decision F1 vs FP32", "agree_f1_num", "agree_f1_den",
                         description="how often both models fire (score above the threshold) with the same class")
ACC = MetricSpec("top1_accuracy", "top-1 accuracy", "top1_correct", "labelled",
                 description="share of labelled images whose class is the labelled one")


def _no_geometry(n: int) -> np.ndarray:
    return np.zeros((n, 0, 2), np.float32)


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class ClassifierAdapter(TaskAdapter):
    """Classification: scores ``[N, C]`` or ``[N, C, 1, 1]`` (softmax probabilities, or logits with ``softmax: true``).

    One item per image, label = argmax, kept when its score ``> cls_thresh`` (rapidocr's ``TextClassifier``
    rule: ``score > self.cls_thresh``; default 0.9). ``positive_class`` (>= 0) restricts items to that class
    (e.g. 1 = '180' for PP-OCR's direction classifier: the decision that rotates a crop).
    """

    name: ClassVar[str] = "classifier"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (ThresholdSpec("cls_thresh", True, ">", "none", (0.5, 0.999), objective="decision_f1"),)
    PRIMARY: ClassVar[str] = "cls_thresh"
    AGREEMENT: ClassVar[tuple[MetricSpec, ...]] = (TOP1, DECISION_F1)
    ACCURACY: ClassVar[tuple[MetricSpec, ...]] = (ACC,)
    LABELS: ClassVar[str] = "class"
    SCORES: ClassVar[str] = "top-1 probability"
    ITEM: ClassVar[str] = "class decision"

    cls_thresh: float = 0.9
    softmax: bool = False
    positive_class: int = -1

    def validate(self) -> None:
        if not 0.0 <= self.cls_thresh <= 1.0:
            raise ConfigError(f"task.options.cls_thresh: {self.cls_thresh} must be in [0, 1]")

    def check_outputs(self, shapes: Shapes) -> None:
        name, shape = self._output_shape(shapes)
        extra = shape[2:]
        if len(shape) < 2 or any(isinstance(d, int) and d != 1 for d in extra) or (isinstance(shape[1], int) and shape[1] < 2):
            raise self.layout_error(name, shape, "classifier [N, C] scores (C >= 2)", "pick the scores output with task.options.output "
                                    "or declare the model's task (a [1, T, C] sequence is a 'ctc_text' recognizer)")
        if self.positive_class >= 0 and isinstance(shape[1], int) and self.positive_class >= shape[1]:
            raise ConfigError(f"task.options.positive_class: {self.positive_class} but output {name!r} has {shape[1]} classes")

    def probabilities(self, outputs: Outputs) -> np.ndarray:
        """``(C,) float32`` class probabilities of a batch-of-one output."""
        arr = self.select_output(outputs)
        if arr.ndim < 2 or arr.shape[0] != 1 or any(d != 1 for d in arr.shape[2:]):
            raise self.layout_error(self.output or "output 0", list(arr.shape), "classifier [1, C] or [1, C, 1, 1] scores",
                                    "run one image per inference and pick the scores output")
        p = np.asarray(arr, np.float32).reshape(-1)
        if self.softmax:
            from scipy.special import softmax

            p = softmax(p).astype(np.float32)
        return p

    def _decide(self, outputs: Outputs) -> Decision:
        p = self.probabilities(outputs)
        if self.positive_class >= p.shape[0]:
            raise ConfigError(f"task.options.positive_class: {self.positive_class} but the model has {p.shape[0]} classes")
        label = int(np.argmax(p))
        top = (label, "")
        if self.positive_class >= 0 and label != self.positive_class:
            return empty_decision(points=0, top=top)
        item = Decision(_no_geometry(1), p[[label]], np.array([label], np.int64), top=top)
        return item.select(self.keep(item.scores, self.cls_thresh))

    def histogram_values(self, outputs: Outputs, candidates: Decision | None = None) -> np.ndarray:
        return np.asarray([self.probabilities(outputs).max()], np.float32)

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        name, _ = self._output_shape(shapes)
        return () if self.softmax else (DecisionTensor(name, None, 0, 1, 0.0, 1.0, "class probabilities"),)

    def tensor_value(self, spec: ThresholdSpec, value: float) -> float | None:
        """The threshold itself on a probabilities output; None on logits (a softmax is not elementwise)."""
        return None if self.softmax else float(value)

    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:
        same = ref.top is not None and got.top is not None and ref.top[0] == got.top[0]
        both = len(ref) > 0 and len(got) > 0 and int(ref.labels[0]) == int(got.labels[0])
        return {"top1_same": float(same), "images": 1.0, **item_counts("agree", int(both), len(got), len(ref))}

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        cls = (labels or {}).get(self.LABELS)
        if cls is None:
            return None
        if isinstance(cls, bool) or not isinstance(cls, int) or cls < 0:
            raise ValueError(f"'{self.LABELS}': {cls!r} is not a class index (a whole number from 0)")
        return Decision(_no_geometry(1), np.ones(1, np.float32), np.array([int(cls)], np.int64), top=(int(cls), ""))

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        return {"top1_correct": float(got.top is not None and truth.top is not None and got.top[0] == truth.top[0]), "labelled": 1.0}

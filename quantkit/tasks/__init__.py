"""Task adapters: what a model's outputs mean (decoding, agreement with FP32, thresholds). See :mod:`.base`.

Built in: ``db_text`` (:mod:`.maps`), ``box_detector`` (:mod:`.boxes`), ``classifier`` (:mod:`.classify`).
User adapters register through the ``quantkit.tasks`` entry-point group.
"""

from __future__ import annotations

from .base import (ADAPTERS, Decision, DecisionTensor, MetricSpec, TaskAdapter, ThresholdSpec, adapter_class, empty_decision,
                   make_adapter, register_adapter)
from .builtin import boxes, classify, maps  # noqa: F401
from .config import TaskConfig

__all__ = ["ADAPTERS", "Decision", "DecisionTensor", "MetricSpec", "TaskAdapter", "TaskConfig", "ThresholdSpec", "adapter_class",
           "empty_decision", "make_adapter", "register_adapter"]

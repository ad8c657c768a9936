"""Task adapters: what a model's outputs mean (decoding, agreement with FP32, thresholds). See :mod:`.base`.

Built in (``params.yaml: task.adapter``):

* ``db_text`` (:mod:`.maps`): PP-OCR DB text detection map;
* ``segmentation`` (:mod:`.segmentation`): binary segmentation map, regions as connected components;
* ``box_detector`` (:mod:`.boxes`): YOLO rows / raw grid heads (YOLOX, YOLOv5), YOLOv8 channels, SSD/RT-DETR
  separate boxes and scores;
* ``classifier`` (:mod:`.classify`): ``[N, C]`` scores;
* ``ctc_text`` (:mod:`.ctc`): CTC text recognizer (PP-OCR rec) with the model's own character list.

User adapters
-------------
Subclass :class:`TaskAdapter` as a frozen dataclass: set ``name``, ``THRESHOLDS``, ``PRIMARY``, ``AGREEMENT``
(primary metric first; every metric a ratio of sums of the counts ``agreement`` returns), optionally
``ACCURACY``/``LABELS``, and implement ``check_outputs``, ``_decide`` and ``agreement``. Then either

* register it in code: decorate the class with :func:`register_adapter` and import its module before use, or
* publish it from your package through the ``quantkit.tasks`` entry-point group, found on first use::

      # pyproject.toml of your package
      [project.entry-points."quantkit.tasks"]
      my_task = "my_pkg.tasks:MyAdapter"

and select it with ``task: {adapter: my_task, options: {...}}`` in ``params.yaml``. The entry-point name is the
adapter's name; a broken entry point is logged and skipped, never breaks the built-in tasks.
"""

from __future__ import annotations

from .base import DecisionTensor, MetricSpec, TaskAdapter, ThresholdSpec
from .builtin import boxes, classify, ctc, maps, segmentation  # noqa: F401
from .config import TaskConfig
from .decision import Decision, empty_decision
from .registry import ADAPTERS, adapter_class, make_adapter, register_adapter

__all__ = ["ADAPTERS", "Decision", "DecisionTensor", "MetricSpec", "TaskAdapter", "TaskConfig", "ThresholdSpec", "adapter_class",
           "empty_decision", "make_adapter", "register_adapter"]

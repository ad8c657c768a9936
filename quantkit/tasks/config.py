"""``params.yaml: task``: which task adapter reads the model's outputs, with its options and FP32 thresholds."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import Config
from .base import TaskAdapter
from .registry import make_adapter


@dataclasses.dataclass(frozen=True)
class TaskConfig(Config):
    """The task of a model: ``adapter`` (a registered name: ``db_text``, ``box_detector``, ``classifier``, ...)
    and its ``options`` (output layout, decoding settings and the FP32 thresholds), validated by the adapter; an
    option left out takes the adapter's default (``db_text``: ``thresh`` 0.3, ``box_thresh`` 0.5, ``unclip_ratio``
    1.6, rapidocr's), so ``task: {adapter: classifier}`` alone is a complete section."""

    adapter: str = "db_text"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        self.make()

    def make(self) -> TaskAdapter:
        """The adapter at the FP32 thresholds. Raises ConfigError for an unknown adapter or option."""
        return make_adapter(self.adapter, self.options)

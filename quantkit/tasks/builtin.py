"""Imports the built-in task adapters so they register themselves (see :func:`quantkit.tasks.registry.adapter_class`)."""

from . import boxes, classify, ctc, maps, segmentation  # noqa: F401

"""A Dask worker plugin for the fleet tests: the first worker to start a fleet shard dies (once, marker file)."""

from __future__ import annotations

import os
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


class KillOnce(WorkerPlugin):
    """Exits the worker process (``os._exit``) when a ``fleet-shard`` task starts executing, the first time only."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish == "executing" and str(key).startswith("fleet-shard"):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            os._exit(1)

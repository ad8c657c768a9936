"""A Dask worker preload for the interrupt tests (``distributed.worker.preload: [slow_shards]``): every fleet shard
takes at least ``SLOW_SHARDS_S`` seconds (default 1), so a test can interrupt a run with some shards finished and
others not. Dask unpickles the shard task ``quantkit.fleet.scorer.run_shard`` by name, so it finds this wrapper."""

from __future__ import annotations

import os
import time
from typing import Any

import quantkit.fleet.scorer as scorer

_real = scorer.run_shard


def _slow(*args: Any, **kwargs: Any) -> Any:
    time.sleep(float(os.environ.get("SLOW_SHARDS_S", "1")))
    return _real(*args, **kwargs)


scorer.run_shard = _slow

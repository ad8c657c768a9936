"""Where ``fleet score``'s Dask tasks run: the client of an attached scheduler or of an embedded ``LocalCluster``
(:func:`start_client`), its quiet stop after an interrupt (:func:`stop_quietly`), and the embedded workers' preload
(:func:`dask_setup`, this module): they ignore Ctrl-C.

Ctrl-C in a terminal sends SIGINT to the whole process group, the embedded cluster's worker processes included. A
worker must not act on it: each would print a ``KeyboardInterrupt`` traceback, and the driver already stops them
(it closes the cluster; finished shards stay on disk). Only the embedded cluster preloads this module; the workers
of an attached cluster are their owner's.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any

from ..errors import InputFileError
from ..extras import require


def dask_setup(worker: Any) -> None:
    """Dask preload hook: ignore SIGINT in this worker process (Dask calls it in the worker's main thread at start)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


WORKER_SETUP = "quantkit.fleet.cluster"
"""Preloaded by the embedded cluster's workers: they ignore Ctrl-C, which the driver handles (:func:`dask_setup`)."""


def start_client(workers: int, scheduler: str | None) -> tuple[Any, Any]:
    """``(client, cluster)``: a client of the scheduler at ``scheduler`` (cluster None), else of a new embedded
    ``LocalCluster`` of ``workers`` single-threaded worker processes that preload this module.

    Raises:
        InputFileError: no Dask scheduler answers at ``scheduler``.
    """
    dask = require("dask", "fleet", "quantkit fleet")
    distributed = require("distributed", "fleet", "quantkit fleet")
    Client, LocalCluster = distributed.Client, distributed.LocalCluster

    if scheduler:
        try:  # Dask's own connect timeout (distributed.comm.timeouts.connect, default 30 s)
            return Client(scheduler, timeout=dask.config.get("distributed.comm.timeouts.connect")), None
        except (OSError, TimeoutError) as e:
            raise InputFileError(f"--scheduler {scheduler}: no Dask scheduler answers ({e}); start one with 'dask scheduler'") from None
    logging.getLogger("distributed").setLevel(logging.WARNING)  # its INFO lines (scheduler, nanny) are not ours to show
    # The embedded scheduler lives in this process: keep its debugging transition log short (Dask's default of 1,000
    # entries holds ~10 MB of task records), so the driver's memory does not grow with the number of shards.
    preload = [*dask.config.get("distributed.worker.preload", []), WORKER_SETUP]
    argv = dask.config.get("distributed.worker.preload-argv", [])
    argv = [*argv, []] if argv and not isinstance(argv[0], str) else argv  # one argv per preload, when given per preload
    with dask.config.set({"distributed.admin.low-level-log-length": 100, "distributed.worker.preload": preload,
                          "distributed.worker.preload-argv": argv}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
    return Client(cluster), cluster


def stop_quietly(client: Any, cluster: Any) -> None:
    """Close the client and the embedded cluster after an interrupt, with Dask's own logging off meanwhile: its
    shutdown warnings and tracebacks (cancelled tasks, workers killed mid-shard) describe the interrupt the
    user made, not a fault. A second Ctrl-C here abandons the shutdown; the worker processes end with this one."""
    loggers = [logging.getLogger(n) for n in ("distributed", "asyncio", "tornado")]  # asyncio: futures of dead connections
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        for closable in (client, cluster):
            if closable is not None:
                with contextlib.suppress(Exception):
                    closable.close()
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)

"""Progress for long work: a tqdm bar on a terminal, log lines everywhere else (CI, nohup, cron).

Library code calls :func:`progress`; it never prints. On a terminal (stderr is a TTY) it is tqdm (already
a DVC dependency) with count, rate and ETA. Otherwise :class:`LogProgress` writes INFO lines to the
``quantkit.progress`` logger (the CLI shows them by default):

* a start line once the work has run for :data:`QUIET_S` seconds (work that finishes sooner logs nothing,
  so quick commands and their one-line errors stay as they are);
* a progress line about every :data:`INTERVAL_S` seconds: count, share of the total, rate, elapsed, ETA;
* an end line (``done``, or ``stopped`` when the loop ended early or on an error); work that ends just as
  it passes :data:`QUIET_S` logs the end line only.

Lines are written when an item completes, so an item that itself runs longer than the interval delays
the next line until it is done.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable, Iterable, Iterator, TypeVar

from tqdm import tqdm

T = TypeVar("T")

log = logging.getLogger("quantkit.progress")

INTERVAL_S = 30.0
"""Seconds between progress lines off a terminal."""
QUIET_S = 10.0
"""Work shorter than this logs nothing off a terminal (quick commands and their one-line errors stay as
they are; a multi-minute stage is announced after 10 s)."""


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s"


class LogProgress:
    """Iterate ``iterable`` and log start / progress / end lines (see the module docstring).

    Args:
        iterable: the work items.
        total: number of items, if known (gives the share and the ETA).
        desc: what is being done (starts every line).
        unit: what an item is (``img``, ``chunk``, ``round`` ...).
        clock: monotonic seconds (``time.monotonic``; a fake in tests).
        interval: seconds between progress lines; ``quiet``: seconds before the start line.
        logger: where lines go (``quantkit.progress``).
    """

    def __init__(self, iterable: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "img",
                 clock: Callable[[], float] = time.monotonic, interval: float | None = None, quiet: float | None = None,
                 logger: logging.Logger = log) -> None:
        self.iterable = iterable
        self.total = total
        self.desc = desc or "working"
        self.unit = unit
        self.clock = clock
        self.interval = INTERVAL_S if interval is None else interval  # read at call time (tests shorten them)
        self.quiet = QUIET_S if quiet is None else quiet
        self.logger = logger
        self.n = 0

    def _status(self, elapsed: float) -> str:
        rate = self.n / elapsed if elapsed > 0 else 0.0
        done = f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n} {self.unit}"
        eta = ""
        if self.total and rate > 0:
            eta = f", ETA {_duration((self.total - self.n) / rate)}"
        return f"{done}, {rate:.3g} {self.unit}/s, elapsed {_duration(elapsed)}{eta}"

    def __iter__(self) -> Iterator[T]:
        start = last = self.clock()
        started = finished = False
        try:
            for item in self.iterable:
                yield item
                self.n += 1
                now = self.clock()
                at_end = bool(self.total) and self.n >= self.total  # the end line follows at once
                if not started and now - start >= self.quiet:
                    started, last = True, now
                    if not at_end:
                        of = f" of {self.total} {self.unit}" if self.total else ""
                        self.logger.info("%s: started%s; %s", self.desc, of, self._status(now - start))
                elif started and now - last >= self.interval and not at_end:
                    last = now
                    self.logger.info("%s: %s", self.desc, self._status(now - start))
            finished = True
        finally:
            if started:
                elapsed = self.clock() - start
                word = "done" if finished else "stopped"
                self.logger.info("%s: %s, %d %s in %s (%.3g %s/s)", self.desc, word, self.n, self.unit, _duration(elapsed),
                                 self.n / elapsed if elapsed > 0 else 0.0, self.unit)


def _stderr_is_tty() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # closed or replaced stderr
        return False


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "img") -> Iterator[T]:
    """Wrap ``iterable``: a tqdm bar on a terminal (count, rate, ETA), :class:`LogProgress` lines otherwise."""
    if _stderr_is_tty():
        yield from tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)
    else:
        yield from LogProgress(iterable, total=total, desc=desc, unit=unit)


class Ticker(LogProgress):
    """Progress of work that is not one loop of ours (e.g. the calls another library makes to a callback): ``update(n)``
    as each item completes, ``close()`` at the end; the same lines as :class:`LogProgress` off a terminal (start after
    :data:`QUIET_S`, one about every :data:`INTERVAL_S`, an end line), a tqdm count on a terminal. A context manager."""

    def __init__(self, *, total: int | None = None, desc: str = "", unit: str = "img",
                 clock: Callable[[], float] = time.monotonic, logger: logging.Logger = log) -> None:
        super().__init__((), total=total, desc=desc, unit=unit, clock=clock, logger=logger)
        self.bar = tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True) if _stderr_is_tty() else None
        self.start = self.last = clock()
        self.started = False

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = self.clock()
        if not self.started and now - self.start >= self.quiet:
            self.started, self.last = True, now
            self.logger.info("%s: started; %s", self.desc, self._status(now - self.start))
        elif self.started and now - self.last >= self.interval:
            self.last = now
            self.logger.info("%s: %s", self.desc, self._status(now - self.start))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.started:
            elapsed = self.clock() - self.start
            self.logger.info("%s: done, %d %s in %s", self.desc, self.n, self.unit, _duration(elapsed))

    def __enter__(self) -> Ticker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Progress for long work: counts and rate on a terminal, silent when stderr is not a terminal.

Built on tqdm (already a DVC dependency). ``disable=None`` is tqdm's own rule for "only on a TTY".
Library code calls :func:`progress`; it never prints.
"""

from __future__ import annotations

from typing import Iterable, Iterator, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "img") -> Iterator[T]:
    """Wrap ``iterable`` with a tqdm bar on a terminal (count, rate, ETA); a no-op elsewhere."""
    yield from tqdm(iterable, total=total, desc=desc, unit=unit, disable=None, leave=False, dynamic_ncols=True)

"""Streaming model inputs from a set, in ONNX Runtime's ``CalibrationDataReader`` protocol, over a :class:`CalibrationSet`.

The protocol is duck-typed (``get_next``, ``__iter__``, ``__len__``, ``set_range``), as ORT's own
``CalibrationDataReader.__subclasshook__`` accepts, so reading a set never imports ONNX Runtime.

Order is the manifest's (sorted by file name), so every pass and every machine sees the same batches.
Batches are fixed by position: batch ``i`` holds entries ``[i*batch_size, (i+1)*batch_size)``, so
``__len__`` (number of batches) and ``set_range`` (in batch units, what ORT's ``CalibStridedMinMax``
loop passes) are known without decoding anything. Each image is decoded once per pass when its batch
is requested; only one batch is held in memory.

Bad files (the set was registered, then a file was corrupted, emptied or replaced):

* ``on_error="fail"`` (default): the first unreadable file raises :class:`CalibrationSetError` naming it.
* ``on_error="skip"``: the file is logged (WARNING, by name), recorded in :attr:`skipped`, and left out
  of its batch, which is then smaller; a batch with no readable image is passed over.

16-bit, grayscale, palette, RGBA and EXIF-rotated images are normal inputs
(:func:`quantkit.imageio.load_image` converts them to ``(H, W, 3) uint8`` RGB, EXIF applied).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterator, Literal

import numpy as np

from ..errors import CalibrationSetError, ConfigError, InputFileError
from ..note import Preprocessing, Transform
from .manifest import CalibrationSet, ImageEntry

log = logging.getLogger(__name__)


class CalibrationSetReader:
    """Batches of preprocessed images from ``cset``.

    Args:
        cset: the set to read.
        preprocessing: the model's contract (usually ``ExportNote.preprocessing``); gives the input name,
            size, resize policy, colour order, layout and normalization.
        batch_size: images per batch (>= 1). Use the model's fixed batch size.
        on_error: ``"fail"`` or ``"skip"`` (see the module docstring).

    ``get_next()`` returns ``{preprocessing.input_name: array}`` with a ``(n, 3, H, W)`` (NCHW) or
    ``(n, H, W, 3)`` (NHWC) float32 array, ``n <= batch_size``, or ``None`` at the end of the range.

    Raises:
        ConfigError: ``batch_size < 1`` or an unknown ``on_error``.
    """

    def __init__(self, cset: CalibrationSet, preprocessing: Preprocessing, batch_size: int = 1, on_error: Literal["fail", "skip"] = "fail") -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size: {batch_size} must be >= 1")
        if on_error not in ("fail", "skip"):
            raise ConfigError(f"on_error: {on_error!r} is not one of 'fail', 'skip'")
        self.cset = cset
        self.preprocessing = preprocessing
        self.batch_size = int(batch_size)
        self.on_error = on_error
        self.skipped: list[str] = []  # unreadable files seen so far (on_error="skip"), in order, unique
        self._start = 0
        self._end = len(self)
        self._it: Iterator[tuple[list[ImageEntry], np.ndarray, list[Transform]]] | None = None

    def __len__(self) -> int:
        """Number of batches over the whole set (``ceil(count / batch_size)``)."""
        return math.ceil(self.cset.count / self.batch_size)

    def set_range(self, start_index: int, end_index: int) -> None:
        """Restrict the next pass to batches ``[start_index, end_index)`` (clipped to ``len(self)``) and rewind."""
        if start_index < 0 or end_index < start_index:
            raise ConfigError(f"set_range: [{start_index}, {end_index}) is not a valid batch range")
        self._start, self._end = int(start_index), min(int(end_index), len(self))
        self._it = None

    def rewind(self) -> None:
        """Start the current range again (the next ``get_next`` decodes from its first batch)."""
        self._it = None

    def __iter__(self) -> CalibrationSetReader:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        feed = self.get_next()
        if feed is None:
            raise StopIteration
        return feed

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next batch of the current range as ``{input name: array}``, or None at its end."""
        if self._it is None:
            self._it = self._batches(self._start, self._end)
        nxt = next(self._it, None)
        if nxt is None:
            return None
        return {self.preprocessing.input_name: nxt[1]}

    def iter_batches(self) -> Iterator[tuple[list[ImageEntry], np.ndarray]]:
        """One full pass over the current range: ``(entries, batch)`` per batch, independent of ``get_next``."""
        for entries, batch, _ in self._batches(self._start, self._end):
            yield entries, batch

    def iter_with_transforms(self) -> Iterator[tuple[list[ImageEntry], np.ndarray, list[Transform]]]:
        """Like :meth:`iter_batches`, also giving each image's :class:`~quantkit.note.Transform` (to map boxes back)."""
        yield from self._batches(self._start, self._end)

    def _batches(self, start: int, end: int) -> Iterator[tuple[list[ImageEntry], np.ndarray, list[Transform]]]:
        for b in range(start, end):
            chunk = self.cset.entries[b * self.batch_size:(b + 1) * self.batch_size]
            entries, arrays, transforms = [], [], []
            for e in chunk:
                path = self.cset.root / e.file
                try:
                    x, tf = self.preprocessing.load(path)
                except InputFileError as err:
                    if self.on_error == "fail":
                        # No "on_error=skip" hint here: the commands that read sets (quantize, compare, evaluate,
                        # bind) have no such option; only the Python API does (see the module docstring).
                        raise CalibrationSetError(f"{err}; restore it (dvc pull) or register the set without it as a new version") from None
                    log.warning("skipping unreadable image %s", err)
                    if e.file not in self.skipped:
                        self.skipped.append(e.file)
                    continue
                entries.append(e)
                arrays.append(x)
                transforms.append(tf)
            if arrays:
                yield entries, np.concatenate(arrays, axis=0), transforms

    def __repr__(self) -> str:
        return f"CalibrationSetReader({self.cset.name!r}, batches={len(self)}, batch_size={self.batch_size}, on_error={self.on_error!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"set": self.cset.to_dict(), "batch_size": self.batch_size, "on_error": self.on_error,
                "range": [self._start, self._end], "skipped": list(self.skipped)}

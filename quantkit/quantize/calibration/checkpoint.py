"""Calibration checkpoints: plain arrays in one ``.npz`` file, keyed by everything the state depends on.

A checkpoint holds a calibration state (:meth:`to_arrays` of :class:`~quantkit.quantize.calibration.minmax.MinMaxState`,
:class:`~quantkit.quantize.calibration.histogram.HistogramState` or
:class:`~quantkit.quantize.calibration.fine_histogram.FineHistogramState`), the pass and the number of batches done, and
its :class:`CheckpointKey`: the float model's digest, the calibration set id, the config hash and the
onnxruntime / numpy / quantkit versions. Loading never unpickles (``np.load(allow_pickle=False)``); a file
that is unreadable or was made under another key is ignored with one log line naming what differs, and
calibration starts over.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..._io import atomic_write_bytes
from ..._overwrite import FileKind
from ...versions import tool_versions

log = logging.getLogger(__name__)

FORMAT = 3
"""Checkpoint format: 3 = npz arrays (1-2 were pickles of ORT objects, never read)."""


def is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a calibration checkpoint quantkit wrote, of any format (so a run may replace it):
    an ``.npz`` (zip) holding ``__meta__.npy``, or a pickle stream (formats 1-2). Never raises."""
    import zipfile

    try:
        with open(path, "rb") as f:
            head = f.read(1)
        if head == b"\x80":  # pickle protocol >= 2
            return True
        with zipfile.ZipFile(path) as z:
            return "__meta__.npy" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


FILE_KIND = FileKind("calibration checkpoint", is_checkpoint)
"""What a checkpoint path may replace (:func:`quantkit._overwrite.check_output_file`)."""


@dataclasses.dataclass(frozen=True)
class CheckpointKey:
    """What a calibration state depends on; a checkpoint is resumed only under an equal key."""

    model_digest: str
    set_id: str
    config_hash: str
    state: str = ""  # the state class (a method change is already in config_hash; kept for clarity)
    onnxruntime: str = ""
    numpy: str = ""
    quantkit: str = ""

    @classmethod
    def for_run(cls, model_digest: str, set_id: str, config_hash: str) -> CheckpointKey:
        """The key of a run with this model, set and config under the installed tool versions."""
        v = tool_versions(("onnxruntime", "numpy", "quantkit"))
        return cls(model_digest, set_id, config_hash, "", v["onnxruntime"], v["numpy"], v["quantkit"])

    def differences(self, other: dict[str, Any]) -> list[str]:
        """Fields whose value in ``other`` differs, as ``"field a != b"``."""
        return [f"{k} {other.get(k)!r} != {v!r}" for k, v in dataclasses.asdict(self).items() if other.get(k) != v]


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: ``pass_no`` and ``done`` (batches of that pass finished) and the state's arrays."""

    pass_no: int
    done: int
    arrays: dict[str, np.ndarray]


def save(path: str | Path, key: CheckpointKey, pass_no: int, done: int, arrays: dict[str, np.ndarray]) -> None:
    """Write a checkpoint atomically (``np.savez``, uncompressed: the counts are tens of MB)."""
    meta = {"format": FORMAT, "key": dataclasses.asdict(key), "pass": pass_no, "done": done}
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.array(json.dumps(meta, sort_keys=True)), **{f"s.{k}": v for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def load(path: str | Path, key: CheckpointKey) -> Checkpoint | None:
    """The checkpoint at ``path`` when it was made under ``key``; None (logged) when absent, unreadable or
    made for another model, set, config, state or tool version."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        with np.load(p, allow_pickle=False) as z:
            meta = json.loads(str(z["__meta__"][()]))
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("s.")}
        pass_no, done = int(meta["pass"]), int(meta["done"])
    except Exception as e:  # truncated, foreign or old (pickled) file: start over rather than fail
        log.warning("ignoring calibration checkpoint %s: not a readable checkpoint (%s); calibrating from the start",
                    p, (str(e).splitlines() or [type(e).__name__])[0][:120])
        return None
    if meta.get("format") != FORMAT:
        log.warning("ignoring calibration checkpoint %s: format %r, this quantkit writes %d; calibrating from the start", p, meta.get("format"), FORMAT)
        return None
    diff = key.differences(meta.get("key") or {})
    if diff:
        log.warning("ignoring calibration checkpoint %s: made for another run (%s); calibrating from the start", p, "; ".join(diff))
        return None
    return Checkpoint(pass_no, done, arrays)

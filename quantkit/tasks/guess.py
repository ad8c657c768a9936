"""A task adapter guessed from a model's output shapes, for ``quantkit models add`` (a guess the user confirms).

Rules, first match wins, on the output shapes at the model's fixed input ``(H, W)`` (batch 1):

* one ``[1, 1, h, w]`` or ``[1, h, w]`` output with ``h, w`` a divisor of ``H, W`` (a probability map, e.g. DB's
  text map at input size): ``db_text``; a binary segmentation map has the same shape (``--adapter segmentation``).
* one ``[1, C]`` or ``[1, C, 1, 1]`` output: ``classifier``.
* one ``[1, A, B]`` output where one axis counts anchor-free grid cells over strides 8, 16, 32
  (``sum_s (H/s)(W/s)``, times 1 or 3 anchors: 8400 at 640x640 for YOLOv8, 25200 for YOLOv5, 3549 at 416 for
  YOLOX): ``box_detector`` with ``layout: channels`` when it is the last axis (``[1, 4+C, K]``, YOLOv8) and
  ``layout: rows`` when it is the middle one (``[1, K, 5+C]``, YOLOv5/YOLOX).
* any other one ``[1, T, C]`` output with ``T < C`` (per-step classes of a text line, e.g. ``[1, 40, 6625]``):
  ``ctc_text``; with ``T > C`` (``[1, K, 6]``, rows of boxes): ``box_detector`` ``layout: rows`` (``objectness:
  false`` for ``[1, K, 5]``: a box and one score, as rows with objectness hold at least 6 values).

Otherwise no guess: the user passes ``--adapter``. The cell counts are those of the YOLO family's heads (strides
8/16/32, Ultralytics YOLOv5/YOLOv8, Megvii YOLOX ``demo_postprocess``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

STRIDES = (8, 16, 32)
"""Strides of the YOLO family's three detection levels."""


@dataclasses.dataclass(frozen=True)
class AdapterGuess:
    """``adapter``: a registered adapter name, or None (no rule matched); ``options``: the options the shape
    implies (e.g. ``{"layout": "channels"}``); ``reason``: one phrase saying which output shape led to it."""

    adapter: str | None
    options: dict[str, Any]
    reason: str


def grid_cells(input_size: tuple[int, int], strides: Sequence[int] = STRIDES) -> int:
    """``sum_s ceil(H/s) * ceil(W/s)``: grid cells of an anchor-free head over ``strides`` (8400 at 640x640)."""
    h, w = input_size
    return sum(-(-h // s) * -(-w // s) for s in strides)


def _shape(dims: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def guess_adapter(outputs: Mapping[str, Sequence[int | None]], input_size: tuple[int, int]) -> AdapterGuess:
    """Guess the task adapter from ``outputs`` (``{name: shape at the fixed input}``) and ``input_size`` ``(H, W)``.

    Returns:
        An :class:`AdapterGuess`; ``adapter`` is None when no rule of the module docstring matches.
    """
    if len(outputs) != 1:
        return AdapterGuess(None, {}, f"{len(outputs)} outputs ({', '.join(f'{n} {_shape(s)}' for n, s in outputs.items())}): "
                            "no built-in rule reads several outputs")
    (name, dims), = outputs.items()
    dims = list(dims)
    what = f"output {name!r} {_shape(dims)}"
    if any(not isinstance(d, int) for d in dims) or (dims and dims[0] != 1):
        return AdapterGuess(None, {}, f"{what} has unknown or batch > 1 dimensions")
    h, w = input_size
    spatial = dims[-2:] if len(dims) in (3, 4) else []
    if ((len(dims) == 4 and dims[1] == 1) or len(dims) == 3) and spatial and all(d > 1 for d in spatial) \
            and h % spatial[0] == 0 and w % spatial[1] == 0 and h // spatial[0] == w // spatial[1] and h // spatial[0] <= 8:
        return AdapterGuess("db_text", {}, f"{what} is a one-channel probability map at 1/{h // spatial[0]} of the input "
                            "(a binary segmentation map looks the same: --adapter segmentation)")
    if len(dims) == 2 or (len(dims) == 4 and dims[2:] == [1, 1]):
        return AdapterGuess("classifier", {}, f"{what} holds one score per class ({dims[1]} classes)")
    if len(dims) == 3:
        a, b = dims[1], dims[2]
        cells = {grid_cells(input_size) * k for k in (1, 3)}
        if b in cells and a < b:
            return AdapterGuess("box_detector", {"layout": "channels"}, f"{what} is [1, 4+C, K] with K = {b} grid cells "
                                f"(YOLOv8-style, {a - 4} classes)")
        if a in cells and b < a:
            return AdapterGuess("box_detector", {"layout": "rows"}, f"{what} is [1, K, 5+C] with K = {a} grid cells "
                                f"(YOLOv5/YOLOX-style, {b - 5} classes); a raw YOLOX grid head also needs decode: yolox")
        if a < b:
            return AdapterGuess("ctc_text", {}, f"{what} is [1, T, C]: {a} time steps of {b} classes (a text recognizer)")
        if b == 5:  # 4 box values + 1 score: rows with objectness need 4 + 1 + C >= 6 values
            return AdapterGuess("box_detector", {"layout": "rows", "objectness": False},
                                f"{what} is [1, K, 4+1]: {a} rows of a box and one score (no objectness)")
        return AdapterGuess("box_detector", {"layout": "rows"}, f"{what} is [1, K, 5+C]: {a} rows of a box, objectness and {b - 5} class scores")
    return AdapterGuess(None, {}, f"{what} matches no built-in rule")

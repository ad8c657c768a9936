"""Resize policies of the preprocessing contract (:class:`quantkit.note.Preprocessing`), and the
:class:`Transform` that maps coordinates between the source image and the model input.

Every function takes an ``(H, W, 3) uint8`` image (``h, w``: its height and width) and the input size
``(th, tw)``, and returns the ``(th, tw, 3) uint8`` image with its :class:`Transform`:

* :func:`stretch`: ``cv2.resize`` to ``(th, tw)``, ``INTER_LINEAR``; aspect ignored.
* :func:`letterbox`: ``s = min(th / h, tw / w)``, size ``(round(h s), round(w s))`` (``INTER_AREA`` when
  shrinking, else ``INTER_LINEAR``), padded bottom/right with ``pad_value``.
* :func:`shortest_side_crop`: torchvision's ``Resize(N)`` + ``CenterCrop((th, tw))`` on a PIL image
  (``torchvision/transforms/functional.py``: ``_compute_resized_output_size`` and ``center_crop``): the short side
  becomes exactly ``N``, the long side ``int(N * long / short)``; resampled with PIL's
  ``Image.resize(..., BILINEAR)``, which is what torchvision calls on PIL images (antialiased when shrinking: on
  scikit-image's photos ``cv2.INTER_LINEAR`` differs from it by up to ~90 grey levels at edges, ``INTER_AREA`` by
  up to ~45, so neither could stand in); then ``top = int(round((nh - th) / 2.0))``, ``left = int(round((nw - tw) /
  2.0))`` (Python's round: halves to even, as torchvision) and the ``(th, tw)`` window is kept.
* :func:`fit_height_pad`: PaddleOCR / rapidocr ``resize_norm_img`` (``rapidocr_onnxruntime/ch_ppocr_rec/
  text_recognize.py`` and ``ch_ppocr_cls/text_cls.py``): height ``th``, width ``min(tw, ceil(th * (w / h)))``
  (the ratio computed first, as there), ``cv2.resize`` with ``INTER_LINEAR`` (cv2's default), padded right to
  ``tw`` with ``pad_value``. rapidocr pads with 0.0 *after* normalizing; the contract's ``pad_input`` does that
  (:func:`fill_pad`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .errors import ConfigError

__all__ = ["Transform", "fill_pad", "fit_height_pad", "letterbox", "shortest_side_crop", "stretch"]


@dataclasses.dataclass(frozen=True)
class Transform:
    """How an image was mapped into the model input: ``model_xy = image_xy * scale - (left, top)`` per axis.

    ``pad`` is ``(pad_bottom, pad_right)`` in model pixels (letterbox and fit_height_pad pad bottom/right
    only). ``crop`` is ``(top, left)``: the rows and columns of the resized image cut off before the model
    input's first pixel (``shortest_side_crop``; ``(0, 0)`` otherwise). ``cropped``: part of the image lies
    outside the model input (objects at the edges are cut).
    """

    scale_y: float
    scale_x: float
    pad: tuple[int, int] = (0, 0)
    crop: tuple[int, int] = (0, 0)
    cropped: bool = False

    def to_image(self, xy: np.ndarray) -> np.ndarray:
        """Map ``(..., 2)`` float ``(x, y)`` model-input coordinates back to source-image pixels (float64)."""
        out = np.asarray(xy, dtype=np.float64).copy()
        out[..., 0] = (out[..., 0] + self.crop[1]) / self.scale_x
        out[..., 1] = (out[..., 1] + self.crop[0]) / self.scale_y
        return out

    def to_model(self, xy: np.ndarray, *, what: str = "labels") -> np.ndarray:
        """Map ``(..., 2)`` ``(x, y)`` source-image pixels (ground truth) into model-input pixels, float32.

        Raises:
            ConfigError: the image was cropped (``shortest_side_crop`` cut part of it), so ground-truth
                ``what`` at the edges would be cut; named with the fix.
        """
        if self.cropped:
            raise ConfigError(f"ground-truth {what} cannot be mapped into a centre-cropped input (preprocessing.resize_policy: "
                              "shortest_side_crop cuts objects at the crop's edges); use letterbox or stretch for this task, or leave these labels out")
        out = np.asarray(xy, dtype=np.float32) * np.array([self.scale_x, self.scale_y], np.float32)
        return out - np.array([self.crop[1], self.crop[0]], np.float32) if self.crop != (0, 0) else out


def stretch(image: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, Transform]:
    """Resize to ``size = (th, tw)`` ignoring aspect (``cv2.INTER_LINEAR``)."""
    import cv2

    h, w = image.shape[:2]
    th, tw = size
    return cv2.resize(image, (tw, th), interpolation=cv2.INTER_LINEAR), Transform(th / h, tw / w)


def letterbox(image: np.ndarray, size: tuple[int, int], pad_value: int) -> tuple[np.ndarray, Transform]:
    """Keep aspect, fit inside ``size``, pad bottom/right with grey level ``pad_value`` (module docstring)."""
    import cv2

    h, w = image.shape[:2]
    th, tw = size
    s = min(th / h, tw / w)
    nh, nw = max(1, round(h * s)), max(1, round(w * s))
    resized = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
    out = np.full((th, tw, 3), pad_value, dtype=np.uint8)
    out[:nh, :nw] = resized
    return out, Transform(nh / h, nw / w, (th - nh, tw - nw))


def shortest_side_crop(image: np.ndarray, size: tuple[int, int], resize_short: int) -> tuple[np.ndarray, Transform]:
    """torchvision ``Resize(resize_short)`` + ``CenterCrop(size)`` on a PIL image (formulas: module docstring).
    ``resize_short`` must be at least ``max(size)`` (:class:`~quantkit.note.Preprocessing` checks it)."""
    from PIL import Image

    h, w = image.shape[:2]
    th, tw = size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = resize_short, int(resize_short * long / short)
    nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
    if (nh, nw) == (h, w):
        resized = image
    else:
        resized = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((nw, nh), Image.Resampling.BILINEAR))
    top, left = int(round((nh - th) / 2.0)), int(round((nw - tw) / 2.0))
    out = np.ascontiguousarray(resized[top:top + th, left:left + tw])
    return out, Transform(nh / h, nw / w, crop=(top, left), cropped=(nh, nw) != (th, tw))


def fit_height_pad(image: np.ndarray, size: tuple[int, int], pad_value: int) -> tuple[np.ndarray, Transform]:
    """Height to ``th``, width ``min(tw, ceil(th * (w / h)))``, pad right with ``pad_value`` (rapidocr's rule)."""
    import cv2

    h, w = image.shape[:2]
    th, tw = size
    nw = min(tw, int(math.ceil(th * (w / float(h)))))  # rapidocr's exact expression (float ratio first)
    out = np.full((th, tw, 3), pad_value, dtype=np.uint8)
    out[:, :nw] = cv2.resize(image, (nw, th), interpolation=cv2.INTER_LINEAR)
    return out, Transform(th / h, nw / w, (0, tw - nw))


def fill_pad(x: np.ndarray, pad: tuple[int, int], value: float, *, channels_last: bool) -> None:
    """Overwrite, in place, the ``pad = (bottom, right)`` padded rows/columns of a normalized model input ``x``
    (``(..., C, H, W)``, or ``(..., H, W, C)`` with ``channels_last``) with ``value`` in every channel."""
    h_axis, w_axis = (x.ndim - 3, x.ndim - 2) if channels_last else (x.ndim - 2, x.ndim - 1)
    index: list[Any] = [slice(None)] * x.ndim
    if pad[0]:
        rows = list(index)
        rows[h_axis] = slice(x.shape[h_axis] - pad[0], None)
        x[tuple(rows)] = np.float32(value)
    if pad[1]:
        cols = list(index)
        cols[w_axis] = slice(x.shape[w_axis] - pad[1], None)
        x[tuple(cols)] = np.float32(value)

"""Decode image files into one canonical array: ``(H, W, 3) uint8`` RGB.

Pillow does the decoding. EXIF orientation is applied (``ImageOps.exif_transpose``); grayscale,
palette, RGBA (alpha dropped after compositing on black), CMYK and 16-bit images are converted. 16-bit
images are scaled to 8 bits by ``>> 8`` (the top byte), as OpenCV's ``convertScaleAbs`` users expect.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import InputFileError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"})


def load_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Load ``path`` as an RGB image.

    Returns:
        ``(H, W, 3)`` ``uint8`` array in RGB order, EXIF orientation applied.

    Raises:
        InputFileError: the file is missing, empty, truncated, corrupt or not an image (message names it).
    """
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            raise InputFileError(f"{p}: empty file (0 bytes); remove it or replace it with a valid image")
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(p) as opened:
                opened.load()
                return _to_rgb8(ImageOps.exif_transpose(opened))
    except FileNotFoundError:
        raise InputFileError(f"{p}: image not found; check the path") from None
    except UnidentifiedImageError:
        raise InputFileError(f"{p}: not an image Pillow can read; remove it from the set") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as e:
        raise InputFileError(f"{p}: corrupt or truncated image ({e}); re-export or remove it") from None


def _to_rgb8(im: Image.Image) -> np.ndarray:
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "I;16N"):
        arr = np.asarray(im)
        if arr.dtype != np.uint8:
            arr = (np.clip(arr.astype(np.int64), 0, 65535) >> 8).astype(np.uint8)
        return np.repeat(arr[..., None], 3, axis=2)
    if im.mode == "F":
        arr = np.clip(np.asarray(im), 0.0, 1.0)
        arr = (arr * 255.0 + 0.5).astype(np.uint8)
        return np.repeat(arr[..., None], 3, axis=2)
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (0, 0, 0, 255))
        im = Image.alpha_composite(bg, im)
    arr = np.asarray(im.convert("RGB"))
    if arr.dtype != np.uint8:  # 16-bit RGB modes
        arr = (arr.astype(np.uint32) >> 8).astype(np.uint8)
    return np.ascontiguousarray(arr)

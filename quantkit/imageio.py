"""Decode image files into one canonical array: ``(H, W, 3) uint8`` RGB.

Pillow does the decoding. EXIF orientation is applied (``ImageOps.exif_transpose``); grayscale,
palette, CMYK and 16-bit images are converted. 16-bit images are scaled to 8 bits by ``>> 8`` (the top
byte), as OpenCV's ``convertScaleAbs`` users expect.

Transparency (RGBA, LA, palette with a transparent colour): the alpha channel is **dropped and the
stored colours are kept**, which is what a deployment that reads images with OpenCV
(``cv2.imread(path)``, ``IMREAD_COLOR``) or Pillow (``Image.convert("RGB")``) feeds the model. A pixel
stored as 127 with alpha 128 stays 127 (compositing on black would halve it to 64, on white raise it
to 191). :func:`decode_image` reports whether an image had partial transparency, so that set
registration can say so once per set (:func:`quantkit.calibset.register_set`); flatten such images
upstream if the deployed pipeline composites them on a background.

Every failure to decode (missing, empty, truncated, corrupt, not an image, a decompression bomb) is one
:class:`~quantkit.errors.InputFileError` naming the file; Pillow's own warnings about damaged metadata
are not printed.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import InputFileError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"})


@dataclasses.dataclass(frozen=True)
class DecodedImage:
    """One decoded image: ``array`` ``(H, W, 3) uint8`` RGB, the Pillow ``mode`` it was stored in, and
    ``partial_alpha``: True when it had an alpha channel with any pixel below 255 (alpha was dropped)."""

    array: np.ndarray
    mode: str
    partial_alpha: bool

    def __repr__(self) -> str:
        h, w = self.array.shape[:2]
        return f"DecodedImage({w}x{h}, mode={self.mode}, partial_alpha={self.partial_alpha})"


def load_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Load ``path`` as an RGB image (alpha dropped, see the module docstring).

    Returns:
        ``(H, W, 3)`` ``uint8`` array in RGB order, EXIF orientation applied.

    Raises:
        InputFileError: the file is missing, empty, truncated, corrupt or not an image (message names it).
    """
    return decode_image(path).array


def decode_image(path: str | os.PathLike[str]) -> DecodedImage:
    """Like :func:`load_image`, also telling the stored mode and whether partial transparency was dropped.

    Raises:
        InputFileError: the file is missing, empty, truncated, corrupt, too large (Pillow's decompression
            bomb limit) or not an image (message names it).
    """
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            raise InputFileError(f"{p}: empty file (0 bytes); remove it or replace it with a valid image")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns about damaged EXIF/TIFF tags; decoding decides
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(p) as opened:
                opened.load()
                im = ImageOps.exif_transpose(opened)
                partial = _partial_alpha(im)
                return DecodedImage(_to_rgb8(im), str(opened.mode), partial)
    except FileNotFoundError:
        raise InputFileError(f"{p}: image not found; check the path") from None
    except IsADirectoryError:
        raise InputFileError(f"{p}: is a folder, not an image; remove it from the set") from None
    except UnidentifiedImageError:
        raise InputFileError(f"{p}: not an image Pillow can read; remove it from the set") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise InputFileError(f"{p}: image too large or its header is corrupt ({e}); re-export or remove it") from None
    except (OSError, SyntaxError, ValueError, TypeError, IndexError, KeyError, struct.error) as e:  # struct.error: short headers in some plugins
        raise InputFileError(f"{p}: corrupt or truncated image ({_first_line(e)}); re-export or remove it") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _partial_alpha(im: Image.Image) -> bool:
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (im.mode == "P" and "transparency" in im.info):
        alpha = im.convert("RGBA").getchannel("A")
        lo, _ = alpha.getextrema()
        return bool(lo < 255)
    return False


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
    if im.mode in ("P", "PA"):
        im = im.convert("RGBA")  # palette colours; alpha dropped below like any other
    arr = np.asarray(im.convert("RGB"))
    if arr.dtype != np.uint8:  # 16-bit RGB modes
        arr = (arr.astype(np.uint32) >> 8).astype(np.uint8)
    return np.ascontiguousarray(arr)

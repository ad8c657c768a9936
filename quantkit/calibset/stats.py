"""Image statistics for calibration, reference and site sets.

Per image (one row of a pandas DataFrame, columns :data:`STAT_COLUMNS`), computed on the decoded
``(H, W, 3) uint8`` RGB image (:func:`quantkit.imageio.load_image`):

==================  =========================================================================
column              meaning (units)
==================  =========================================================================
width, height       decoded size after EXIF orientation (pixels)
brightness_mean     mean luma ``Y = 0.299 R + 0.587 G + 0.114 B`` (ITU-R BT.601, OpenCV's
                    ``COLOR_RGB2GRAY``), 0..255
brightness_p5/50/95 5th/50th/95th percentile of luma, 0..255
contrast_rms        RMS contrast: standard deviation of luma / 255 (Peli 1990, JOSA A 7(10)), 0..0.5
cast_rg, cast_bg    grey-world channel ratios ``mean(R)/mean(G)`` and ``mean(B)/mean(G)``
                    (Buchsbaum 1980); 1.0 = neutral, ``cast_bg < 1`` = warm
saturation_mean     mean HSV saturation (OpenCV ``COLOR_RGB2HSV`` S channel / 255), 0..1
sharpness_lapvar    variance of the 3x3 Laplacian of luma resized (``INTER_AREA``) to
                    :data:`SHARPNESS_SIZE` x :data:`SHARPNESS_SIZE` (Pech-Pacheco et al. 2000),
                    luma in 0..255 units; the fixed size makes cameras of different resolution
                    comparable
noise_sigma         Gaussian noise sigma of luma from the wavelet MAD estimator
                    (``skimage.restoration.estimate_sigma``; Donoho & Johnstone 1994), 0..255;
                    0 for a flat image
clip_dark           fraction of pixels with luma <= 2 (0..1)
clip_bright         fraction of pixels with luma >= 253 (0..1)
==================  =========================================================================

Everything streams: one image is decoded and reduced to a row before the next is read, so memory
does not depend on the number of images.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from .._io import atomic_write_text
from ..errors import CalibrationSetError
from ..imageio import load_image
from ..progress import progress

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

SHARPNESS_SIZE = 512
CLIP_DARK = 2
CLIP_BRIGHT = 253

STAT_COLUMNS: tuple[str, ...] = (
    "width",
    "height",
    "brightness_mean",
    "brightness_p5",
    "brightness_p50",
    "brightness_p95",
    "contrast_rms",
    "cast_rg",
    "cast_bg",
    "saturation_mean",
    "sharpness_lapvar",
    "noise_sigma",
    "clip_dark",
    "clip_bright",
)
"""Statistic columns, in order (the CSV also has a leading ``file`` column)."""


def image_statistics(image: np.ndarray) -> dict[str, float]:
    """Statistics of one ``(H, W, 3) uint8`` RGB image (see the module docstring for each column).

    Returns:
        ``{column: value}`` for every name in :data:`STAT_COLUMNS`; ``width``/``height`` are ints.

    Raises:
        ValueError: ``image`` is not ``(H, W, 3) uint8`` (a bug in the caller, not user input).
    """
    import cv2
    from skimage.restoration import estimate_sigma

    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected (H, W, 3) uint8, got {image.shape} {image.dtype}")
    h, w = image.shape[:2]
    luma = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    p5, p50, p95 = np.percentile(luma, (5, 50, 95))
    lf = luma.astype(np.float64)
    means = image.reshape(-1, 3).mean(axis=0)
    g = max(float(means[1]), 1e-6)
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
    small = cv2.resize(luma, (SHARPNESS_SIZE, SHARPNESS_SIZE), interpolation=cv2.INTER_AREA)
    lap = cv2.Laplacian(small.astype(np.float64), cv2.CV_64F, ksize=1)
    n = float(luma.size)
    with warnings.catch_warnings():  # a flat image has no non-zero wavelet detail: MAD of nothing; a tiny one
        warnings.simplefilter("ignore", RuntimeWarning)  # (a few pixels) makes skimage warn about its wavelet level
        warnings.simplefilter("ignore", UserWarning)
        sigma = float(estimate_sigma(lf, channel_axis=None))
    return {
        "width": int(w),
        "height": int(h),
        "brightness_mean": float(lf.mean()),
        "brightness_p5": float(p5),
        "brightness_p50": float(p50),
        "brightness_p95": float(p95),
        "contrast_rms": float(lf.std() / 255.0),
        "cast_rg": float(means[0]) / g,
        "cast_bg": float(means[2]) / g,
        "saturation_mean": float(hsv[..., 1].mean() / 255.0),
        "sharpness_lapvar": float(lap.var()),
        "noise_sigma": sigma if np.isfinite(sigma) else 0.0,
        "clip_dark": float(np.count_nonzero(luma <= CLIP_DARK)) / n,
        "clip_bright": float(np.count_nonzero(luma >= CLIP_BRIGHT)) / n,
    }


def stats_frame(rows: Iterable[dict[str, Any]]) -> "pd.DataFrame":
    """Build the per-image DataFrame (columns ``file`` + :data:`STAT_COLUMNS`) from row dicts."""
    import pandas as pd

    return pd.DataFrame(list(rows), columns=["file", *STAT_COLUMNS])


def compute_stats(paths: Sequence[str | os.PathLike[str]], *, root: str | os.PathLike[str] | None = None, desc: str = "stats") -> "pd.DataFrame":
    """Decode each image in ``paths`` (one at a time) and return one row of statistics per image.

    ``file`` is the path relative to ``root`` (POSIX separators) when given, else as passed.

    Raises:
        InputFileError: an image is missing, empty or corrupt (message names it).
    """
    rows = []
    for p in progress(paths, total=len(paths), desc=desc):
        name = Path(p).relative_to(root).as_posix() if root is not None else str(p)
        rows.append({"file": name, **image_statistics(load_image(p))})
    return stats_frame(rows)


def write_stats_csv(frame: "pd.DataFrame", path: str | os.PathLike[str]) -> Path:
    """Write ``frame`` as CSV atomically, floats with 8 significant digits (same frame, same bytes)."""
    return atomic_write_text(path, frame.to_csv(index=False, float_format="%.8g", lineterminator="\n"))


def read_stats_csv(path: str | os.PathLike[str]) -> "pd.DataFrame":
    """Read a ``stats.csv`` written by :func:`write_stats_csv`.

    Raises:
        CalibrationSetError: the file is missing or lacks a statistic column (re-register the set).
    """
    import pandas as pd

    p = Path(path)
    try:
        frame = pd.read_csv(p)
    except FileNotFoundError:
        raise CalibrationSetError(f"{p}: stats.csv not found; compute it with 'quantkit calibset stats {p.parent} --recompute'") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise CalibrationSetError(f"{p}: not a valid stats CSV ({e}); use 'quantkit calibset stats --recompute'") from None
    missing = [c for c in ("file", *STAT_COLUMNS) if c not in frame.columns]
    if missing:
        raise CalibrationSetError(f"{p}: column {missing[0]!r} missing; use 'quantkit calibset stats --recompute'")
    return frame


def summarize(frame: "pd.DataFrame") -> "pd.DataFrame":
    """Set-level summary: one row per statistic with ``mean, std, min, p5, p50, p95, max`` over images."""
    import pandas as pd

    cols = [c for c in STAT_COLUMNS if c in frame.columns]
    data = frame[cols].astype(float)
    out = pd.DataFrame(
        {
            "mean": data.mean(),
            "std": data.std(ddof=1) if len(data) > 1 else data.mean() * 0.0,
            "min": data.min(),
            "p5": data.quantile(0.05),
            "p50": data.quantile(0.50),
            "p95": data.quantile(0.95),
            "max": data.max(),
        }
    )
    out.index.name = "statistic"
    return out


def plot_stats(frames: dict[str, "pd.DataFrame"], *, columns: Sequence[str] | None = None, fig: "Figure | None" = None) -> "Figure":
    """Histogram overlay of each statistic for one or more sets (``{label: per-image frame}``).

    Returns a matplotlib ``Figure`` (never shown; the caller saves it).
    """
    from matplotlib.figure import Figure

    cols = list(columns or [c for c in STAT_COLUMNS if c not in ("width", "height")])
    fig = fig or Figure(figsize=(3.2 * 4, 2.6 * ((len(cols) + 3) // 4)), layout="constrained")
    axes = fig.subplots((len(cols) + 3) // 4, 4, squeeze=False).ravel()
    for ax, col in zip(axes, cols):
        for label, frame in frames.items():
            ax.hist(frame[col].astype(float), bins=20, alpha=0.5, label=label)
        ax.set_title(col, fontsize=9)
    for ax in axes[len(cols):]:
        ax.set_visible(False)
    if frames:
        axes[0].legend(fontsize=7)
    return fig

"""Scenes for the demo sets: real photos with industrial label text pasted in perspective.

Backgrounds are photos shipped in scikit-image's data folder (read from the installed package; nothing
is downloaded), randomly cropped, scaled and flipped. Text is rendered with fonts shipped in
matplotlib (``mpl-data/fonts/ttf``) through Pillow, on label patches (white, yellow, grey stickers) or
printed directly on the surface, then warped onto the photo with a homography, so every text line's quad in
the final image is known exactly: the patch-space box of each line mapped by the same homography. Quads
are clockwise from top-left in image pixels.

Resampling, warping and the label geometry use :mod:`quantkit.demo.exact` (not OpenCV, BLAS or NumPy's
SIMD ``sin``/``cos``), so a scene has the same bytes on every CPU: demo calibration sets are versioned data.

Images with text of their own (``page``, ``text``) are left out, so the ground truth is complete.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputFileError
from .exact import apply_homography, homography, resize, sin_cos, warp_bilinear

BACKGROUNDS: tuple[str, ...] = (
    "astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png",
    "camera.png", "brick.png", "grass.png", "gravel.png", "coins.png", "moon.png",
)
"""scikit-image data files used as backgrounds (photos without text of their own)."""

FONTS: tuple[str, ...] = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSans-Oblique.ttf",
)
"""matplotlib-shipped fonts used for label text."""

# label background colours (sRGB) and text colours
_LABEL_COLOURS = ((246, 246, 240), (250, 250, 250), (242, 214, 64), (236, 206, 70), (200, 202, 204), (222, 226, 230))
_INKS = ((18, 18, 20), (30, 32, 40), (20, 30, 80), (60, 20, 20))


def _data_dir() -> Path:
    import skimage

    return Path(skimage.__file__).parent / "data"


def _fonts_dir() -> Path:
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


class SceneAssets:
    """Backgrounds (``(H, W, 3) uint8`` RGB arrays) and font paths, loaded once per set.

    Raises:
        InputFileError: a background or font file is missing from the installed packages.
    """

    def __init__(self, backgrounds: tuple[str, ...] = BACKGROUNDS, fonts: tuple[str, ...] = FONTS) -> None:
        from ..imageio import load_image

        self.background_names = backgrounds
        self.backgrounds = []
        for name in backgrounds:
            p = _data_dir() / name
            if not p.is_file():
                raise InputFileError(f"{p}: scikit-image data file missing; reinstall scikit-image (pip install --force-reinstall scikit-image)")
            self.backgrounds.append(load_image(p))
        self.font_paths = []
        for name in fonts:
            p = _fonts_dir() / name
            if not p.is_file():
                raise InputFileError(f"{p}: matplotlib font missing; reinstall matplotlib")
            self.font_paths.append(str(p))
        self._font_cache: dict[tuple[str, int], Any] = {}

    def font(self, path: str, size: int) -> Any:
        from PIL import ImageFont

        key = (path, size)
        if key not in self._font_cache:
            self._font_cache[key] = ImageFont.truetype(path, size)
        return self._font_cache[key]

    def provenance(self) -> dict[str, Any]:
        return {"backgrounds": list(self.background_names), "fonts": [Path(f).name for f in self.font_paths]}


def label_text(rng: np.random.Generator) -> str:
    """One line of industrial label text: lot number, serial, expiry/manufacture date, part number, ..."""
    def d(n: int) -> str:
        return "".join(str(v) for v in np.asarray(rng.integers(0, 10, size=n)).tolist())

    def letter() -> str:
        return "ABCDEFGHJKLMNPRSTUVWXYZ"[int(rng.integers(0, 23))]

    year = int(rng.integers(2023, 2030))
    month = int(rng.integers(1, 13))
    kind = int(rng.integers(0, 10))
    return [
        f"LOT {d(2)}{letter()}{d(3)}",
        f"SN {d(7)}",
        f"EXP {year}-{month:02d}",
        f"MFG {year - 2}-{month:02d}-{int(rng.integers(1, 29)):02d}",
        f"P/N {d(4)}-{d(4)}",
        f"BATCH {letter()}-{d(4)}",
        f"REF {d(2)}-{d(3)}-{d(2)}",
        f"QTY {int(rng.integers(1, 500))} PCS",
        f"{letter()}{letter()}{d(6)}",
        f"USE BY {int(rng.integers(1, 29)):02d}.{month:02d}.{year}",
    ][kind]


@dataclasses.dataclass(frozen=True)
class Label:
    """A rendered label patch: ``rgba`` ``(h, w, 4) uint8`` and its line boxes ``(n, 4, 2) float32`` (patch pixels)."""

    rgba: np.ndarray
    boxes: np.ndarray
    printed: bool = False


def render_label(assets: SceneAssets, rng: np.random.Generator, px: int) -> Label:
    """Render 1-3 text lines at font size ``px`` on a sticker (or bare, to be printed on the surface)."""
    from PIL import Image, ImageDraw

    font = assets.font(assets.font_paths[int(rng.integers(0, len(assets.font_paths)))], px)
    lines = [label_text(rng) for _ in range(int(rng.choice([1, 1, 2, 2, 3])))]
    printed = rng.random() < 0.25
    ink = _INKS[int(rng.integers(0, len(_INKS)))]
    pad = int(px * rng.uniform(0.35, 0.8))
    gap = int(px * rng.uniform(0.25, 0.6))
    bbs = [font.getbbox(t) for t in lines]
    width = max(b[2] - b[0] for b in bbs) + 2 * pad
    height = sum(b[3] - b[1] for b in bbs) + gap * (len(lines) - 1) + 2 * pad
    bg = (0, 0, 0, 0) if printed else (*_LABEL_COLOURS[int(rng.integers(0, len(_LABEL_COLOURS)))], 255)
    im = Image.new("RGBA", (width, height), bg)
    draw = ImageDraw.Draw(im)
    boxes = []
    y = pad
    for text, bb in zip(lines, bbs):
        x = pad
        draw.text((x - bb[0], y - bb[1]), text, font=font, fill=(*ink, 255))
        m = max(1.0, 0.12 * px)  # a small margin around the ink, as text-detection labels have
        x0, y0, x1, y1 = x - m, y - m, x + (bb[2] - bb[0]) + m, y + (bb[3] - bb[1]) + m
        boxes.append([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
        y += (bb[3] - bb[1]) + gap
    return Label(np.asarray(im), np.asarray(boxes, np.float32), printed)


def background(assets: SceneAssets, rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    """A random crop (30-100% of the short side), flip and resize of a random background to ``size`` (h, w)."""
    h, w = size
    src = assets.backgrounds[int(rng.integers(0, len(assets.backgrounds)))]
    sh, sw = src.shape[:2]
    aspect = w / h
    side = rng.uniform(0.3, 1.0) * min(sh, sw * 1.0 / aspect)
    ch, cw = max(16, int(side)), max(16, int(side * aspect))
    ch, cw = min(ch, sh), min(cw, sw)
    y0 = int(rng.integers(0, sh - ch + 1))
    x0 = int(rng.integers(0, sw - cw + 1))
    crop = src[y0:y0 + ch, x0:x0 + cw]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return resize(crop, (h, w), "area" if ch > h else "cubic")


def _paste(scene: np.ndarray, label: Label, dst: np.ndarray, shade: float) -> np.ndarray:
    """Warp ``label`` onto ``scene`` (in place) so its corners land on ``dst`` ``(4, 2)``; returns the line quads."""
    lh, lw = label.rgba.shape[:2]
    src = [(0.0, 0.0), (float(lw), 0.0), (float(lw), float(lh)), (0.0, float(lh))]
    corners = [(float(x), float(y)) for x, y in dst.astype(np.float32)]
    hom, inverse = homography(src, corners), homography(corners, src)
    h, w = scene.shape[:2]
    x0, y0 = (max(0, int(v) - 2) for v in np.floor(dst.min(axis=0)))
    x1, y1 = min(w, int(np.ceil(dst[:, 0].max())) + 2), min(h, int(np.ceil(dst[:, 1].max())) + 2)
    warped = warp_bilinear(label.rgba, inverse, x0, y0, x1 - x0, y1 - y0)  # only the label's bounding box
    alpha = warped[..., 3:4].astype(np.float32) / 255.0
    rgb = warped[..., :3].astype(np.float32) * np.float32(shade)
    roi = scene[y0:y1, x0:x1]
    roi[:] = np.clip(roi.astype(np.float32) * (1 - alpha) + rgb * alpha + 0.5, 0, 255).astype(np.uint8)
    bx, by = apply_homography(hom, label.boxes[..., 0].astype(np.float64), label.boxes[..., 1].astype(np.float64))
    return np.stack([bx, by], axis=-1)


def compose(assets: SceneAssets, rng: np.random.Generator, size: tuple[int, int], n_labels: tuple[int, int] = (2, 5),
            base: np.ndarray | None = None) -> tuple[np.ndarray, list[list[list[float]]]]:
    """One scene: a background with ``n_labels`` (inclusive range) labels in perspective, not overlapping.

    ``base``: a fixed ``(h, w, 3) uint8`` background (a camera's view, e.g. from :func:`background`) to
    paste the labels on; ``None`` draws a random one from ``rng``.

    Returns:
        ``(H, W, 3) uint8`` sRGB scene and the text-line quads ``[[[x, y] * 4], ...]`` (float pixels,
        clockwise from top-left), rounded to 0.01 px.
    """
    h, w = size
    scene = background(assets, rng, size) if base is None else base.copy()
    occupied = np.zeros((h, w), bool)
    quads: list[list[list[float]]] = []
    for _ in range(int(rng.integers(n_labels[0], n_labels[1] + 1))):
        px = int(rng.integers(max(12, h // 40), max(14, h // 14)))
        label = render_label(assets, rng, px)
        lh, lw = float(label.rgba.shape[0]), float(label.rgba.shape[1])
        if lw > 0.9 * w or lh > 0.9 * h:
            continue
        for _try in range(20):
            sin, cos = sin_cos(math.radians(float(rng.uniform(-18, 18))))  # not np.sin/np.cos (SIMD, per CPU)
            cx, cy = rng.uniform(lw / 2 + 4, w - lw / 2 - 4), rng.uniform(lh / 2 + 4, h - lh / 2 - 4)
            corners = np.array([[-lw / 2, -lh / 2], [lw / 2, -lh / 2], [lw / 2, lh / 2], [-lw / 2, lh / 2]])
            # rotation as elementwise products (not `corners @ rot.T`: BLAS kernels differ per CPU)
            rotated = np.stack([corners[:, 0] * cos - corners[:, 1] * sin, corners[:, 0] * sin + corners[:, 1] * cos], axis=1)
            jitter = rng.uniform(-0.06, 0.06, (4, 2)) * np.array([lw, lh])  # perspective: the label plane is tilted
            dst = rotated + jitter + [cx, cy]
            if dst.min() < 2 or dst[:, 0].max() > w - 2 or dst[:, 1].max() > h - 2:
                continue
            x0, y0 = np.floor(dst.min(axis=0)).astype(int) - 3
            x1, y1 = np.ceil(dst.max(axis=0)).astype(int) + 3
            if occupied[max(0, y0):y1, max(0, x0):x1].any():
                continue
            occupied[max(0, y0):y1, max(0, x0):x1] = True
            if label.printed:  # ink printed on the surface: dark on light surfaces, white on dark ones
                under = scene[max(0, y0):y1, max(0, x0):x1].mean()
                ink = np.array((236, 236, 230) if under < 120 else _INKS[int(rng.integers(0, len(_INKS)))], np.uint8)
                rgba = label.rgba.copy()
                rgba[..., :3] = ink
                label = Label(rgba, label.boxes, True)
            line_quads = _paste(scene, label, dst, shade=float(rng.uniform(0.75, 1.0)))
            quads.extend([[[round(float(x), 2), round(float(y), 2)] for x, y in q] for q in line_quads])
            break
    return scene, quads

"""CPU-independent image arithmetic for the demo sets (resampling, blur, homographies, tone tables).

Why: a demo calibration set is versioned data (its id is the SHA-256 of its image bytes), so the same commit
and params must render the same bytes on every CPU. The library routines the renderer used pick their code by
CPU and give last-bit-different results: OpenBLAS matmul kernels (with or without FMA, per micro-architecture),
OpenCV's SIMD/IPP paths of ``filter2D``, ``resize``, ``warpPerspective`` and ``perspectiveTransform``, NumPy's
dispatched SIMD transcendental loops (``sin``, ``cos``, ``power``: AVX-512 SVML on some CPUs) and libm ``pow``
(FMA variants). After noise, gamma and 8-bit quantization a few pixels, hence the JPEG bytes, changed
(calibration_sets/cam1-day rendered on a Xeon and on an EPYC had different ids).

Everything here is written with IEEE-exact building blocks only: NumPy elementwise ``+ - * /`` and ``sqrt``
as separate ufuncs (each correctly rounded, never fused into an FMA), Python float arithmetic, integer
arithmetic and :mod:`decimal` (software arithmetic) for the power-law tables. Sums run in a fixed order.
No BLAS, no OpenCV and no libm transcendental of ours touches a rendered value. Left: NumPy's random generator
(``standard_normal``'s rare ziggurat tail calls ``expf``/``logf``, which glibc may dispatch to an FMA build on
some CPUs; the test renders with those variants off too).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from decimal import Context, Decimal

import numpy as np

_DEC = Context(prec=30)


@functools.lru_cache(maxsize=16)
def power_table(n: int, exponent: float) -> np.ndarray:
    """``(n,) float32`` table of ``(i / (n - 1)) ** exponent``, computed in decimal arithmetic (cached)."""
    e = Decimal(exponent)
    vals = [0.0 if i == 0 else float(_DEC.power(Decimal(i / (n - 1)), e)) for i in range(n)]
    out = np.asarray(vals, np.float64).astype(np.float32)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=1)
def srgb_eotf_table() -> np.ndarray:
    """``(256,) float32`` sRGB EOTF (IEC 61966-2-1) of the 8-bit codes, in decimal arithmetic (cached)."""
    vals = []
    for i in range(256):
        c = i / 255.0
        vals.append(c / 12.92 if c <= 0.04045 else float(_DEC.power(Decimal((c + 0.055) / 1.055), Decimal(2.4))))
    out = np.asarray(vals, np.float64).astype(np.float32)
    out.flags.writeable = False
    return out


_SIN = [(1.0 if k % 2 == 0 else -1.0) / math.factorial(2 * k + 1) for k in range(12)]  # Taylor coefficients
_COS = [(1.0 if k % 2 == 0 else -1.0) / math.factorial(2 * k) for k in range(12)]


def sin_cos(x: float) -> tuple[float, float]:
    """``(sin x, cos x)`` of an angle ``|x| <= pi/2`` (radians) by Taylor series in Python floats (error < 1e-16)."""
    if not -1.6 <= x <= 1.6:
        raise ValueError(f"sin_cos: {x} outside [-1.6, 1.6]")
    x2 = x * x
    s, c = 0.0, 0.0
    for k in range(11, -1, -1):  # Horner, highest term first
        s = s * x2 + _SIN[k]
        c = c * x2 + _COS[k]
    return s * x, c


def homography(src: list[tuple[float, float]], dst: list[tuple[float, float]]) -> list[list[float]]:
    """The 3x3 homography (row-major, ``h[2][2] = 1``) taking the 4 ``src`` points to ``dst``.

    The 8x8 system of ``cv2.getPerspectiveTransform``, solved by Gaussian elimination with partial pivoting
    in Python floats.

    Raises:
        ValueError: degenerate points (three collinear).
    """
    a: list[list[float]] = []
    for (x, y), (u, v) in zip(src, dst):
        a.append([x, y, 1.0, 0.0, 0.0, 0.0, -x * u, -y * u, u])
    for (x, y), (u, v) in zip(src, dst):
        a.append([0.0, 0.0, 0.0, x, y, 1.0, -x * v, -y * v, v])
    n = 8
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        if a[piv][col] == 0.0:
            raise ValueError("homography: degenerate points")
        a[col], a[piv] = a[piv], a[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            if f != 0.0:
                a[r] = [a[r][k] - f * a[col][k] for k in range(n + 1)]
    sol = [0.0] * n
    for r in range(n - 1, -1, -1):
        acc = a[r][n]
        for k in range(r + 1, n):
            acc = acc - a[r][k] * sol[k]
        sol[r] = acc / a[r][r]
    return [sol[0:3], sol[3:6], [sol[6], sol[7], 1.0]]


def apply_homography(hom: list[list[float]], x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map float64 point coordinates ``x``, ``y`` (any shape) through ``hom``."""
    den = x * hom[2][0] + y * hom[2][1] + hom[2][2]
    return (x * hom[0][0] + y * hom[0][1] + hom[0][2]) / den, (x * hom[1][0] + y * hom[1][1] + hom[1][2]) / den


def warp_bilinear(img: np.ndarray, inverse: list[list[float]], x0: int, y0: int, width: int, height: int) -> np.ndarray:
    """``cv2.warpPerspective(..., INTER_LINEAR, BORDER_CONSTANT 0)`` of ``img`` ``(h, w, C) uint8``.

    ``inverse`` maps output pixel ``(x0 + i, y0 + j)`` to source coordinates (pixel centres at integers);
    bilinear interpolation in float64, rounded half up.

    Returns:
        ``(height, width, C) uint8``.
    """
    h, w, ch = img.shape
    jj, ii = np.mgrid[y0:y0 + height, x0:x0 + width].astype(np.float64)
    u, v = apply_homography(inverse, ii, jj)
    lim = 4.0 * (w + h + 4)  # far outside the source: zero either way; keeps the integers small
    u, v = np.clip(u, -lim, lim), np.clip(v, -lim, lim)
    bx, by = np.floor(u), np.floor(v)
    fx, fy = (u - bx)[..., None], (v - by)[..., None]
    ix, iy = bx.astype(np.int64), by.astype(np.int64)
    padded = np.zeros((h + 2, w + 2, ch), np.float64)
    padded[1:-1, 1:-1] = img
    cx0, cx1 = np.clip(ix, -1, w) + 1, np.clip(ix + 1, -1, w) + 1
    cy0, cy1 = np.clip(iy, -1, h) + 1, np.clip(iy + 1, -1, h) + 1
    gx, gy = 1.0 - fx, 1.0 - fy
    acc = padded[cy0, cx0] * gx * gy + padded[cy0, cx1] * fx * gy + padded[cy1, cx0] * gx * fy + padded[cy1, cx1] * fx * fy
    return np.clip(np.floor(acc + 0.5), 0, 255).astype(np.uint8)


def _area_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    scale = n_in / n_out
    rows: list[list[tuple[int, float]]] = []
    for o in range(n_out):
        start, end = o * scale, min(n_in, (o + 1) * scale)
        taps = []
        for i in range(int(math.floor(start)), min(n_in, int(math.ceil(end)))):
            cover = min(end, i + 1.0) - max(start, float(i))
            if cover > 1e-9:
                taps.append((i, cover / scale))
        rows.append(taps)
    k = max(len(t) for t in rows)
    idx = np.zeros((n_out, k), np.int64)
    wts = np.zeros((n_out, k), np.float64)
    for o, taps in enumerate(rows):
        for t, (i, wt) in enumerate(taps):
            idx[o, t], wts[o, t] = i, wt
    return idx, wts


def _kernel_taps(n_in: int, n_out: int, support: int, weights: Callable[[np.ndarray], list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    src = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    base = np.floor(src)
    frac = src - base
    first = base.astype(np.int64) - (support // 2 - 1)
    idx = np.clip(first[:, None] + np.arange(support)[None, :], 0, n_in - 1)  # replicated border
    return idx, np.stack(weights(frac), axis=1)


def _linear_weights(f: np.ndarray) -> list[np.ndarray]:
    return [1.0 - f, f]


def _cubic_weights(f: np.ndarray) -> list[np.ndarray]:
    a = -0.75  # OpenCV's INTER_CUBIC (Keys kernel, a = -0.75)
    g = f + 1.0
    h = 1.0 - f
    w0 = ((a * g - 5.0 * a) * g + 8.0 * a) * g - 4.0 * a
    w1 = ((a + 2.0) * f - (a + 3.0)) * f * f + 1.0
    w2 = ((a + 2.0) * h - (a + 3.0)) * h * h + 1.0
    return [w0, w1, w2, 1.0 - w0 - w1 - w2]


def _resample_axis(img: np.ndarray, axis: int, n_out: int, mode: str) -> np.ndarray:
    n_in = img.shape[axis]
    if n_out == n_in:
        return img
    if mode == "area" and n_out < n_in:
        idx, wts = _area_taps(n_in, n_out)
    elif mode == "cubic":
        idx, wts = _kernel_taps(n_in, n_out, 4, _cubic_weights)
    else:  # linear, and area when enlarging (as OpenCV, close to linear)
        idx, wts = _kernel_taps(n_in, n_out, 2, _linear_weights)
    shape = [1] * img.ndim
    shape[axis] = n_out
    acc = None
    for t in range(idx.shape[1]):  # fixed order: tap 0 first
        term = np.take(img, idx[:, t], axis=axis) * wts[:, t].reshape(shape)
        acc = term if acc is None else acc + term
    assert acc is not None
    return acc


def resize(img: np.ndarray, size: tuple[int, int], mode: str) -> np.ndarray:
    """Resample ``img`` ``(H, W[, C])`` to ``size`` = (h, w), like ``cv2.resize``: ``mode`` ``area``
    (pixel-area average when shrinking), ``linear`` or ``cubic`` (half-pixel centres, replicated border).
    Separable, in float64. ``float32`` input gives ``float32``; ``uint8`` gives ``uint8`` (rounded, clipped)."""
    out = _resample_axis(_resample_axis(img.astype(np.float64), 0, size[0], mode), 1, size[1], mode)
    if img.dtype == np.uint8:
        return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)
    return out.astype(img.dtype)


def correlate_reflect(img: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """``cv2.filter2D(img, -1, kernel, borderType=BORDER_REFLECT)`` for ``(H, W, C) float32`` and an odd
    square ``kernel``: a weighted sum of shifted copies, taps in row-major order (zero taps skipped)."""
    r = kernel.shape[0] // 2
    h, w = img.shape[:2]
    padded = np.pad(img, ((r, r), (r, r)) + ((0, 0),) * (img.ndim - 2), mode="symmetric")
    acc = np.zeros_like(img)
    for dy in range(kernel.shape[0]):
        for dx in range(kernel.shape[1]):
            k = kernel[dy, dx]
            if k != 0:
                acc += padded[dy:dy + h, dx:dx + w] * k
    return acc

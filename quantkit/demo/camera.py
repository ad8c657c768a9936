"""A physical camera + lighting model for the demo sets, applied in linear light.

Pipeline for one scene (``(H, W, 3) uint8`` sRGB reflectance image, as composed by
:mod:`quantkit.demo.scene`), in this order:

1. linearize with the sRGB EOTF (IEC 61966-2-1);
2. illuminant: multiply by the linear-sRGB white of a blackbody at the lighting's colour temperature,
   divided by that of the camera's white-balance setting and normalized to unit BT.709 luminance (a
   fixed-WB camera under warm light sees a warm cast); times ``exposure`` (lighting: relative scene irradiance x exposure time);
3. optics: lens vignetting (cos^4 falloff) and defocus blur (a uniform disc PSF of ``defocus_px``);
4. sensor: area-resample to the sensor's resolution; photo-electrons ``~ Poisson(full_well x signal)``
   plus Gaussian read noise (``read_noise_e`` electrons), times the analogue ``gain`` of the lighting,
   normalized by the full well and clipped to [0, 1] (saturation) — the Poisson-Gaussian model of
   Foi et al. 2008, "Practical Poissonian-Gaussian noise modeling" (IEEE TIP 17(10));
5. colour: the camera's 3x3 colour matrix (its colour response) in linear light, clipped;
6. encode: power-law gamma ``1/gamma``, resample back to the output size (the ISP's scaler),
   8-bit quantization; JPEG encoding happens in :mod:`quantkit.demo.synth`.

Blackbody chromaticity: the cubic-spline Planckian locus of Kang et al. 2002, "Design of advanced color
temperature control system for HDTV applications" (J. Korean Phys. Soc. 41(6)), valid 1667-25000 K;
xyY -> XYZ -> linear sRGB with the IEC 61966-2-1 matrix.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..config import Config
from ..errors import ConfigError
from .exact import correlate_reflect, power_table, resize, srgb_eotf_table

_LUMA709 = np.array([0.2126, 0.7152, 0.0722])  # relative luminance of linear sRGB (ITU-R BT.709)
# XYZ -> linear sRGB (IEC 61966-2-1, D65)
_XYZ_TO_SRGB = np.array([[3.2406, -1.5372, -0.4986], [-0.9689, 1.8758, 0.0415], [0.0557, -0.2040, 1.0570]])


@dataclasses.dataclass(frozen=True)
class CameraConfig(Config):
    """One camera. Units: ``resolution`` is the sensor's linear resolution as a fraction of the output
    size (1.0 = native), ``defocus_px`` the defocus disc radius in output pixels, ``full_well_e`` the
    photo-electrons at signal 1.0, ``read_noise_e`` the read noise sigma in electrons, ``white_balance_k``
    the fixed white balance in kelvin, ``color_matrix`` a row-major 3x3 matrix on linear RGB,
    ``vignetting`` the cos^4 falloff strength (0 = none, 1 = full), ``jpeg_quality`` 1..95."""

    resolution: float = 1.0
    defocus_px: float = 0.8
    full_well_e: float = 2000.0
    read_noise_e: float = 5.0
    white_balance_k: float = 6500.0
    color_matrix: tuple[float, float, float, float, float, float, float, float, float] = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    gamma: float = 2.2
    vignetting: float = 0.3
    jpeg_quality: int = 90

    def validate(self) -> None:
        if not 0.05 <= self.resolution <= 1.0:
            raise ConfigError(f"demo.cameras.resolution: {self.resolution} must be in 0.05..1.0")
        if not 0.0 <= self.defocus_px <= 20.0:
            raise ConfigError(f"demo.cameras.defocus_px: {self.defocus_px} must be in 0..20")
        if self.full_well_e <= 0 or self.read_noise_e < 0:
            raise ConfigError("demo.cameras: full_well_e must be > 0 and read_noise_e >= 0")
        if not 1667 <= self.white_balance_k <= 25000:
            raise ConfigError(f"demo.cameras.white_balance_k: {self.white_balance_k} must be in 1667..25000")
        if not 1.0 <= self.gamma <= 3.0:
            raise ConfigError(f"demo.cameras.gamma: {self.gamma} must be in 1..3")
        if not 0.0 <= self.vignetting <= 1.0:
            raise ConfigError(f"demo.cameras.vignetting: {self.vignetting} must be in 0..1")
        if not 1 <= self.jpeg_quality <= 95:
            raise ConfigError(f"demo.cameras.jpeg_quality: {self.jpeg_quality} must be in 1..95")


@dataclasses.dataclass(frozen=True)
class LightingConfig(Config):
    """One lighting condition: ``exposure`` scales linear irradiance (day 1.0), ``color_temperature_k``
    is the illuminant in kelvin, ``gain`` the camera's analogue gain (amplifies signal and noise)."""

    exposure: float = 1.0
    color_temperature_k: float = 6500.0
    gain: float = 1.0

    def validate(self) -> None:
        if not 0.0 < self.exposure <= 4.0:
            raise ConfigError(f"demo.lightings.exposure: {self.exposure} must be in (0, 4]")
        if not 1667 <= self.color_temperature_k <= 25000:
            raise ConfigError(f"demo.lightings.color_temperature_k: {self.color_temperature_k} must be in 1667..25000")
        if not 0.1 <= self.gain <= 64:
            raise ConfigError(f"demo.lightings.gain: {self.gain} must be in 0.1..64")


def blackbody_rgb(kelvin: float) -> np.ndarray:
    """Linear-sRGB colour ``(3,) float64`` of a blackbody at ``kelvin``, normalized to G = 1 (Kang et al. 2002)."""
    t = float(kelvin)
    # powers as products (Python's ** calls libm pow, whose FMA and non-FMA builds may differ in the last bit)
    t2, t3 = t * t, t * t * t
    if t <= 4000:
        x = -0.2661239e9 / t3 - 0.2343589e6 / t2 + 0.8776956e3 / t + 0.179910
    else:
        x = -3.0258469e9 / t3 + 2.1070379e6 / t2 + 0.2226347e3 / t + 0.240390
    x2, x3 = x * x, x * x * x
    if t <= 2222:
        y = -1.1063814 * x3 - 1.34811020 * x2 + 2.18555832 * x - 0.20219683
    elif t <= 4000:
        y = -0.9549476 * x3 - 1.37418593 * x2 + 2.09137015 * x - 0.16748867
    else:
        y = 3.0817580 * x3 - 5.87338670 * x2 + 3.75112997 * x - 0.37001483
    xyz = (x / y, 1.0, (1.0 - x - y) / y)
    rgb = np.array([_dot3(row, xyz) for row in _XYZ_TO_SRGB.tolist()])  # no BLAS: see quantkit.demo.exact
    return np.clip(rgb, 1e-4, None) / rgb[1]


def _dot3(a: list[float] | tuple[float, ...], b: list[float] | tuple[float, ...]) -> float:
    """``a . b`` of two 3-vectors in Python floats, left to right (the same bits on every CPU)."""
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def srgb_to_linear(img_u8: np.ndarray) -> np.ndarray:
    """sRGB EOTF (IEC 61966-2-1): ``(H, W, 3) uint8`` -> ``float32`` linear in [0, 1] (256-entry table)."""
    return srgb_eotf_table()[img_u8]


def _disc_kernel(radius: float) -> np.ndarray:
    r = int(np.ceil(radius))
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1].astype(np.float32)
    # anti-aliased disc: coverage ramps over one pixel at the edge
    k = np.clip(radius + 0.5 - np.sqrt(xx * xx + yy * yy), 0.0, 1.0)
    return (k / np.float32(math.fsum(k.ravel().tolist()))).astype(np.float32)  # exact sum, no SIMD reduction order


def capture(scene_u8: np.ndarray, camera: CameraConfig, lighting: LightingConfig, rng: np.random.Generator) -> np.ndarray:
    """Photograph ``scene_u8`` (``(H, W, 3) uint8`` sRGB) with ``camera`` under ``lighting``.

    Every step gives the same bits on every CPU (no BLAS, OpenCV or SIMD transcendental functions; see
    :mod:`quantkit.demo.exact`): a calibration set's id must not depend on the machine that rendered it.

    Returns:
        ``(H, W, 3) uint8`` RGB, gamma-encoded, same size as the scene (before JPEG).
    """
    h, w = scene_u8.shape[:2]
    lin = srgb_to_linear(scene_u8)
    wb = blackbody_rgb(lighting.color_temperature_k) / blackbody_rgb(camera.white_balance_k)
    wb = (wb / _dot3(_LUMA709.tolist(), wb.tolist())).astype(np.float32)  # same luminance, different colour
    lin *= wb * np.float32(lighting.exposure)
    if camera.vignetting > 0:
        yy, xx = np.ogrid[0:h, 0:w]
        dx, dy = xx - w / 2, yy - h / 2
        r2 = ((dx * dx + dy * dy) / float((w / 2) * (w / 2) + (h / 2) * (h / 2))).astype(np.float32)
        # cos^4 law with the half-diagonal at ~35 degrees off-axis, scaled by `vignetting`
        d = 1.0 + 0.5 * r2
        cos4 = 1.0 / (d * d)
        lin *= (1.0 - camera.vignetting * (1.0 - cos4))[..., None]
    if camera.defocus_px >= 0.5:
        lin = correlate_reflect(lin, _disc_kernel(camera.defocus_px))
    sh, sw = max(8, round(h * camera.resolution)), max(8, round(w * camera.resolution))
    if (sh, sw) != (h, w):
        lin = resize(lin, (sh, sw), "area")
    # Poisson-Gaussian noise in its heteroscedastic Gaussian form (Foi et al. 2008, eq. 3): variance =
    # mean electrons (shot) + read_noise_e^2; exact enough above ~20 e-, and 5x faster than rng.poisson.
    mean_e = np.clip(lin, 0.0, None) * np.float32(camera.full_well_e)
    sigma_e = np.sqrt(mean_e + np.float32(camera.read_noise_e * camera.read_noise_e))
    electrons = mean_e + sigma_e * rng.standard_normal(size=mean_e.shape, dtype=np.float32)
    signal = np.clip(electrons * np.float32(lighting.gain / camera.full_well_e), 0.0, 1.0)
    # colour matrix as elementwise products and sums (not `signal @ ccm.T`: BLAS kernels differ per CPU)
    ccm = np.asarray(camera.color_matrix, np.float32).reshape(3, 3)
    chans = [signal[..., 0], signal[..., 1], signal[..., 2]]
    signal = np.clip(np.stack([chans[0] * ccm[r, 0] + chans[1] * ccm[r, 1] + chans[2] * ccm[r, 2] for r in range(3)], axis=-1), 0.0, 1.0)
    # gamma encoding through a 4096-entry table (12-bit, finer than the 8-bit output)
    lut = power_table(4096, 1.0 / camera.gamma)
    encoded = lut[(signal * np.float32(4095.0) + np.float32(0.5)).astype(np.int32)]
    if (sh, sw) != (h, w):
        encoded = resize(encoded, (h, w), "linear")
    return np.clip(encoded * 255.0 + 0.5, 0, 255).astype(np.uint8)

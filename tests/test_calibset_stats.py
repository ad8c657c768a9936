"""Image statistics (quantkit.calibset.stats) on images whose answers are known."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from quantkit.calibset import STAT_COLUMNS, compute_stats, image_statistics, summarize
from quantkit.calibset.stats import read_stats_csv, write_stats_csv
from quantkit.errors import CalibrationSetError, InputFileError


def _texture(seed: int = 0, size: int = 256) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(30, 220, (size // 8, size // 8, 3)).astype(np.uint8)
    return cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)


def test_flat_grey() -> None:
    s = image_statistics(np.full((50, 70, 3), 128, np.uint8))
    assert set(s) == set(STAT_COLUMNS)
    assert (s["width"], s["height"]) == (70, 50)
    assert s["brightness_mean"] == pytest.approx(128) and s["brightness_p5"] == s["brightness_p95"] == 128
    assert s["contrast_rms"] == 0 and s["saturation_mean"] == 0 and s["sharpness_lapvar"] == pytest.approx(0)
    assert s["cast_rg"] == pytest.approx(1) and s["cast_bg"] == pytest.approx(1)
    assert s["noise_sigma"] == pytest.approx(0, abs=1e-9) and s["clip_dark"] == 0 and s["clip_bright"] == 0


def test_clipping_and_contrast() -> None:
    img = np.zeros((10, 10, 3), np.uint8)
    img[:, :3] = 255  # 30 % white
    img[:, 3:5] = 2  # 20 % at the dark clip level, 50 % black
    s = image_statistics(img)
    assert s["clip_bright"] == pytest.approx(0.3) and s["clip_dark"] == pytest.approx(0.7)
    assert s["contrast_rms"] == pytest.approx(np.std(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)) / 255)


def test_warm_cast_and_saturation() -> None:
    base = _texture()
    warm = np.clip(base * np.array([1.3, 1.0, 0.6]), 0, 255).astype(np.uint8)
    s0, s1 = image_statistics(base), image_statistics(warm)
    assert s1["cast_rg"] > 1.2 * s0["cast_rg"] and s1["cast_bg"] < 0.7 * s0["cast_bg"]
    assert s1["saturation_mean"] > s0["saturation_mean"]


def test_blur_lowers_sharpness_not_resolution() -> None:
    blocks = np.random.default_rng(1).integers(30, 220, (64, 64, 3)).astype(np.uint8)
    img = cv2.resize(blocks, (512, 512), interpolation=cv2.INTER_NEAREST)  # sharp 8-px blocks
    blurred = cv2.GaussianBlur(img, (0, 0), 2.0)
    small = cv2.resize(img, (256, 256), interpolation=cv2.INTER_AREA)
    big = cv2.resize(img, (1024, 768), interpolation=cv2.INTER_NEAREST)
    s, b, sm, bg = (image_statistics(x)["sharpness_lapvar"] for x in (img, blurred, small, big))
    assert b < 0.05 * s
    # measured at a fixed 512 x 512: the same scene at another resolution gives the same value
    assert sm == pytest.approx(s, rel=0.05) and bg == pytest.approx(s, rel=0.3)


def test_noise_sigma_estimates_added_noise() -> None:
    img = np.full((256, 256, 3), 100, np.float64)
    noisy = np.clip(img + np.random.default_rng(0).normal(0, 6, img.shape[:2])[..., None], 0, 255).astype(np.uint8)
    assert image_statistics(noisy)["noise_sigma"] == pytest.approx(6, rel=0.15)


def test_compute_summarize_and_csv_round_trip(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        p = tmp_path / "images" / f"{i}.png"
        p.parent.mkdir(exist_ok=True)
        Image.fromarray(np.full((8, 8, 3), 50 * (i + 1), np.uint8)).save(p)
        paths.append(p)
    frame = compute_stats(paths, root=tmp_path)
    assert list(frame["file"]) == ["images/0.png", "images/1.png", "images/2.png"]
    assert list(frame["brightness_mean"]) == pytest.approx([50, 100, 150])
    summ = summarize(frame)
    assert summ.loc["brightness_mean", "mean"] == pytest.approx(100) and summ.loc["brightness_mean", "std"] == pytest.approx(50)
    write_stats_csv(frame, tmp_path / "stats.csv")
    first = (tmp_path / "stats.csv").read_bytes()
    back = read_stats_csv(tmp_path / "stats.csv")
    assert list(back["brightness_mean"]) == pytest.approx([50, 100, 150])
    write_stats_csv(back, tmp_path / "stats.csv")
    assert (tmp_path / "stats.csv").read_bytes() == first


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(CalibrationSetError, match="stats.csv not found"):
        read_stats_csv(tmp_path / "stats.csv")
    (tmp_path / "stats.csv").write_text("file,width\nx,1\n")
    with pytest.raises(CalibrationSetError, match="column 'height' missing"):
        read_stats_csv(tmp_path / "stats.csv")
    (tmp_path / "x.jpg").write_bytes(b"")
    with pytest.raises(InputFileError, match="x.jpg"):
        compute_stats([tmp_path / "x.jpg"])

"""Images: transparency follows one documented rule and is reported once; stray files are named; a wrong size names the image."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from PIL import Image

from quantkit.calibset import register_set
from quantkit.errors import ConfigError, InputFileError
from quantkit.imageio import decode_image, load_image
from quantkit.note import Preprocessing


def test_partial_alpha_keeps_stored_colours(tmp_path):
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., :3] = 127
    rgba[..., 3] = 128
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    d = decode_image(tmp_path / "a.png")
    assert d.partial_alpha and d.mode == "RGBA" and d.array.shape == (4, 4, 3) and int(d.array.max()) == 127 == int(d.array.min())
    import cv2

    assert np.array_equal(load_image(tmp_path / "a.png")[..., ::-1], cv2.imread(str(tmp_path / "a.png")))  # what a cv2 deployment reads
    opaque = rgba.copy()
    opaque[..., 3] = 255
    Image.fromarray(opaque, "RGBA").save(tmp_path / "b.png")
    assert not decode_image(tmp_path / "b.png").partial_alpha
    la = Image.new("LA", (3, 3), (90, 10))
    la.save(tmp_path / "c.png")
    assert decode_image(tmp_path / "c.png").partial_alpha and load_image(tmp_path / "c.png")[0, 0].tolist() == [90, 90, 90]


def test_registration_warns_once_about_transparency_and_stray_files(tmp_path, caplog):
    (tmp_path / "images" / "sub").mkdir(parents=True)
    for i in range(4):
        a = np.full((6, 6, 4), 100, np.uint8)
        a[..., 3] = 40 if i < 3 else 255
        Image.fromarray(a, "RGBA").save(tmp_path / "images" / f"{i}.png")
    (tmp_path / "images" / "notes.txt").write_text("x")
    (tmp_path / "images" / "sub" / "scan.pdf").write_bytes(b"%PDF")
    (tmp_path / "images" / ".DS_Store").write_bytes(b"\0")
    caplog.set_level(logging.WARNING)
    res = register_set(tmp_path, name="s")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert res.set.count == 4 and len(warnings) == 2
    stray = next(w for w in warnings if "without an image suffix" in w)
    assert "2 file(s)" in stray and "images/notes.txt" in stray and "images/sub/scan.pdf" in stray and ".DS_Store" not in stray
    alpha = next(w for w in warnings if "transparency" in w)
    assert "3 image(s)" in alpha and "images/0.png" in alpha and "cv2.imread" in alpha


def test_resize_policy_none_names_the_image(tmp_path):
    Image.new("RGB", (10, 8)).save(tmp_path / "odd.png")
    pre = Preprocessing(input_size=(16, 16), resize_policy="none")
    with pytest.raises(ConfigError, match=r"odd.png: is 8x10 \(height x width\) but the note fixes 16x16 with resize_policy 'none'"):
        pre.load(tmp_path / "odd.png")
    with pytest.raises(ConfigError, match=r"^cam1/x.jpg: is 8x10"):
        pre.apply(np.zeros((8, 10, 3), np.uint8), source="cam1/x.jpg")
    with pytest.raises(InputFileError, match="nosuch.png: image not found"):
        pre.load(tmp_path / "nosuch.png")


def test_decompression_bomb_header_is_one_line(tmp_path):
    Image.MAX_IMAGE_PIXELS, old = 100, Image.MAX_IMAGE_PIXELS
    try:
        Image.new("RGB", (40, 40)).save(tmp_path / "big.png")
        with pytest.raises(InputFileError, match="big.png: image too large or its header is corrupt"):
            load_image(tmp_path / "big.png")
    finally:
        Image.MAX_IMAGE_PIXELS = old

"""``shortest_side_crop`` and ``fit_height_pad`` against the packages that use them.

* ``fit_height_pad`` + ``pad_input: 0.0`` is compared with rapidocr's own ``resize_norm_img`` (recognizer and
  direction classifier, the installed ``rapidocr_onnxruntime`` wheel) on scikit-image's photos cut into text-line
  shaped strips: both use ``cv2.resize(..., INTER_LINEAR)``, so the tensors agree to float32 rounding (< 1e-6).
* ``shortest_side_crop`` is compared with torchvision's ``Resize(N)`` + ``CenterCrop`` written out on PIL (torchvision
  is not installable here): ``_compute_resized_output_size`` and ``center_crop`` from
  ``torchvision/transforms/functional.py``, resampled by ``PIL.Image.resize(BILINEAR)`` as torchvision does for
  PIL images. quantkit resamples with PIL too, so the pixels are identical; ``cv2.INTER_LINEAR`` would differ by
  tens of grey levels at edges when shrinking (PIL's bilinear is antialiased), which no tolerance should hide.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import skimage.data
from PIL import Image

from quantkit.errors import ConfigError
from quantkit.note import Preprocessing
from quantkit.tasks import make_adapter

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera")


def _photo(name: str) -> np.ndarray:
    img = getattr(skimage.data, name)()
    return np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else np.ascontiguousarray(img[..., :3])


def _strips() -> list[np.ndarray]:
    """Text-line shaped cuts (wide, narrow and near-square) of the photos: both branches of rapidocr's width rule."""
    out = []
    for name in PHOTOS:
        img = _photo(name)
        h, w = img.shape[:2]
        for y0, hh, ww in ((h // 4, 32, w), (h // 3, 40, w // 3), (h // 2, 57, 61), (10, 120, 45), (0, h, w)):
            out.append(np.ascontiguousarray(img[y0:y0 + hh, :ww]))
    return out


RAPIDOCR_PRE = {"color_order": "BGR", "scale": 1 / 255, "mean": (0.5,), "std": (0.5,), "resize_policy": "fit_height_pad", "pad_input": 0.0}


def test_fit_height_pad_matches_rapidocr_recognizer_and_classifier() -> None:
    from rapidocr_onnxruntime.ch_ppocr_cls.text_cls import TextClassifier
    from rapidocr_onnxruntime.ch_ppocr_rec.text_recognize import TextRecognizer

    rec = Preprocessing(input_size=(48, 320), **RAPIDOCR_PRE)  # type: ignore[arg-type]
    cls = Preprocessing(input_size=(48, 192), **RAPIDOCR_PRE)  # type: ignore[arg-type]
    widths, worst = set(), 0.0
    for rgb in _strips():
        bgr = np.ascontiguousarray(rgb[..., ::-1])  # rapidocr reads images with cv2 (BGR)
        want_rec = TextRecognizer.resize_norm_img(SimpleNamespace(rec_image_shape=[3, 48, 320]), bgr, 320 / 48)
        want_cls = TextClassifier.resize_norm_img(SimpleNamespace(cls_image_shape=[3, 48, 192]), bgr)
        for pre, want in ((rec, want_rec), (cls, want_cls)):
            got, tf = pre.apply(rgb)
            assert got.shape == (1,) + want.shape and got.dtype == np.float32
            worst = max(worst, float(np.abs(got[0] - want).max()))
            widths.add(pre.input_size[1] - tf.pad[1] == pre.input_size[1])
    assert worst < 1e-6, worst
    assert widths == {True, False}  # both the padded and the full-width branch were exercised


def test_fit_height_pad_pads_in_pixels_without_pad_input() -> None:
    """Without ``pad_input`` the padding is a ``pad_value`` pixel run through the normalization (0 -> -1.0), unlike rapidocr's 0.0."""
    img = np.full((32, 64, 3), 200, np.uint8)
    pre = Preprocessing(input_size=(48, 320), resize_policy="fit_height_pad")
    x, tf = pre.apply(img)
    assert tf.pad == (0, 320 - 96) and (tf.scale_y, tf.scale_x) == (1.5, 1.5)
    assert np.all(x[0, :, :, 96:] == -1.0) and np.allclose(x[0, :, :, :96], 200 / 255 * 2 - 1, atol=1e-6)
    x0, _ = pre.replace(pad_input=0.0).apply(img)
    assert np.all(x0[0, :, :, 96:] == 0.0) and np.array_equal(x0[0, :, :, :96], x[0, :, :, :96])
    nhwc, _ = pre.replace(pad_input=0.0, layout="NHWC").apply(img)  # the pad is found on the width axis of either layout
    assert np.array_equal(nhwc[0].transpose(2, 0, 1), x0[0])
    np.testing.assert_allclose(tf.to_image(np.array([[96.0, 48.0]])), [[64.0, 32.0]])


def _torchvision_resize_center_crop(img: np.ndarray, size: int, crop: tuple[int, int]) -> np.ndarray:
    """torchvision ``F.center_crop(F.resize(pil, size), crop)`` for a PIL image, from ``transforms/functional.py``."""
    h, w = img.shape[:2]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)  # _compute_resized_output_size
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    pil = Image.fromarray(img).resize((new_w, new_h), Image.Resampling.BILINEAR)
    th, tw = crop
    top, left = int(round((new_h - th) / 2.0)), int(round((new_w - tw) / 2.0))  # center_crop
    return np.asarray(pil.crop((left, top, left + tw, top + th)))


IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "resize_policy": "shortest_side_crop"}


@pytest.mark.parametrize("size, crop", [(256, (224, 224)), (257, (224, 224)), (224, (224, 224)), (300, (240, 288))])
def test_shortest_side_crop_matches_torchvision_formula(size: int, crop: tuple[int, int]) -> None:
    pre = Preprocessing(input_size=crop, resize_short=size, **IMAGENET)  # type: ignore[arg-type]
    worst = 0.0
    for name in PHOTOS:
        img = _photo(name)
        for cut in (img, np.ascontiguousarray(img[: img.shape[0] * 2 // 3, : img.shape[1] // 2])):  # portrait and landscape
            want_px = _torchvision_resize_center_crop(cut, size, crop)
            got_px, tf = pre.resize(cut)
            assert np.array_equal(got_px, want_px), (name, cut.shape)
            want = ((want_px.astype(np.float32) / 255 - np.float32(IMAGENET["mean"])) / np.float32(IMAGENET["std"])).transpose(2, 0, 1)
            got, _ = pre.apply(cut)
            worst = max(worst, float(np.abs(got[0] - want).max()))
            # the crop window maps back onto the source image: model (0, 0) -> the crop's corner
            corner = tf.to_image(np.array([[0.0, 0.0]]))[0]
            assert corner[0] == pytest.approx(tf.crop[1] / tf.scale_x) and corner[1] == pytest.approx(tf.crop[0] / tf.scale_y)
    assert worst < 1e-5, worst


def test_shortest_side_crop_rounding_and_why_pil() -> None:
    img = _photo("astronaut")  # 512 x 512
    pre = Preprocessing(input_size=(224, 224), resize_short=257, **IMAGENET)  # type: ignore[arg-type]
    _, tf = pre.resize(img)
    assert tf.crop == (16, 16) and tf.cropped  # (257 - 224) / 2 = 16.5: Python's round gives 16, as torchvision
    # a 224 x 224 image at resize_short 224 passes through untouched
    same = np.ascontiguousarray(img[:224, :224])
    out, tf = pre.replace(resize_short=224).resize(same)
    assert np.array_equal(out, same) and tf.crop == (0, 0) and not tf.cropped
    # cv2.INTER_LINEAR is not torchvision's resampling: shrinking 512 -> 257 differs by tens of grey levels
    import cv2

    ref = np.asarray(Image.fromarray(img).resize((257, 257), Image.Resampling.BILINEAR)).astype(int)
    assert np.abs(cv2.resize(img, (257, 257), interpolation=cv2.INTER_LINEAR).astype(int) - ref).max() > 20


def test_ground_truth_is_refused_through_a_crop_and_mapped_otherwise() -> None:
    img = _photo("coffee")  # 400 x 600: the sides are cut
    _, tf = Preprocessing(input_size=(224, 224), resize_short=256, **IMAGENET).resize(img)  # type: ignore[arg-type]
    labels = {"boxes": [[100, 100, 200, 200, 0]]}
    with pytest.raises(ConfigError, match="shortest_side_crop cuts objects") as e:
        make_adapter("box_detector").truth(labels, tf)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="ground-truth text quads"):
        make_adapter("db_text").truth({"text_boxes": [[[0, 0], [10, 0], [10, 10], [0, 10]]]}, tf)
    _, tf = Preprocessing(input_size=(48, 320), resize_policy="fit_height_pad").resize(np.zeros((24, 100, 3), np.uint8))
    truth = make_adapter("box_detector").truth({"boxes": [[10, 4, 20, 8, 0]]}, tf)
    assert truth is not None
    np.testing.assert_allclose(truth.polygons.reshape(-1, 2).min(0), [20, 8])
    np.testing.assert_allclose(truth.polygons.reshape(-1, 2).max(0), [40, 16])


@pytest.mark.parametrize("fields, message", [
    ({"resize_policy": "letterbox", "resize_short": 256}, "preprocessing.resize_short: 256 is used only by resize_policy shortest_side_crop"),
    ({"resize_policy": "shortest_side_crop", "resize_short": 200}, "smaller than the input's larger side 224"),
    ({"resize_policy": "shortest_side_crop", "resize_short": -1}, "must be positive"),
    ({"resize_policy": "stretch", "pad_input": 0.0}, "preprocessing.pad_input: resize_policy stretch pads nothing"),
])
def test_bad_fields_name_the_field_and_the_fix(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Preprocessing.from_dict({"input_size": [224, 224], **fields})


def test_new_fields_round_trip_and_stay_out_of_old_notes() -> None:
    old = Preprocessing()
    assert "resize_short" not in old.to_dict() and "pad_input" not in old.to_dict()
    for pre in (Preprocessing(input_size=(224, 224), resize_short=256, resize_policy="shortest_side_crop"),
                Preprocessing(input_size=(48, 320), resize_policy="fit_height_pad", pad_input=0.0)):
        assert Preprocessing.from_dict(pre.to_dict()) == pre


def test_intake_refuses_a_bad_resize_field_in_one_line(tmp_path, capsys) -> None:
    from quantkit.cli.main import main

    params = tmp_path / "p.yaml"
    params.write_text("intake:\n  input_size: [224, 224]\n  preprocessing:\n    resize_policy: shortest_side_crop\n    resize_short: 200\n")
    assert main(["intake", str(tmp_path / "m.onnx"), "--params", str(params), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(params) in err and "resize_short" in err and "set resize_short >= 224" in err, err


def test_fit_height_width_rule_is_rapidocrs_float_expression() -> None:
    """``min(W, ceil(H * (w / h)))`` exactly as rapidocr computes it (ratio first), e.g. 48 * (50 / 7)."""
    pre = Preprocessing(input_size=(48, 640), resize_policy="fit_height_pad")
    for h, w in ((7, 50), (33, 100), (3, 1000), (48, 48)):
        _, tf = pre.resize(np.zeros((h, w, 3), np.uint8))
        assert 640 - tf.pad[1] == min(640, int(math.ceil(48 * (w / float(h)))))

"""The adapters on real models shipped in PyPI wheels: PP-OCR's recognizer and direction classifier
(``rapidocr-onnxruntime``) and ddddocr's YOLOX character detector (``ddddocr``, skipped when not installed),
on text rendered with matplotlib's DejaVu fonts; decisions compared with each package's own post-processing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from quantkit.tasks import make_adapter
from quantkit.tasks.boxdecode import corners
from quantkit.tasks.matching import box_iou, match


def _font(name: str, px: int):
    from PIL import ImageFont

    from quantkit.demo.scene import _fonts_dir

    return ImageFont.truetype(str(_fonts_dir() / name), px)


def _line_image(text: str, font: str, px: int = 32) -> np.ndarray:
    """``(H, W, 3) uint8`` RGB: one dark line of text on a light label."""
    from PIL import Image, ImageDraw

    f = _font(font, px)
    bb = f.getbbox(text)
    im = Image.new("RGB", (bb[2] - bb[0] + 16, bb[3] - bb[1] + 12), (250, 250, 245))
    ImageDraw.Draw(im).text((8 - bb[0], 6 - bb[1]), text, font=f, fill=(20, 20, 30))
    return np.asarray(im)


def _rec_input(img: np.ndarray) -> np.ndarray:
    """rapidocr ``TextRecognizer.resize_norm_img`` (rec_img_shape [3, 48, 320]) of one BGR line, batch of one."""
    import cv2

    h, w = img.shape[:2]
    width = int(48 * max(320 / 48, w / h))
    rw = min(width, math.ceil(48 * w / h))
    r = cv2.resize(img[..., ::-1], (rw, 48)).astype(np.float32).transpose(2, 0, 1) / 255
    out = np.zeros((1, 3, 48, width), np.float32)
    out[0, :, :, :rw] = (r - 0.5) / 0.5
    return out


def _output_shapes(model) -> dict:
    return {o.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in o.type.tensor_type.shape.dim]
            for o in model.graph.output}


def test_ppocr_recognizer_reads_rendered_label_lines():
    import onnx
    from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode

    from quantkit.demo import packaged_model_path
    from quantkit.demo.scene import FONTS, label_text
    from quantkit.runner import OrtRunner

    path = packaged_model_path("ch_PP-OCRv4_rec_infer.onnx")
    model = onnx.load(str(path))
    a = make_adapter("ctc_text", {}).with_model(model)
    a.check_outputs(_output_shapes(model))  # [N, T, 6625]: blank + 6623 characters from metadata_props + space
    assert len(a.characters()) == 6625
    rapidocr = CTCLabelDecode(character=next(p.value for p in model.metadata_props if p.key == "character").splitlines())
    rng = np.random.default_rng(1)
    texts = [label_text(rng) for _ in range(6)]
    read = []
    with OrtRunner(str(path)) as r:
        for i, text in enumerate(texts):
            out = r.infer({"x": _rec_input(_line_image(text, FONTS[i % len(FONTS)]))})
            d = a.decide(out)
            ((ref_text, ref_score),) = rapidocr(next(iter(out.values())))
            assert d.top[1] == ref_text and len(d) == 1 and d.scores[0] == pytest.approx(ref_score, abs=1e-5)
            read.append(d.top[1])
    assert sum(t == r for t, r in zip(texts, read)) >= 5, list(zip(texts, read))


def test_ppocr_direction_classifier_is_a_classifier_not_a_recognizer():
    import cv2
    import onnx

    from quantkit.demo import CLS_MODEL, packaged_model_path
    from quantkit.errors import ModelError
    from quantkit.runner import OrtRunner

    path = packaged_model_path(CLS_MODEL)
    shapes = _output_shapes(onnx.load(str(path)))
    with pytest.raises(ModelError, match=r"output '.*' has shape \[-1x2\] but the declared layout is ctc_text"):
        make_adapter("ctc_text", {}).check_outputs(shapes)
    a = make_adapter("classifier", {"cls_thresh": 0.9})
    a.check_outputs(shapes)
    line = cv2.resize(_line_image("LOT 45A221", "DejaVuSans.ttf"), (192, 48))[..., ::-1]
    labels = []
    with OrtRunner(str(path)) as r:
        for img in (line, cv2.rotate(line, cv2.ROTATE_180)):
            x = ((img.astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]
            labels.append(a.decide(r.infer({"x": np.ascontiguousarray(x)})).top[0])
    assert labels == [0, 1]  # '0' and '180'


DDDD = {"decode": "yolox", "strides": [8, 16, 32], "score_thresh": 0.1, "iou_thresh": 0.45, "class_agnostic": True, "nms_offset": 1}
"""ddddocr's own post-processing (``core/detection_engine.py``: demo_postprocess, score obj x cls > 0.1, class-agnostic
pixel-inclusive NMS at 0.45) declared as options."""


def _ddddocr_detector():
    ddddocr = pytest.importorskip("ddddocr")
    import onnx

    path = Path(ddddocr.__file__).parent / "common_det.onnx"
    model = onnx.load(str(path))
    a = make_adapter("box_detector", DDDD).with_model(model)
    a.check_outputs(_output_shapes(model))  # [1, 3549, 6] = 52*52 + 26*26 + 13*13 cells of the 416x416 input
    return ddddocr, path, a


def _bgr_input(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rgb[..., ::-1]).transpose(2, 0, 1)[None].astype(np.float32)  # BGR, 0-255, no normalisation


def test_ddddocr_yolox_decisions_equal_its_own_postprocessing():
    import cv2

    from quantkit.demo.scene import SceneAssets, compose
    from quantkit.runner import OrtRunner

    ddddocr, path, a = _ddddocr_detector()
    assert a.input_size == (416, 416)
    det = ddddocr.DdddOcr(det=True, show_ad=False)
    assets = SceneAssets()
    with OrtRunner(str(path)) as r:
        for seed in (1, 5):  # 416x416 scenes: ddddocr's letterbox ratio is 1
            img, _ = compose(assets, np.random.default_rng(seed), (416, 416), (2, 4))
            theirs = det.detection(cv2.imencode(".png", np.ascontiguousarray(img[..., ::-1]))[1].tobytes())
            d = a.decide(r.infer({"images": _bgr_input(img)}))
            xyxy = np.concatenate([d.polygons.min(1), d.polygons.max(1)], axis=1)
            ours = [[max(0, int(b[0])), max(0, int(b[1])), min(416, int(b[2])), min(416, int(b[3]))] for b in xyxy]
            assert len(theirs) > 10 and sorted(ours) == sorted(theirs)


def test_ddddocr_yolox_boxes_land_on_characters():
    from PIL import Image, ImageDraw

    from quantkit.runner import OrtRunner

    _, path, a = _ddddocr_detector()
    im = Image.new("RGB", (416, 416), (245, 245, 240))
    draw = ImageDraw.Draw(im)
    font = _font("DejaVuSans.ttf", 28)
    chars = []
    for row, text in enumerate(["LOT 12A345", "SN 8812044", "EXP 2027-03", "P/N 4471-2209"]):
        x, y = 20, 30 + row * 60
        draw.text((x, y), text, font=font, fill=(20, 20, 30))
        chars += [draw.textbbox((x + draw.textlength(text[:i], font=font), y), ch, font=font) for i, ch in enumerate(text) if ch != " "]
    with OrtRunner(str(path)) as r:
        d = a.decide(r.infer({"images": _bgr_input(np.asarray(im))}))
    tp, _ = match(box_iou(d.polygons, corners(np.asarray(chars, np.float32))), min_iou=0.5)
    assert tp / len(chars) >= 0.75 and tp / len(d) >= 0.75, (tp, len(chars), len(d))  # one box per character

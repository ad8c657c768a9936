"""Real models that are not the demo, on every installed runtime: support, three-way compare, localisation.

Models come from PyPI wheels (nothing is downloaded at run time): ddddocr's YOLOX detector ``common_det.onnx``
(``pip install ddddocr``; 416x416, BGR, 0..255) and rapidocr-onnxruntime's PP-OCRv4 recognizer
(``ch_PP-OCRv4_rec_infer.onnx``, 48x320) and direction classifier (``ch_ppocr_mobile_v2.0_cls_infer.onnx``,
48x192), both ``(x/255 - 0.5) / 0.5``. Each model's input is fixed to batch 1 and its opset raised to 13 where lower (as ``quantkit intake`` does), it is quantized with ONNX Runtime's
``quantize_static`` (QDQ, per-channel, uint8 activations / int8 weights, MinMax) on ``--calib`` crops of
scikit-image's photos, then:

* ``support``: :func:`quantkit.intake.support.check_support` for ``cpu`` and ``openvino`` on the FP32 and INT8 files;
* ``patterns``: the suite's patterns the INT8 model uses (:func:`quantkit.patterns.patterns_in`);
* ``compare``: :func:`quantkit.quantize.runtime_compare.compare_runtimes` on ``--images`` other crops: per output,
  SQNR vs FP32 and agreement with the QDQ simulation on ORT level ``all`` and OpenVINO f32, and where a runtime parts
  from the simulation, the first tensor and op (cut models).

Usage::

    python bench/runtimes_real_models.py [--calib 8] [--images 4] > results.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png", "hubble_deep_field.jpg",
          "ihc.png", "retina.jpg", "logo.png", "page.png", "text.png", "camera.png", "coins.png")


def _models() -> list[dict[str, Any]]:
    import ddddocr
    import rapidocr_onnxruntime

    dd = Path(ddddocr.__file__).parent
    ro = Path(rapidocr_onnxruntime.__file__).parent / "models"
    return [
        {"name": "yolox_common_det", "path": dd / "common_det.onnx", "shape": (416, 416), "bgr": True, "norm": None},
        {"name": "ppocrv4_rec", "path": ro / "ch_PP-OCRv4_rec_infer.onnx", "shape": (48, 320), "bgr": False, "norm": 0.5},
        {"name": "ppocr_cls", "path": ro / "ch_ppocr_mobile_v2.0_cls_infer.onnx", "shape": (48, 192), "bgr": False, "norm": 0.5},
    ]


def _inputs(spec: dict[str, Any], n: int, offset: int) -> list[np.ndarray]:
    import skimage
    from PIL import Image

    data = Path(skimage.__file__).parent / "data"
    h, w = spec["shape"]
    out = []
    for i in range(offset, offset + n):
        im = np.asarray(Image.open(data / PHOTOS[i % len(PHOTOS)]).convert("RGB").resize((w, h)), np.float32)
        if spec["bgr"]:
            im = im[..., ::-1]
        x = im.transpose(2, 0, 1)[None]
        if spec["norm"] is not None:
            x = (x / 255.0 - 0.5) / spec["norm"]
        out.append(np.ascontiguousarray(x, np.float32))
    return out


def _fixed(path: Path, shape: tuple[int, int]) -> Any:
    import onnx

    m = onnx.load(str(path))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, (1, 3, *shape)):
        d.Clear()
        d.dim_value = v
    for o in m.graph.output:  # let shape inference recompute output shapes
        for d in o.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.Clear()
    if next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:  # per-channel QDQ needs opset 13 (as intake does)
        from onnx import version_converter

        m = version_converter.convert_version(m, 13)
    return onnx.shape_inference.infer_shapes(m)


def _quantize(fp32: Path, out: Path, feeds: list[np.ndarray], name: str) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    class Reader:
        def __init__(self) -> None:
            self.it = iter({name: x} for x in feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    quantize_static(str(fp32), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def run_model(spec: dict[str, Any], tmp: Path, n_calib: int, n_images: int) -> dict[str, Any]:
    import onnx

    from quantkit.intake.support import check_support
    from quantkit.patterns import patterns_in
    from quantkit.quantize.runtime_compare import compare_runtimes

    fp = _fixed(spec["path"], spec["shape"])
    fp_path, q_path = tmp / f"{spec['name']}.onnx", tmp / f"{spec['name']}_int8.onnx"
    onnx.save(fp, str(fp_path))
    name = fp.graph.input[0].name
    _quantize(fp_path, q_path, _inputs(spec, n_calib, 0), name)
    q = onnx.load(str(q_path))
    support = {}
    for label, m in (("fp32", fp), ("int8", q)):
        for target in ("cpu", "openvino"):
            r = check_support(m, target)
            support[f"{label}/{target}"] = {"supported": r.supported, "issues": [i.to_dict() for i in r.issues[:3]], "source": r.source,
                                            "run_error": r.run_error}
    rc = compare_runtimes(fp, q, [{name: x} for x in _inputs(spec, n_images, n_calib)])
    return {"model": spec["name"], "file": spec["path"].name, "input": [1, 3, *spec["shape"]], "nodes_fp32": len(fp.graph.node),
            "nodes_int8": len(q.graph.node), "support": support, "patterns": [[p, len(nodes)] for p, nodes in patterns_in(q)],
            "compare": rc.to_dict()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--only", help="one model name")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = []
    with tempfile.TemporaryDirectory(prefix="qk-real-") as tmp:
        for spec in _models():
            if a.only and spec["name"] != a.only:
                continue
            out.append(run_model(spec, Path(tmp), a.calib, a.images))
    json.dump(out, sys.stdout, indent=2, sort_keys=True, default=lambda v: None if isinstance(v, float) and not np.isfinite(v) else str(v))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

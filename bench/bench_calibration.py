"""Calibration benchmark: quantkit's bounded calibration vs ORT's own ``quantize_static`` and vs a plain FP32
forward pass over the same images, side by side in one run.

For every (implementation, method, N) it runs one quantization in a fresh subprocess, and before each of them
a plain FP32 forward pass (decode + preprocess + ``session.run`` at ORT's defaults: all graph optimizations,
one intra-op thread per core) over the same N images in its own subprocess, so the two alternate
(forward, method, forward, method, ...). It reports, as JSON on stdout:

* ``peak_rss_mb``: the child's peak resident set size (``os.wait4`` rusage ``ru_maxrss``, KiB on Linux);
* ``seconds`` and ``seconds_per_image`` of the whole quantization (calibration + quantizer);
* ``int8_ms`` / ``fp32_ms``: mean latency of the result and of the FP32 model on the evaluation images
  (ORT CPU, all graph optimizations, 1 image per run);
* ``pixel_iou``: IoU of the binarized probability maps (``> thresh``, default 0.3) INT8 vs FP32, pooled
  over the evaluation images (the issue's agreement measure).

* ``forward_s_per_image``: the median over this N's forward runs; ``calibration_vs_forward`` (quantkit's
  calibration step per image / a forward pass per image) and ``quantize_vs_forward`` (the whole quantization
  per image, quantizer and checks included) -- issue 16's "calibration at the cost of a forward pass";
  ``calibration_vs_forward_before``: each run against the forward pass run just before it.
* ``--repeats R``: every configuration runs R times, in turn with the others; each figure is the median over
  its runs (``runs`` keeps them).
* ``--impl quantkit-optimized``: quantkit with ``calibration_graph: optimized`` (ORT's ``all`` level).

ORT's histogram methods are skipped for N above ``--ort-max-n`` (they hold every activation of every
image; MinMax keeps only reduced values and always runs).

Usage::

    python bench/bench_calibration.py --size 640 --n 8 32 --methods minmax percentile entropy \\
        [--set DIR] [--intake DIR] [--impl quantkit quantkit-optimized ort] [--chunk 1] [--eval-images 4] [--repeats 1]

    # issue 16's goal, quantkit only, on the demo set (64 images at 640x640):
    python bench/bench_calibration.py --size 640 --n 64 --impl quantkit quantkit-optimized --methods minmax percentile entropy --repeats 3

Without ``--intake`` the embedded PP-OCR detector is prepared at ``--size`` (opset 13, fixed shape);
without ``--set`` the demo's calibration set ``calibration_sets/cam1-day`` (64 images) is used, its images
cycled for larger N; without that folder, ``max(N)`` crops of scikit-image's photos are generated into a
temporary folder (deterministic, seed 0). Each row also has ``calibration_seconds_per_image`` (quantkit's
calibration step alone) and, against MinMax of the same implementation and N from the same run,
``s_per_image_vs_minmax`` and ``calibration_vs_minmax``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _prepare_intake(folder: Path, size: int) -> Path:
    import onnx
    from onnx import version_converter

    from quantkit.demo import packaged_model_path
    from quantkit.note import ExportNote, Preprocessing

    m = onnx.load(str(packaged_model_path()))
    for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, (1, 3, size, size)):
        d.Clear()
        d.dim_value = v
    for o in m.graph.output:
        for d, v in zip(o.type.tensor_type.shape.dim, (1, 1, size, size)):
            d.Clear()
            d.dim_value = v
    m = onnx.shape_inference.infer_shapes(version_converter.convert_version(m, 13))
    note = ExportNote(preprocessing=Preprocessing(input_size=(size, size)))
    note.embed(m)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(folder / "model.onnx"))
    note.save(folder / "export_note.json")
    return folder


def _prepare_set(folder: Path, n: int, size: int) -> Path:
    import numpy as np
    import skimage
    from PIL import Image

    from quantkit.calibset import register_set

    photos = sorted(p for p in (Path(skimage.__file__).parent / "data").iterdir() if p.suffix in (".png", ".jpg"))
    rng = np.random.default_rng(0)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        im = Image.open(photos[i % len(photos)]).convert("RGB")
        w, h = im.size
        s = int(min(w, h) * rng.uniform(0.6, 1.0))
        x0, y0 = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
        im.crop((x0, y0, x0 + s, y0 + s)).resize((size, size)).save(folder / "images" / f"{i:04d}.png")
    register_set(folder, name="bench", kind="calibration", camera="bench", lighting="mixed", site="bench")
    return folder


_DEMO_SET = Path(__file__).resolve().parent.parent / "calibration_sets" / "cam1-day"


def _default_set(folder: Path, n: int, size: int) -> Path:
    """The demo's real calibration set (``calibration_sets/cam1-day``), its images cycled to ``n`` when it has
    fewer; without it, ``n`` generated crops of scikit-image's photos."""
    import shutil

    from quantkit.calibset import register_set

    if not _DEMO_SET.exists():
        return _prepare_set(folder, n, size)
    images = sorted(p for p in (_DEMO_SET / "images").iterdir() if p.is_file())
    if len(images) >= n:
        return _DEMO_SET
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        src = images[i % len(images)]
        shutil.copyfile(src, folder / "images" / f"{i:05d}{src.suffix}")
    register_set(folder, name="bench-cam1-day-cycled", kind="calibration", camera="cam1", lighting="day", site="bench")
    return folder


def _forward(a: argparse.Namespace) -> None:
    """Runs in the child: a plain FP32 forward pass over the first N images (cycled set); prints one JSON line."""
    import numpy as np

    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote
    from quantkit.runner import OrtRunner

    cset = CalibrationSet.load(a.set)
    pre = ExportNote.load(Path(a.intake) / "export_note.json").preprocessing
    reader = CalibrationSetReader(cset, pre)
    reader.set_range(0, a.n)
    with OrtRunner(Path(a.intake) / "model.onnx") as fp:
        fp.infer({pre.input_name: np.zeros((1, 3, a.size, a.size), np.float32)})  # session warm-up, as calibration creates its own
        t0 = time.perf_counter()
        n = 0
        while (feed := reader.get_next()) is not None:
            fp.infer(feed)
            n += 1
        seconds = time.perf_counter() - t0
    print(json.dumps({"forward_seconds": round(seconds, 3), "forward_s_per_image": round(seconds / n, 4), "images": n}))


def _worker(a: argparse.Namespace) -> None:
    """Runs in the child: one quantization, then latency/agreement; prints one JSON line."""
    import logging

    import numpy as np
    import onnxruntime as ort

    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote
    from quantkit.quantize import StaticQuantConfig, ort_bridge, quantize

    logging.disable(logging.WARNING)
    cset = CalibrationSet.load(a.set)
    pre = ExportNote.load(Path(a.intake) / "export_note.json").preprocessing
    cfg = StaticQuantConfig(method=a.method, per_channel=True, max_images=a.n, calibration_chunk_size=a.chunk,
                            calibration_graph="optimized" if a.impl == "quantkit-optimized" else "exact")
    out = Path(a.out)
    calib_s: list[float] = []
    t0 = time.perf_counter()
    if a.impl.startswith("quantkit"):
        from quantkit.quantize import engine

        def timed(*args: Any, **kw: Any) -> Any:  # the calibration step's own wall time
            run = collect_ranges(*args, **kw)
            calib_s.append(run.seconds)
            return run

        collect_ranges, engine.collect_ranges = engine.collect_ranges, timed  # type: ignore[assignment]
        quantize(a.intake, cfg, out=out, calibration_set=cset)
        model = out / "model_int8.onnx"
    else:
        import contextlib
        import io

        import onnx
        from onnxruntime.quantization import quantize_static

        from quantkit.quantize.engine import constants_to_initializers

        m = onnx.load(str(Path(a.intake) / "model.onnx"))
        constants_to_initializers(m)
        out.mkdir(parents=True, exist_ok=True)
        onnx.save(m, str(out / "prepared.onnx"))
        reader = CalibrationSetReader(cset, pre)
        reader.set_range(0, a.n)
        ops, excl = ort_bridge.resolve_exclusions(cfg, m, "qdq")
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(str(out / "prepared.onnx"), str(out / "model_int8.onnx"), reader, **ort_bridge.static_kwargs(cfg, ops, excl),
                            calibration_providers=None)
        model = out / "model_int8.onnx"
    seconds = time.perf_counter() - t0
    reader = CalibrationSetReader(cset, pre)
    reader.set_range(0, min(a.eval_images, len(reader)))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    fp = ort.InferenceSession(str(Path(a.intake) / "model.onnx"), so)
    q = ort.InferenceSession(str(model), so)
    inter = union = 0
    tf, tq = [], []
    for _, x in reader.iter_batches():
        t = time.perf_counter()
        yf = fp.run(None, {pre.input_name: x})[0]
        tf.append(time.perf_counter() - t)
        t = time.perf_counter()
        yq = q.run(None, {pre.input_name: x})[0]
        tq.append(time.perf_counter() - t)
        bf, bq = yf > a.thresh, yq > a.thresh
        inter += int(np.count_nonzero(bf & bq))
        union += int(np.count_nonzero(bf | bq))
    print(json.dumps({"seconds": round(seconds, 2), "seconds_per_image": round(seconds / a.n, 3),
                      "calibration_seconds_per_image": round(calib_s[0] / a.n, 3) if calib_s else None,
                      "fp32_ms": round(1000 * float(np.mean(tf[1:] or tf)), 1), "int8_ms": round(1000 * float(np.mean(tq[1:] or tq)), 1),
                      "pixel_iou": round(inter / union, 4) if union else None}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--n", type=int, nargs="+", default=[8, 32])
    p.add_argument("--methods", nargs="+", default=["minmax", "percentile", "entropy"])
    p.add_argument("--impl", nargs="+", default=["quantkit", "ort"], choices=["quantkit", "quantkit-optimized", "ort"],
                   help="implementations to time (a forward pass is always timed before each)")
    p.add_argument("--ort-max-n", type=int, default=8, help="skip ORT's quantize_static above this N (memory)")
    p.add_argument("--chunk", type=int, default=1, help="quantkit calibration_chunk_size")
    p.add_argument("--repeats", type=int, default=1, help="runs of every configuration, in turn; medians reported (each run kept)")
    p.add_argument("--eval-images", type=int, default=4)
    p.add_argument("--thresh", type=float, default=0.3)
    p.add_argument("--set")
    p.add_argument("--intake")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl1", dest="impl_one", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--n1", type=int, dest="n_one", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        a.impl, a.n = a.impl_one, a.n_one
        (_forward if a.impl == "forward" else _worker)(a)
        return
    with tempfile.TemporaryDirectory(prefix="quantkit-bench-") as tmp_s:
        tmp = Path(tmp_s)
        intake = Path(a.intake) if a.intake else _prepare_intake(tmp / "intake", a.size)
        cset = Path(a.set) if a.set else _default_set(tmp / "set", max(a.n), a.size)
        results, forwards, runs = [], {}, {}
        for rep in range(a.repeats):
            for n in a.n:
                for method in a.methods:
                    for impl in a.impl:
                        row = {"impl": impl, "method": method, "n": n, "size": a.size, "chunk": a.chunk if impl.startswith("quantkit") else None}
                        if impl == "ort" and method != "minmax" and n > a.ort_max_n:
                            if rep == 0:
                                results.append({**row, "skipped": f"N > --ort-max-n {a.ort_max_n} (holds all activations)"})
                            continue
                        fw = _child(tmp, "forward", method, n, a, cset, intake)  # interleaved: a forward pass before each method
                        if "forward_s_per_image" in fw:
                            forwards.setdefault(n, []).append(fw)
                        got = _child(tmp, impl, method, n, a, cset, intake)
                        if got.get("calibration_seconds_per_image") and "forward_s_per_image" in fw:  # against the pass just before it
                            got["calibration_vs_forward_before"] = round(got["calibration_seconds_per_image"] / fw["forward_s_per_image"], 3)
                        print(json.dumps({**row, **got}), file=sys.stderr)
                        runs.setdefault((impl, method, n), (row, []))[1].append(got)
        for row, got in runs.values():  # medians over the repeats, each run kept
            ok = [g for g in got if "seconds" in g]
            if not ok:
                results.append({**row, **got[-1]})
                continue
            med = {k: float(np.median([g[k] for g in ok])) for k in ok[0] if isinstance(ok[0][k], (int, float)) and all(g.get(k) is not None for g in ok)}
            results.append({**row, **ok[0], **{k: round(v, 4) for k, v in med.items()}, "runs": ok if len(ok) > 1 else None})
        for n, runs in forwards.items():  # each quantization against a forward pass over the same images, from this run
            fwd = float(np.median([f["forward_s_per_image"] for f in runs]))
            for r in results:
                if r["n"] == n and "seconds_per_image" in r:
                    r["forward_s_per_image"] = round(fwd, 4)
                    r["quantize_vs_forward"] = round(r["seconds_per_image"] / fwd, 2)
                    if r.get("calibration_seconds_per_image"):
                        r["calibration_vs_forward"] = round(r["calibration_seconds_per_image"] / fwd, 2)
        for r in results:  # each configuration against MinMax of the same implementation and N, from this run
            mm = next((m for m in results if m["impl"] == r["impl"] and m["n"] == r["n"] and m["method"] == "minmax" and "seconds_per_image" in m), None)
            if mm is not None and "seconds_per_image" in r:
                r["s_per_image_vs_minmax"] = round(r["seconds_per_image"] / mm["seconds_per_image"], 2)
                if r.get("calibration_seconds_per_image") and mm.get("calibration_seconds_per_image"):
                    r["calibration_vs_minmax"] = round(r["calibration_seconds_per_image"] / mm["calibration_seconds_per_image"], 2)
        print(json.dumps({"cpu_count": os.cpu_count(), "set": a.set or (str(_DEMO_SET) if _DEMO_SET.exists() else "generated"),
                          "load_avg_at_end": [round(x, 2) for x in os.getloadavg()], "forward_runs": forwards, "results": results}, indent=2))


def _child(tmp: Path, impl: str, method: str, n: int, a: argparse.Namespace, cset: Path, intake: Path) -> dict[str, Any]:
    """One worker subprocess; its JSON line plus its own peak RSS (``os.wait4``), or ``{"error": last stderr line}``."""
    cmd = [sys.executable, __file__, "--worker", "--impl1", impl, "--method", method, "--n1", str(n), "--chunk", str(a.chunk),
           "--set", str(cset), "--intake", str(intake), "--out", str(tmp / f"out-{impl}-{method}-{n}"), "--size", str(a.size),
           "--eval-images", str(a.eval_images), "--thresh", str(a.thresh)]
    with open(tmp / "stdout", "w+") as so, open(tmp / "stderr", "w+") as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        so.seek(0)
        se.seek(0)
        out, err = so.read(), se.read()
    if os.waitstatus_to_exitcode(status) != 0:
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


if __name__ == "__main__":
    main()

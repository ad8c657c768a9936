"""Latency of the deployed INT8 model on each installed runtime, and of FP32, measured side by side.

The demo's deployed model (``work/quantize/deployed/model_int8.onnx``, after ``dvc repro``) and its FP32 intake
model run on ``--images`` images of a site set, preprocessed by the export note. Variants: FP32 on ONNX Runtime
(level ``all``), INT8 on ONNX Runtime (level ``all``) and INT8 on OpenVINO (CPU, f32 pinned), each at
``--threads`` intra-op threads (the same for all, so the numbers compare). Each round runs every variant once on
the same image, in an order that rotates per round (interleaved: load from other processes hits all alike); one
warm-up round is not counted. Prints JSON: median and mean ms per variant and threads, and ratios to FP32 and to
ORT INT8.

Usage::

    python bench/bench_runtimes.py [--images 8] [--rounds 3] [--threads 1 2] [--set site_sets/cam1-day]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intake", default="work/ppocr_det/intake")
    ap.add_argument("--quantized", default="work/ppocr_det/quantize/deployed")
    ap.add_argument("--set", default="site_sets/cam1-day")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args(argv)

    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote
    from quantkit.runtimes import available_runtimes, make_runtime
    from quantkit.runtimes.precision import cpu_isa

    note = ExportNote.load(Path(a.intake) / "export_note.json")
    reader = CalibrationSetReader(CalibrationSet.load(a.set), note.preprocessing)
    reader.set_range(0, min(a.images, len(reader)))
    xs = [x for _, x in reader.iter_batches()]
    name = note.preprocessing.input_name
    fp32, int8 = Path(a.intake) / "model.onnx", Path(a.quantized) / "model_int8.onnx"
    out: dict = {"machine": cpu_isa(), "images": len(xs), "rounds": a.rounds, "results": {}}
    for threads in a.threads:
        variants = {"fp32 onnxruntime[all]": make_runtime("onnxruntime", fp32, intra_op_num_threads=threads),
                    "int8 onnxruntime[all]": make_runtime("onnxruntime", int8, intra_op_num_threads=threads)}
        if "openvino" in available_runtimes():
            variants["int8 openvino[f32]"] = make_runtime("openvino", int8, num_threads=threads)
        for rt in variants.values():
            rt.activate()
        times: dict[str, list[float]] = {k: [] for k in variants}
        names = list(variants)
        for r in range(a.rounds + 1):
            for i, x in enumerate(xs):
                k = (r * len(xs) + i) % len(names)
                for label in names[k:] + names[:k]:
                    t0 = time.perf_counter()
                    variants[label].infer({name: x})
                    if r > 0:
                        times[label].append(1000 * (time.perf_counter() - t0))
        for rt in variants.values():
            rt.deactivate()
        med = {k: statistics.median(v) for k, v in times.items()}
        out["results"][str(threads)] = {
            "median_ms": {k: round(v, 2) for k, v in med.items()},
            "mean_ms": {k: round(statistics.fmean(v), 2) for k, v in times.items()},
            "speedup_vs_fp32": {k: round(med["fp32 onnxruntime[all]"] / v, 3) for k, v in med.items()},
            "openvino_vs_ort_int8": round(med["int8 onnxruntime[all]"] / med["int8 openvino[f32]"], 3) if "int8 openvino[f32]" in med else None,
        }
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

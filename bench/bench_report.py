"""Benchmark: shift report over 1,000 synthetic site images' evaluation outputs.

Prints JSON: report build time, an inference-time estimate for the same images (measured FP32
PP-OCR detector latency at the deployment size on a few images x images x models evaluated), the
ratio, and the HTML size. Usage: ``python bench/bench_report.py [--images 1000] [--size 640]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def inference_ms(size: int, runs: int) -> float:
    """Median latency (ms) of the FP32 PP-OCR detector on one ``size`` x ``size`` input (ORT CPU)."""
    from quantkit.demo import packaged_model_path
    from quantkit.runner import OrtRunner

    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, size, size)).astype(np.float32)
    with OrtRunner(packaged_model_path()) as r:
        r.infer({"x": x})  # warm-up
        for _ in range(runs):
            r.infer({"x": x})
        return 1000.0 * float(np.median(r.inference_times[1:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1000, help="site images in total (split over 3 site sets)")
    ap.add_argument("--size", type=int, default=640, help="deployment input size for the inference estimate")
    ap.add_argument("--runs", type=int, default=5, help="timed inference runs for the estimate")
    args = ap.parse_args(argv)
    from quantkit.report import ModelInputs, ReportConfig, make_report
    from quantkit.report.synthetic import write_inputs

    with tempfile.TemporaryDirectory() as tmp:
        per_site = args.images // 3
        p = write_inputs(Path(tmp), images_per_site=per_site, image_size=640, seed=1)
        inputs = [ModelInputs.from_work_dir(p["work"], site_sets=p["site_sets"])]
        t0 = time.perf_counter()
        make_report(inputs, ReportConfig(), Path(tmp) / "reports")
        build_s = time.perf_counter() - t0
        html_bytes = (Path(tmp) / "reports" / "shift_report.html").stat().st_size
    ms = inference_ms(args.size, args.runs)
    models = 3  # evaluate runs FP32, deployed INT8 and candidate INT8 on every image
    infer_s = ms / 1000.0 * per_site * 3 * models
    json.dump({
        "images": per_site * 3, "report_build_s": round(build_s, 3), "html_bytes": html_bytes, "html_mb": round(html_bytes / 2**20, 3),
        "fp32_latency_ms": round(ms, 1), "inference_estimate_s": round(infer_s, 1), "models_per_image": models,
        "report_over_inference": round(build_s / infer_s, 4),
    }, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

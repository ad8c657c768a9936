"""Benchmark: register (hash + decode + statistics) a set of N generated images; memory must stay flat in N.

Usage:
    python bench/bench_calibset.py --sizes 200 2000 --image-size 128

For each N a fresh child process (so ``ru_maxrss`` is that run's own peak) renders N demo images
(cam1/day, ``--image-size`` square, not timed), then times ``register_set`` and a full
``CalibrationSetReader`` pass. It prints one JSON object: per N the images/s of registration and of the
reader pass, the peak RSS of the child (MiB, ``resource.getrusage``), and the tracemalloc peak during
registration (MiB, Python + numpy allocations). Flat memory: peaks at N=200 and N=2000 within a few MiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def _worker(n: int, size: int) -> dict[str, float]:
    from quantkit.calibset import register_set
    from quantkit.calibset.reader import CalibrationSetReader
    from quantkit.demo.scene import SceneAssets
    from quantkit.demo.synth import DemoConfig, DemoSetSpec, render_image
    from quantkit.note import Preprocessing

    cfg = DemoConfig(input_size=(size, size), sets={"b": DemoSetSpec(out="unused", count=n, seed=7)})
    spec = cfg.sets["b"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "set"
        (root / "images").mkdir(parents=True)
        assets = SceneAssets()
        t0 = time.perf_counter()
        for i in range(n):
            data, _ = render_image(assets, spec, i, cfg.cameras["cam1"], cfg.lightings["day"], cfg.input_size)
            (root / "images" / f"{i:05d}.jpg").write_bytes(data)
        t_gen = time.perf_counter() - t0
        del assets
        # warm up: import lazily loaded modules (skimage.restoration, pywt, pandas) outside the measurement
        import numpy as np

        from quantkit.calibset.stats import image_statistics, stats_frame

        stats_frame([{"file": "w", **image_statistics(np.zeros((size, size, 3), np.uint8))}])
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        tracemalloc.start()
        t0 = time.perf_counter()
        res = register_set(root, name="bench")
        t_reg = time.perf_counter() - t0
        _, trace_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        reader = CalibrationSetReader(res.set, Preprocessing(input_size=(size, size)), batch_size=8)
        t0 = time.perf_counter()
        batches = sum(1 for _ in reader.iter_batches())
        t_read = time.perf_counter() - t0
        return {
            "n": n,
            "image_size": size,
            "generate_s": round(t_gen, 2),
            "register_s": round(t_reg, 2),
            "register_images_per_s": round(n / t_reg, 1),
            "reader_images_per_s": round(n / t_read, 1),
            "reader_batches": batches,
            "peak_rss_before_register_mib": round(rss_before, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
            "tracemalloc_peak_register_mib": round(trace_peak / 2**20, 2),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 2000], help="set sizes N to run (default 200 2000)")
    ap.add_argument("--image-size", type=int, default=128, help="square image side in pixels (default 128)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(_worker(args.worker, args.image_size)))
        return
    runs = []
    for n in args.sizes:
        out = subprocess.run([sys.executable, __file__, "--worker", str(n), "--image-size", str(args.image_size)],
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    print(json.dumps({"benchmark": "calibset.register+reader", "runs": runs}, indent=2))


if __name__ == "__main__":
    main()

"""Fleet scoring on Dask: images/s against workers, per-stage time, peak memory at 1,000 and 10,000 images.

Needs the deployed models of the main job for ``--model`` (default ppocr_det; ``dvc repro
bind@ppocr_det-deployed``: work/MODEL/intake, work/MODEL/quantize/deployed, work/MODEL/thresholds/deployed.json,
calibration_sets/cam1-day). Renders a small demo fleet once (``--distinct``
images), then lists its files under distinct paths (symlinks) to build manifests of any size.

Measured in one run, each measurement in a fresh child process, throughput runs interleaved (``--repeats``):

* ``bare``: two ONNX Runtime runs per image (FP32 + INT8, 1 intra-op thread) on inputs prepared beforehand;
* ``w1t1`` / ``w1t2`` / ``w2t1``: ``quantkit fleet score`` with every image through both models (``model_every 1``)
  on a LocalCluster of 1 worker with 1 ORT thread, 1 worker with 2 (the default for --workers 1 on 2 cores), and
  2 workers with 1 each;
* memory: driver and worker peak RSS (``ru_maxrss``) scoring 1,000 and 10,000 images with 2 workers
  (``model_every`` ``--memory-model-every``, statistics on every image) of the same fleet (``--memory-cameras``
  cameras x 20 days, so 1 vs 10 images per camera-day and the same 1,000 shards).

Prints JSON (medians) and writes it to ``--save``. Goals (issue 15): 10k within 1.2x of 1k memory, 2 workers
>= 1.8x one worker, scoring overhead over bare inference <= 15%.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def model_paths(model: str) -> dict[str, Path]:
    """The deployed folders of ``model`` (a key of params.yaml ``models``) in the main job's layout."""
    work = ROOT / "work" / model
    return {"fp32": work / "intake", "quantized": work / "quantize/deployed", "thresholds": work / "thresholds/deployed.json",
            "calibration_set": ROOT / "calibration_sets/cam1-day"}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_manifest(images: list[Path], n: int, folder: Path, cameras: int = 0) -> Path:
    """A manifest of ``n`` images: the rendered files under distinct symlinked paths, 20 days per camera; 10 images per
    camera-day, or with ``cameras`` > 0 a fixed fleet of that many cameras (more images = more per camera-day)."""
    import datetime as dt

    import pandas as pd

    from quantkit.fleet.manifest import write_manifest

    rows = []
    start = dt.datetime(2025, 3, 3, 8, tzinfo=dt.timezone.utc)
    per_day = max(1, n // (cameras * 20)) if cameras else 10
    for i in range(n):
        cam, rest = divmod(i, 20 * per_day)
        day, k = divmod(rest, per_day)
        link = folder / f"n{n}" / f"c{cam:04d}" / f"{day:02d}" / f"{k:02d}.jpg"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(images[i % len(images)])
        rows.append({"uri": link.as_posix(), "camera": f"c{cam:04d}", "site": f"s{cam // 10}", "line": "l1",
                     "captured_at": (start + dt.timedelta(days=day, minutes=k)).isoformat()})
    out = folder / f"manifest-{n}.parquet"
    write_manifest(pd.DataFrame(rows), out)
    return out


def child_score(args: argparse.Namespace) -> dict:
    from distributed import Client, LocalCluster

    from quantkit.fleet import FleetScoreConfig, score_fleet

    paths = model_paths(args.model)
    cfg = FleetScoreConfig(model_every=args.model_every, ort_threads=args.threads, clip_fraction=0.0)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
        res = score_fleet(args.manifest, paths["fp32"], paths["quantized"], paths["thresholds"], paths["calibration_set"],
                          args.out, cfg, scheduler=cluster.scheduler_address)
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    run = json.loads((Path(args.out) / "run.json").read_text())
    return {"images": res.images, "seconds": res.seconds, "images_per_s": res.images_per_s, "driver_peak_mb": _peak_mb(),
            "worker_peak_mb": max(workers.values()), "timing_s": run["timing_s"]}


def child_bare(args: argparse.Namespace) -> dict:
    import pandas as pd

    from quantkit.imageio import load_image
    from quantkit.note import ExportNote
    from quantkit.runner import OrtRunner

    paths = model_paths(args.model)
    pre = ExportNote.load(paths["fp32"] / "export_note.json").preprocessing
    uris = pd.read_parquet(args.manifest)["uri"].tolist()
    feeds = [{pre.input_name: pre.apply(load_image(u))[0]} for u in uris]
    with OrtRunner(paths["fp32"] / "model.onnx", intra_op_num_threads=1) as f, \
            OrtRunner(paths["quantized"] / "model_int8.onnx", intra_op_num_threads=1) as q:
        f.infer(feeds[0])
        q.infer(feeds[0])
        t0 = time.perf_counter()
        for feed in feeds:
            f.infer(feed)
            q.infer(feed)
        dt = time.perf_counter() - t0
    return {"images": len(feeds), "seconds": dt, "images_per_s": len(feeds) / dt}


def _child(kind: str, **kw) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, *[f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"child {kind} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", choices=["score", "bare"])
    ap.add_argument("--model", default="ppocr_det", help="params.yaml models entry whose deployed INT8 is scored")
    ap.add_argument("--manifest")
    ap.add_argument("--out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model-every", type=int, default=1)
    ap.add_argument("--distinct", type=int, default=200, help="rendered images (reused under distinct paths)")
    ap.add_argument("--throughput-n", type=int, default=400, help="images per throughput run")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="fleet sizes for the memory runs")
    ap.add_argument("--memory-model-every", type=int, default=20, help="model_every in the memory runs")
    ap.add_argument("--memory-cameras", type=int, default=50, help="cameras of the memory runs' fleet (x 20 days), same at every size")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--save", default=str(ROOT / "bench/results/fleet.json"))
    args = ap.parse_args()
    if args.child == "score":
        print(json.dumps(child_score(args)))
        return
    if args.child == "bare":
        print(json.dumps(child_bare(args)))
        return
    for p in model_paths(args.model).values():
        if not p.exists():
            raise SystemExit(f"{p}: missing; run 'dvc repro bind@deployed' first")
    from quantkit.demo.fleet import FleetDemoConfig, FleetEvent, render_fleet

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        t = Path(tmp)
        per_cam = max(1, args.distinct // 8)
        cfg = FleetDemoConfig(out=str(t / "render"), truth=str(t / "truth.json"), sites=1, lines_per_site=1, cameras_per_site=8,
                              days=max(1, per_cam // 8), images_per_day=8, events=(FleetEvent("none", "defocus", camera="a01", start_day=999),))
        render_fleet(cfg)
        images = sorted((t / "render").rglob("*.jpg"))
        tp = make_manifest(images, args.throughput_n, t / "links")
        runs: dict[str, list[dict]] = {"bare": [], "w1t1": [], "w1t2": [], "w2t1": []}
        for r in range(args.repeats):
            for name in runs:
                if name == "bare":
                    runs[name].append(_child("bare", manifest=tp, model=args.model))
                else:
                    w, th = int(name[1]), int(name[3])
                    runs[name].append(_child("score", manifest=tp, out=t / f"out-{name}-{r}", workers=w, threads=th, model_every=1, model=args.model))
        mem = {}
        for n in args.sizes:
            m = make_manifest(images, n, t / "links", cameras=args.memory_cameras)
            mem[n] = _child("score", manifest=m, out=t / f"mem-{n}", workers=2, threads=1, model_every=args.memory_model_every, model=args.model)
    med = {k: statistics.median(x["images_per_s"] for x in v) for k, v in runs.items()}
    stage = {k: {s: round(statistics.median(x["timing_s"].get(s, 0.0) for x in v) / args.throughput_n * 1e3, 2)
                 for s in sorted({s for x in v for s in x["timing_s"]})} for k, v in runs.items() if k != "bare"}
    small, big = min(args.sizes), max(args.sizes)
    result = {
        "throughput_images_per_s": {k: round(v, 3) for k, v in med.items()},
        "speedup_2w_vs_1w1t": round(med["w2t1"] / med["w1t1"], 3),
        "speedup_2w_vs_1w2t": round(med["w2t1"] / med["w1t2"], 3),
        "overhead_vs_bare_inference_1w1t": round(med["bare"] / med["w1t1"] - 1.0, 3),
        "per_image_stage_ms": stage,
        "memory": {str(n): {k: round(v, 1) for k, v in mem[n].items() if k.endswith("_mb")} | {"images_per_s": round(mem[n]["images_per_s"], 2)}
                   for n in args.sizes},
        "memory_ratio_driver": round(mem[big]["driver_peak_mb"] / mem[small]["driver_peak_mb"], 3),
        "memory_ratio_worker": round(mem[big]["worker_peak_mb"] / mem[small]["worker_peak_mb"], 3),
        "runs": runs, "settings": {k: v for k, v in vars(args).items() if k not in ("child", "manifest", "out")},
        "cpu_count": os.cpu_count(),
    }
    Path(args.save).parent.mkdir(parents=True, exist_ok=True)
    Path(args.save).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()

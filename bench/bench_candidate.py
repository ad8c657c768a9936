"""Issue 16's goals for the main job's candidate, side by side in one run (JSON on stdout).

Reads the shift report's DVC metrics (``reports/metrics.json``, written by ``dvc repro``) for the model's candidate
and FP32 on every site set, then times FP32, the deployed and the candidate model interleaved on each runtime and
thread count (:func:`quantkit.report.measure.measure`: every repeat runs each model once on the same input, in
rotating order; medians). ``criteria``: per site set, the candidate's primary agreement with FP32 >= ``--agreement-goal``
and its accuracy F1 against the ground truth within ``--f1-tolerance`` of FP32's; per runtime and thread count, the
candidate at least ``--speedup-goals`` (one per ``--threads`` entry) times faster than FP32. The numbers reached are
printed whether or not the goals are met.

Usage (after ``dvc repro``)::

    python bench/bench_candidate.py [--model ppocr_det] [--threads 1 2] [--repeats 15] [--runtimes onnxruntime openvino]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ppocr_det")
    ap.add_argument("--metric", default="pixel_iou", help="the agreement metric of the goal (the task's primary)")
    ap.add_argument("--agreement-goal", type=float, default=0.97)
    ap.add_argument("--f1-tolerance", type=float, default=0.01)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--speedup-goals", type=float, nargs="+", default=[1.5, 1.3])
    ap.add_argument("--runtimes", nargs="+", default=["onnxruntime", "openvino"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--images", type=int, default=4)
    args = ap.parse_args(argv)
    if len(args.speedup_goals) != len(args.threads):
        ap.error("--speedup-goals needs one value per --threads entry")

    from quantkit.report.measure import MeasureConfig, measure
    from quantkit.runtimes import available_runtimes

    metrics = json.loads(Path("reports/metrics.json").read_text())[args.model]
    sites = {}
    for site, m in sorted(metrics.items()):
        if not isinstance(m, dict) or "fp32" not in m:  # the model's verdict, not a site set
            continue
        cand, fp32 = m.get("candidate", {}), m.get("fp32", {})
        agree, f1, f1_fp32 = cand.get(f"agreement.{args.metric}"), cand.get("accuracy.f1"), fp32.get("accuracy.f1")
        sites[site] = {f"{args.metric}_vs_fp32": agree, "accuracy_f1": f1, "accuracy_f1_fp32": f1_fp32,
                       "agreement_met": agree is not None and agree >= args.agreement_goal,
                       "f1_met": None if f1 is None or f1_fp32 is None else f1 >= f1_fp32 - args.f1_tolerance}
    runtimes = tuple(r for r in args.runtimes if r in available_runtimes())
    cfg = MeasureConfig(runtimes=runtimes, threads=tuple(args.threads), repeats=args.repeats, images=args.images)
    timed = measure([Path("work") / args.model], cfg)
    goals = dict(zip(args.threads, args.speedup_goals))
    speed = [{"runtime": r["runtime"], "threads": r["threads"], "candidate_ms": r["median_ms"], "speedup_vs_fp32": r["vs_fp32"],
              "speedup_vs_deployed": r["vs_deployed"], "met": r["vs_fp32"] >= goals[r["threads"]]}
             for r in timed["latency"] if r["variant"] == "candidate"]
    criteria = {"sites": sites, "speed": speed,
                "all_met": all(s["agreement_met"] and s["f1_met"] is not False for s in sites.values()) and all(s["met"] for s in speed)}
    json.dump({"model": args.model, "machine": timed["machine"], "method": timed["method"], "latency": timed["latency"],
               "criteria": criteria}, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

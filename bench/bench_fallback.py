"""Automatic precision fallback benchmark: one deployed model for every demo site set.

Steps (all in one run, JSON on stdout):

1. **Calibration-set composition**: ``--n-calib`` images of each calibration set (default
   ``calibration_sets/cam1-day`` + ``cam1-night``, 32 + 32, spread over each set) become one new set
   (:func:`quantkit.calibset.compose_set`, as ``quantkit calibset compose`` does).
2. **Calibration**: :func:`quantkit.quantize.quantize` with ``StaticQuantConfig(per_channel=True, method=--method
   ...)`` on the composed set (``seconds.calibrate``).
3. **Fallback** from that output (:func:`quantkit.quantize.fallback.precision_fallback` with ``base=``: ranges
   reused, ``seconds.fallback``): the recovery options given (``--fold-affine`` ...), then the bisection for the
   fewest nodes to keep in float (``--strategy float``) or 16 bits until pixel IoU vs FP32 >= ``--target`` on
   *each* reference set (default ``reference_sets/cam1-day`` and ``cam1-night``; the worst set counts); the result
   is timed against FP32 and the deployed model interleaved at ``--threads`` (medians of ``--repeats``).
4. **Site evaluation** of that one model against FP32 on each site set (default ``site_sets/cam1-day``,
   ``cam1-night``, ``cam2-day``), with the same per-image rows and aggregates as ``quantkit evaluate``
   (:func:`quantkit.evaluate._row` / ``_summarize``): pooled pixel IoU vs FP32 and box F1 against the ground-truth
   text boxes (DB post-processing at ``thresh`` / ``box_thresh`` / ``unclip_ratio``, the same for both models).

``criteria`` states, per site set, whether pixel IoU >= ``--iou-goal`` (0.97) and ``box_f1_int8 >= box_f1_fp32 -
--f1-tolerance`` (0.01), and per thread count whether the result is ``--speedup-goals`` (1.5 at 1 thread, 1.3 at
2) times faster than FP32 on ONNX Runtime (the fallback's interleaved medians); ``all_met`` is their conjunction.
The numbers reached are printed whether or not the goals are met.

Usage::

    python bench/bench_fallback.py --out-dir /tmp/bench-fallback [--target 0.96] [--fold-affine] [--range-search]
        [--bias-correction] [--equalization] [--method percentile] [--percentile 99.999] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _evaluate_site(site: Path, intake: Path, int8_model: Path, adapter: Any, match_iou: float, max_images: int | None) -> dict[str, Any]:
    """FP32 and INT8 side by side on one site set; aggregates as ``quantkit evaluate`` computes them."""
    from quantkit.calibset import CalibrationSet
    from quantkit.calibset.reader import CalibrationSetReader
    from quantkit.evaluate import _row, _summarize
    from quantkit.note import ExportNote
    from quantkit.runner import OrtRunner
    from quantkit.thresholds.operating_point import truth_in_model_pixels

    note = ExportNote.load(intake / "export_note.json")
    cset = CalibrationSet.load(site)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    if max_images:
        reader.set_range(0, max_images)
    labelled = all(e.text_boxes is not None for e in cset.entries)
    name = note.preprocessing.input_name
    rows: list[dict[str, Any]] = []
    with OrtRunner(intake / "model.onnx", name="fp32") as fp, OrtRunner(int8_model, name="int8") as q:
        for k, (entries, x, tfs) in enumerate(reader.iter_with_transforms()):
            feed = {name: x}
            if k == 0:  # warm-up, not counted
                fp.infer(feed)
                q.infer(feed)
            order = (fp, q) if k % 2 == 0 else (q, fp)
            outs = {}
            for r in order:
                outs[r.name] = (r.infer(feed), r.inference_times[-1] * 1e3)
            truth = truth_in_model_pixels(entries[0].text_boxes, tfs[0])
            ref = adapter.decide(outs["fp32"][0])
            rows.append(_row(entries[0].file, "fp32", ref, ref, truth, outs["fp32"][1], match_iou))
            rows.append(_row(entries[0].file, "int8", adapter.decide(outs["int8"][0]), ref, truth, outs["int8"][1], match_iou))
    s = _summarize(rows, ["fp32", "int8"], labelled)
    f, i = s["fp32"], s["int8"]
    return {
        "images": i["images"],
        "labelled": labelled,
        "pixel_iou_vs_fp32": i["pixel_iou_vs_fp32"],
        "box_f1_fp32": f["f1"],
        "box_f1_int8": i["f1"],
        "box_f1_delta": None if f["f1"] is None else round(i["f1"] - f["f1"], 6),
        "box_f1_int8_vs_fp32_boxes": i["box_f1_vs_fp32"],
        "tp_fp_fn_fp32": [f["tp"], f["fp"], f["fn"]],
        "tp_fp_fn_int8": [i["tp"], i["fp"], i["fn"]],
        "fp32_ms": f["mean_latency_ms"],
        "int8_ms": i["mean_latency_ms"],
        "speedup": round(f["mean_latency_ms"] / i["mean_latency_ms"], 3) if i["mean_latency_ms"] else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--intake", type=Path, default=REPO / "work" / "intake")
    ap.add_argument("--calib-sets", type=Path, nargs="+", default=[REPO / "calibration_sets" / s for s in ("cam1-day", "cam1-night")])
    ap.add_argument("--ref-sets", type=Path, nargs="+", default=[REPO / "reference_sets" / s for s in ("cam1-day", "cam1-night")])
    ap.add_argument("--site-sets", type=Path, nargs="+", default=[REPO / "site_sets" / s for s in ("cam1-day", "cam1-night", "cam2-day")])
    ap.add_argument("--deployed", type=Path, default=REPO / "work" / "quantize" / "deployed", help="deployed quantize output, timed beside")
    ap.add_argument("--n-calib", type=int, nargs="+", default=[32],
                    help="images taken from each calibration set: one number for all, or one per --calib-sets (default 32)")
    ap.add_argument("--n-ref", type=int, default=None, help="use the first N images of each reference set (default all)")
    ap.add_argument("--max-site-images", type=int, default=None, help="evaluate only the first N images of each site set")
    ap.add_argument("--out-dir", type=Path, required=True, help="gets base/, model/ (the fallback output) and bench_fallback.json")
    ap.add_argument("--method", default="percentile", choices=["minmax", "entropy", "percentile", "distribution"])
    ap.add_argument("--percentile", type=float, default=None, help="percentile method (default ORT's 99.999)")
    ap.add_argument("--calibration-symmetric", choices=["true", "false"], default=None,
                    help="symmetric calibrated ranges (default: the calibrator's own)")
    ap.add_argument("--strategy", default="float", choices=["float", "int16"])
    ap.add_argument("--search", default="bisect", choices=["bisect", "sqnr"])
    ap.add_argument("--target", type=float, default=0.96, help="fallback target: pooled pixel IoU vs FP32 on each reference set")
    ap.add_argument("--prune", type=int, default=8, help="bisect: blocks of the window tried back in 8 bits (0: off)")
    ap.add_argument("--no-early-stop", action="store_true", help="evaluate every candidate on every image")
    for flag in ("fold-affine", "equalization", "range-search", "bias-correction"):
        ap.add_argument(f"--{flag}", action="store_true", help=f"recovery: {flag.replace('-', '_')}")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="latency thread counts")
    ap.add_argument("--repeats", type=int, default=15, help="latency repeats (medians)")
    ap.add_argument("--thresh", type=float, default=0.3)
    ap.add_argument("--box-thresh", type=float, default=0.5)
    ap.add_argument("--unclip-ratio", type=float, default=1.6)
    ap.add_argument("--match-iou", type=float, default=0.5)
    ap.add_argument("--iou-goal", type=float, default=0.97, help="the issue's goal per site set")
    ap.add_argument("--f1-tolerance", type=float, default=0.01, help="allowed box F1 drop vs FP32 per site set")
    ap.add_argument("--speedup-goals", type=float, nargs="+", default=[1.5, 1.3], help="speedup vs FP32 per --threads entry")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")

    from quantkit.calibset import compose_set
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.fallback import FallbackConfig, pixel_iou, precision_fallback
    from quantkit.thresholds.adapters import DBTextAdapter

    t0 = time.perf_counter()
    adapter = DBTextAdapter(thresh=args.thresh, box_thresh=args.box_thresh, unclip_ratio=args.unclip_ratio)
    config = StaticQuantConfig(per_channel=True, method=args.method, percentile=args.percentile,
                               calibration_symmetric=None if args.calibration_symmetric is None else args.calibration_symmetric == "true")
    fb_config = FallbackConfig.from_dict({
        "target": args.target, "strategy": args.strategy, "search": args.search, "prune": args.prune, "max_reference_images": args.n_ref,
        "early_stop": not args.no_early_stop, "latency": {"threads": args.threads, "repeats": args.repeats},
        "recovery": {"fold_affine": args.fold_affine, "equalization": args.equalization, "range_search": args.range_search,
                     "bias_correction": args.bias_correction}})
    n_calib = args.n_calib * len(args.calib_sets) if len(args.n_calib) == 1 else args.n_calib
    if len(n_calib) != len(args.calib_sets):
        ap.error(f"--n-calib: give one number or {len(args.calib_sets)} (one per --calib-sets)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-fallback-") as tmp_s:
        calib = compose_set(list(zip(args.calib_sets, n_calib)), Path(tmp_s) / "calib-mixed", name="calib-mixed")
        t1 = time.perf_counter()
        quantize(args.intake, config, out=args.out_dir / "base", calibration_set=calib)
        t2 = time.perf_counter()
        fb = precision_fallback(args.intake, fb_config, reference_sets=args.ref_sets, out=args.out_dir / "model", base=args.out_dir / "base",
                                calibration_set=calib, metric=pixel_iou(args.thresh), deployed=args.deployed if args.deployed.is_dir() else None)
        t3 = time.perf_counter()
        calibration = {"set_id": calib.set_id, "count": calib.count, "composition": calib.generator["composition"]}
    sites = {s.name: _evaluate_site(s, args.intake, args.out_dir / "model" / "model_int8.onnx", adapter, args.match_iou, args.max_site_images)
             for s in args.site_sets}
    t4 = time.perf_counter()
    criteria: dict[str, Any] = {name: {"pixel_iou": r["pixel_iou_vs_fp32"] is not None and r["pixel_iou_vs_fp32"] >= args.iou_goal,
                                       "box_f1": r["box_f1_delta"] is not None and r["box_f1_delta"] >= -args.f1_tolerance}
                                for name, r in sites.items()}
    goals = dict(zip(args.threads, args.speedup_goals))
    criteria["speed"] = {f"{row.runtime}@{row.threads}": row.speedup_vs_fp32 >= goals.get(row.threads, 1.0) for row in fb.latency}
    result = {
        "bench": "fallback",
        "intake": str(args.intake),
        "config": config.to_dict(),
        "fallback_config": fb_config.to_dict(),
        "adapter": {**adapter.thresholds(), **{k: v for k, v in adapter.options().items() if k == "unclip_ratio"}},
        "calibration_set": calibration,
        "fallback": {k: v for k, v in fb.to_dict().items() if k not in ("reference_sets",)},
        "float_nodes": len(fb.kept),
        "sites": sites,
        "goals": {"pixel_iou": args.iou_goal, "box_f1_tolerance": args.f1_tolerance, "speedup_vs_fp32": goals},
        "criteria": criteria,
        "all_met": all(all(c.values()) for c in criteria.values()),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "seconds": {"compose": round(t1 - t0, 1), "calibrate": round(t2 - t1, 1), "fallback": round(t3 - t2, 1), "evaluate": round(t4 - t3, 1)},
        "max_site_images": args.max_site_images,
    }
    text = json.dumps(result, indent=2, sort_keys=True)
    (args.out_dir / "bench_fallback.json").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Automatic precision fallback benchmark: one deployed model for every demo site set.

Steps (all in one run, JSON on stdout):

1. **Calibration-set composition**: ``--n-calib`` images of each calibration set (default
   ``calibration_sets/cam1-day`` + ``cam1-night``, 32 + 32, spread over each set) become one new set
   (:func:`quantkit.calibset.compose_set`, as ``quantkit calibset compose`` does).
2. **Fallback**: :func:`quantkit.quantize.precision_fallback` quantizes the intake model with
   ``StaticQuantConfig(per_channel=True, method=--method)`` on the composed set, then (``--search
   bisect``) bisects over the node order for the fewest nodes to keep in float (``--strategy float``) or
   16 bits until pixel IoU vs FP32 >= ``--target`` on *each* reference set (default ``reference_sets/
   cam1-day`` and ``cam1-night``, ``--n-ref`` images each; the worst set counts). The model is written to
   ``--out-dir/model`` (``model_int8.onnx``, ``record.json``, ``fallback.json``).
3. **Site evaluation** of that one model against FP32 on each site set (default ``site_sets/cam1-day``,
   ``cam1-night``, ``cam2-day``), with the same per-image rows and aggregates as ``quantkit evaluate``
   (:func:`quantkit.evaluate._row` / ``_summarize``):

   * ``pixel_iou_vs_fp32``: pooled IoU of the binarized maps (``> thresh``), INT8 vs FP32;
   * ``box_f1_fp32`` / ``box_f1_int8``: F1 against the ground-truth text boxes (DB post-processing,
     :class:`~quantkit.thresholds.adapters.DBTextAdapter` at ``thresh`` / ``box_thresh`` /
     ``unclip_ratio``, the same for both models; greedy matching at polygon IoU >= ``match_iou``);
   * ``fp32_ms`` / ``int8_ms``: mean wall time per image, both models with the same ORT session
     options (:class:`quantkit.runner.OrtRunner` defaults: CPU, all graph optimizations), run side by
     side on each image (the order alternates per image; one warm-up run each is not counted).

``criteria`` states, per site set, whether pixel IoU >= ``--iou-goal`` (0.95), ``box_f1_int8 >=
box_f1_fp32 - --f1-tolerance`` (0.01) and ``int8_ms < fp32_ms``; ``all_met`` is their conjunction. The
numbers reached are printed whether or not the goals are met.

Usage::

    python bench/bench_fallback.py --out-dir /tmp/bench-fallback [--target 0.96] [--search bisect|sqnr]
        [--strategy float|int16] [--n-calib 32] [--n-ref 24] [--max-site-images N] [--method percentile]
"""

from __future__ import annotations

import argparse
import json
import logging
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
    ap.add_argument("--n-calib", type=int, nargs="+", default=[32],
                    help="images taken from each calibration set: one number for all, or one per --calib-sets (default 32)")
    ap.add_argument("--n-ref", type=int, default=None, help="use the first N images of each reference set (default all)")
    ap.add_argument("--max-site-images", type=int, default=None, help="evaluate only the first N images of each site set")
    ap.add_argument("--out-dir", type=Path, required=True, help="gets model/ (the fallback output) and bench_fallback.json")
    ap.add_argument("--method", default="percentile", choices=["minmax", "entropy", "percentile", "distribution"])
    ap.add_argument("--moving-average", action="store_true", help="minmax: average per-image ranges (CalibMovingAverage)")
    ap.add_argument("--averaging-constant", type=float, default=None, help="minmax with --moving-average (default ORT's 0.01)")
    ap.add_argument("--percentile", type=float, default=None, help="percentile method (default ORT's 99.999)")
    ap.add_argument("--calibration-symmetric", choices=["true", "false"], default=None,
                    help="symmetric calibrated ranges (default: the calibrator's own)")
    ap.add_argument("--strategy", default="float", choices=["float", "int16"])
    ap.add_argument("--search", default="bisect", choices=["bisect", "sqnr"])
    ap.add_argument("--target", type=float, default=0.96, help="fallback target: pooled pixel IoU vs FP32 on the reference set")
    ap.add_argument("--prune", type=int, default=8, help="bisect: blocks of the window tried back in 8 bits (0: off)")
    ap.add_argument("--step", type=int, default=4, help="sqnr search: tensors promoted per round")
    ap.add_argument("--max-kept", type=int, default=None, help="promote at most this many nodes (bisect) / tensors (sqnr)")
    ap.add_argument("--thresh", type=float, default=0.3)
    ap.add_argument("--box-thresh", type=float, default=0.5)
    ap.add_argument("--unclip-ratio", type=float, default=1.6)
    ap.add_argument("--match-iou", type=float, default=0.5)
    ap.add_argument("--iou-goal", type=float, default=0.95, help="the issue's goal per site set")
    ap.add_argument("--f1-tolerance", type=float, default=0.01, help="allowed box F1 drop vs FP32 per site set")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")

    from quantkit.calibset import compose_set
    from quantkit.quantize import StaticQuantConfig, precision_fallback
    from quantkit.quantize.fallback import pixel_iou
    from quantkit.thresholds.adapters import DBTextAdapter

    t0 = time.perf_counter()
    adapter = DBTextAdapter(thresh=args.thresh, box_thresh=args.box_thresh, unclip_ratio=args.unclip_ratio)
    config = StaticQuantConfig(per_channel=True, method=args.method, moving_average=args.moving_average,
                               averaging_constant=args.averaging_constant, percentile=args.percentile,
                               calibration_symmetric=None if args.calibration_symmetric is None else args.calibration_symmetric == "true")
    n_calib = args.n_calib * len(args.calib_sets) if len(args.n_calib) == 1 else args.n_calib
    if len(n_calib) != len(args.calib_sets):
        ap.error(f"--n-calib: give one number or {len(args.calib_sets)} (one per --calib-sets)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-fallback-") as tmp_s:
        calib = compose_set(list(zip(args.calib_sets, n_calib)), Path(tmp_s) / "calib-mixed", name="calib-mixed")
        t1 = time.perf_counter()
        fb = precision_fallback(args.intake, config, calibration_set=calib, reference_set=args.ref_sets, out=args.out_dir / "model",
                                target=args.target, metric=pixel_iou(args.thresh), strategy=args.strategy, search=args.search,
                                step=args.step, max_kept=args.max_kept, max_reference_images=args.n_ref, prune=args.prune)
        t2 = time.perf_counter()
        calibration = {"set_id": calib.set_id, "count": calib.count, "composition": calib.generator["composition"]}
        reference = {"sets": [str(p) for p in args.ref_sets], "images_each": args.n_ref or "all"}
    sites = {}
    for s in args.site_sets:
        sites[s.name] = _evaluate_site(s, args.intake, args.out_dir / "model" / "model_int8.onnx", adapter, args.match_iou, args.max_site_images)
    t3 = time.perf_counter()
    criteria = {name: {"pixel_iou": r["pixel_iou_vs_fp32"] is not None and r["pixel_iou_vs_fp32"] >= args.iou_goal,
                       "box_f1": r["box_f1_delta"] is not None and r["box_f1_delta"] >= -args.f1_tolerance,
                       "faster": r["int8_ms"] < r["fp32_ms"]}
                for name, r in sites.items()}
    result = {
        "bench": "fallback",
        "intake": str(args.intake),
        "config": config.to_dict(),
        "adapter": {**adapter.thresholds(), **{k: v for k, v in adapter.options().items() if k == "unclip_ratio"}},
        "calibration_set": calibration,
        "reference_set": reference,
        "fallback": {"strategy": fb.strategy, "search": fb.search, "target": fb.target, "met_on_reference": fb.met,
                     "metric_before": round(fb.metric_before, 6), "metric_after": round(fb.metric_after, 6),
                     "metric_before_per_set": fb.metric_before_per_set, "metric_after_per_set": fb.metric_after_per_set,
                     "window": fb.window,
                     "kept_16bit" if fb.strategy == "int16" else "kept_float": list(fb.kept),
                     "steps": [{k: round(v, 6) if isinstance(v, float) else v for k, v in st.items()} for st in fb.steps],
                     "rounds": len(fb.steps) - 1,
                     "reference_fp32_ms": round(fb.fp32_ms, 3), "reference_int8_ms_before": round(fb.int8_ms_before, 3),
                     "reference_int8_ms_after": round(fb.int8_ms_after, 3), "record_fingerprint": fb.record_fingerprint,
                     "model": str(args.out_dir / "model" / "model_int8.onnx")},
        "sites": sites,
        "goals": {"pixel_iou": args.iou_goal, "box_f1_tolerance": args.f1_tolerance, "faster_than_fp32": True},
        "criteria": criteria,
        "all_met": all(all(c.values()) for c in criteria.values()),
        "seconds": {"register": round(t1 - t0, 1), "fallback": round(t2 - t1, 1), "evaluate": round(t3 - t2, 1)},
        "max_site_images": args.max_site_images,
    }
    text = json.dumps(result, indent=2, sort_keys=True)
    (args.out_dir / "bench_fallback.json").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``quantkit fallback``: quantize, then keep the fewest nodes in float (or 16 bits) until the task metric
against FP32 reaches a target on every reference set."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "quantize with automatic precision fallback until pixel IoU vs FP32 >= --target on every reference set"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("fallback", help=HELP, description=HELP + ". Quantization options come from the 'quantize' "
                              "section of --params (static fields), as for 'quantkit quantize'. The metric is the pooled IoU of "
                              "the binarized first output (output > --thresh), INT8 vs FP32 (a segmentation / DB text map in [0, 1]).")
    p.add_argument("intake", help="intake folder (model.onnx + export_note.json)")
    p.add_argument("--calibration-set", required=True, metavar="DIR", help="calibration set folder (compose day + night with 'quantkit calibset compose')")
    p.add_argument("--reference-set", required=True, action="append", metavar="DIR",
                   help="reference set folder the metric is measured on; repeat for each condition (the worst set counts)")
    p.add_argument("--target", type=float, default=0.95, help="metric to reach on every reference set (default 0.95)")
    p.add_argument("--thresh", type=float, default=0.3, help="binarization threshold of the output map (default 0.3)")
    p.add_argument("--strategy", choices=["float", "int16"], default="float", help="keep promoted nodes in float (default) or 16-bit activations")
    p.add_argument("--search", choices=["bisect", "sqnr"], default="bisect", help="task-metric bisection over the node order (default) or local-SQNR ranking")
    p.add_argument("--step", type=int, default=4, help="sqnr search: activations promoted per round (default 4)")
    p.add_argument("--max-kept", type=int, default=None, metavar="N", help="most nodes (bisect) / activations (sqnr) to promote")
    p.add_argument("--prune", type=int, default=8, metavar="B", help="bisect: then try handing each of B blocks of the window back to 8 bits (default 8; 0: off)")
    p.add_argument("--max-reference-images", type=int, default=None, metavar="N", help="use the first N images of each reference set")
    p.add_argument("--params", metavar="YAML", help="params file with a 'quantize' section (default: built-in defaults)")
    p.add_argument("--section", default="quantize", help="params section to read (default: quantize)")
    p.add_argument("--method", choices=["minmax", "entropy", "percentile", "distribution"], help="override the calibration method")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder: model_int8.onnx, record.json, fallback.json (written whole or not at all)")
    p.add_argument("--json", action="store_true", help="print fallback.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..quantize import StaticQuantConfig, precision_fallback
    from ..quantize.fallback import pixel_iou
    from .quantize import build_config

    if not 0.0 < args.target <= 1.0:
        raise ConfigError(f"--target {args.target}: pixel IoU targets lie in (0, 1], e.g. 0.95")
    if not 0.0 < args.thresh < 1.0:
        raise ConfigError(f"--thresh {args.thresh}: the output map is a probability, its threshold lies in (0, 1), e.g. 0.3")
    if args.max_reference_images is not None and args.max_reference_images < 1:
        raise ConfigError(f"--max-reference-images {args.max_reference_images}: give at least 1 (or leave it out for every image)")
    ns = argparse.Namespace(params=args.params, section=args.section, dynamic=False, method=args.method, chunk_size=None, max_images=None)
    config = build_config(ns)
    assert isinstance(config, StaticQuantConfig)
    r = precision_fallback(args.intake, config, calibration_set=args.calibration_set, reference_set=args.reference_set, out=args.out,
                           target=args.target, metric=pixel_iou(args.thresh), strategy=args.strategy, search=args.search,
                           step=args.step, max_kept=args.max_kept, max_reference_images=args.max_reference_images, prune=args.prune)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
        return 0 if r.met else 1
    w = sys.stdout.write
    w(f"wrote {args.out}/model_int8.onnx, record.json and fallback.json ({r.search}, {r.strategy})\n")
    w(f"pixel IoU vs FP32 (worst reference set): {r.metric_before:.4f} -> {r.metric_after:.4f}, target {r.target}: "
      f"{'met' if r.met else 'NOT met'} after {len(r.steps) - 1} rounds\n")
    for name, before in r.metric_before_per_set.items():
        w(f"  {name:<24} {before:.4f} -> {r.metric_after_per_set[name]:.4f}\n")
    what = "nodes kept in float" if r.strategy == "float" else "activations in 16 bits"
    span = f" (within nodes {r.window[0]}..{r.window[1] - 1} in graph order)" if r.window else ""
    w(f"{len(r.kept)} {what}{span}: {', '.join(r.kept[:8])}{' ...' if len(r.kept) > 8 else ''}\n")
    w(f"latency per image: FP32 {r.fp32_ms:.1f} ms, INT8 {r.int8_ms_before:.1f} ms -> {r.int8_ms_after:.1f} ms "
      f"({r.fp32_ms / r.int8_ms_after:.2f}x FP32)\n")
    if r.int8_ms_after >= r.fp32_ms:
        w(f"warning: the written model is not faster than FP32 here ({r.int8_ms_after:.1f} vs {r.fp32_ms:.1f} ms per image)\n")
    if not r.met:
        other = "--strategy float, " if r.strategy != "float" else ""
        w(f"target not met (exit 1): the model with the highest metric was written; try {other}a calibration set covering "
          "every condition ('quantkit calibset compose'), or a lower --target\n")
    return 0 if r.met else 1

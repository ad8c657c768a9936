"""``quantkit evaluate``: run FP32, deployed and candidate INT8 models over a site set and record their decisions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="per-image decisions of FP32 / deployed / candidate models on a site set",
        description=(
            "Check each threshold set against its quantized folder, run every model once per image of SITE_SET, "
            "apply the task adapter at each model's own thresholds and at the FP32 thresholds, and write "
            "per_image.csv, score_hist.json, detections.json and summary.json to OUT (atomically)."
        ),
    )
    p.add_argument("site_set", type=Path, help="site set folder (images/ + manifest.json; labels used when present)")
    p.add_argument("--fp32", type=Path, required=True, help="intake folder: model.onnx + export_note.json")
    p.add_argument("--deployed", type=Path, required=True, help="deployed quantized folder (model_int8.onnx + record.json)")
    p.add_argument("--deployed-thresholds", type=Path, required=True, help="threshold set bound to the deployed record")
    p.add_argument("--candidate", type=Path, help="candidate quantized folder (optional)")
    p.add_argument("--candidate-thresholds", type=Path, help="threshold set bound to the candidate record")
    p.add_argument("--params", type=Path, help="params.yaml; FP32 thresholds and adapter from its 'thresholds' section")
    p.add_argument("--out", type=Path, required=True, help="output folder (e.g. work/eval/cam1-day), replaced whole on success")
    p.add_argument("--json", action="store_true", help="print summary.json instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import ConfigError
    from ..evaluate import evaluate
    from ..thresholds.operating_point import ThresholdsConfig

    cfg = config_from_params(ThresholdsConfig, args.params, "thresholds")
    if (args.candidate is None) != (args.candidate_thresholds is None):
        raise ConfigError("--candidate and --candidate-thresholds go together; pass both or neither")
    roles = {"deployed": (args.deployed, args.deployed_thresholds)}
    if args.candidate is not None:
        roles["candidate"] = (args.candidate, args.candidate_thresholds)
    result = evaluate(args.site_set, args.fp32, roles, cfg, args.out)
    s = result.summary
    if args.json:
        sys.stdout.write(json.dumps(s, indent=2, sort_keys=True) + "\n")
        return 0

    def f(v: object) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = [f"{result.path}: {s['site_set']['name']}, {s['images']} images",
             f"  {'variant':<30} {'det/img':>8} {'alarm':>6} {'pixIoU':>7} {'boxF1':>7} {'prec':>6} {'recall':>6} {'ms':>8}"]
    for v, m in s["variants"].items():
        lines.append(f"  {v:<30} {m['detections_per_image']:>8.2f} {m['alarm_rate']:>6.2f} {f(m['pixel_iou_vs_fp32']):>7} "
                     f"{f(m['box_f1_vs_fp32']):>7} {f(m['precision']):>6} {f(m['recall']):>6} {m['mean_latency_ms']:>8.1f}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


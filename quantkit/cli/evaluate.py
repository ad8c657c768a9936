"""``quantkit evaluate``: run FP32, deployed and candidate INT8 models over a site set and record their decisions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .flags import add_model_flag


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
    p.add_argument("site_set", type=Path, help="site set folder (images/ + manifest.json; labels used when present), or a folder of "
                   "site sets (a model's sets.site): each is evaluated into OUT/<set name>/")
    p.add_argument("--fp32", type=Path, required=True, help="intake folder: model.onnx + export_note.json")
    p.add_argument("--deployed", type=Path, required=True, help="deployed quantized folder (model_int8.onnx + record.json)")
    p.add_argument("--deployed-thresholds", type=Path, required=True, help="threshold set bound to the deployed record")
    p.add_argument("--candidate", type=Path, help="candidate quantized folder (optional)")
    p.add_argument("--candidate-thresholds", type=Path, help="threshold set bound to the candidate record")
    p.add_argument("--params", type=Path, help="params.yaml; the task adapter and its FP32 thresholds from its 'task' section")
    add_model_flag(p)
    p.add_argument("--out", type=Path, required=True, help="output folder (e.g. work/eval/cam1-day), replaced whole on success")
    p.add_argument("--json", action="store_true", help="print summary.json instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import ConfigError
    from ..evaluate import evaluate
    from ..tasks import TaskConfig

    from ..thresholds import ThresholdsConfig

    task = config_from_params(TaskConfig, args.params, "task", model=args.model).make()
    thresholds = config_from_params(ThresholdsConfig, args.params, "thresholds", model=args.model)
    floor = thresholds.min_agreement
    quantized = {"deployed": (args.deployed, args.deployed_thresholds)}
    if (args.candidate is None) != (args.candidate_thresholds is None):
        raise ConfigError("--candidate and --candidate-thresholds go together; pass both or neither")
    if args.candidate is not None:
        quantized["candidate"] = (args.candidate, args.candidate_thresholds)
    from ..calibset.model_sets import holds_sets
    from ..evaluate.sets import evaluate_sets

    single = not holds_sets(args.site_set)
    if single:
        results = [evaluate(args.site_set, args.fp32, quantized, task, args.out, min_agreement=floor,
                            near_line_steps=thresholds.near_line_steps)]
    else:
        results = evaluate_sets(args.site_set, args.fp32, quantized, task, args.out, min_agreement=floor,
                                near_line_steps=thresholds.near_line_steps)
    if args.json:
        data = results[0].to_dict() if single else [r.to_dict() for r in results]
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write("\n".join(_lines(r, floor) for r in results) + "\n")
    return 0


def _lines(result: Any, floor: float) -> str:
    """The table of one site set's evaluation."""
    from ..thresholds.causes import causes_hint

    s = result.summary
    shown = [m for m in s.metrics if m.kind == "agreement"][:2] + [m for m in s.metrics if m.kind == "accuracy" and s.labelled][:1]
    lines = [f"{result.path}: {s.images} images of {s.site_set.name} ({s.task}; primary metric {s.primary_metric})",
             f"  {'variant':<30} {s.item + 's/img':>14} {'alarm':>6} " + " ".join(f"{m.name:>12}" for m in shown)]
    for v, m in s.variants.items():
        vals = [m.agreement.get(x.name, m.accuracy.get(x.name)) for x in shown]
        lines.append(f"  {v:<30} {m.detections_per_image:>14.2f} {m.alarm_rate:>6.2f} "
                     + " ".join(f"{x:>12.3f}" if x is not None else f"{'-':>12}" for x in vals))
    for role, causes in result.low_agreement.items():
        value = s.variants[role].agreement[s.primary_metric]
        lines.append(f"  {role}: {s.primary_metric} {value:.3f} is below thresholds.min_agreement {floor:g}; {causes_hint(causes)}")
    return "\n".join(lines)

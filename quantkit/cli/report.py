"""``quantkit report``: the shift report (HTML + Markdown + DVC metrics and plots)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from ..config import Config

C = TypeVar("C", bound="Config")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write the shift report (HTML, Markdown, DVC metrics and plots)",
        description=(
            "Aggregate evaluation results, drift checks, calibration records and threshold sets into "
            "OUT/shift_report.html (self-contained), OUT/shift_report.md, OUT/metrics.json and OUT/plots/*.csv."
        ),
    )
    p.add_argument("--eval", type=Path, required=True, help="evaluation folder with one subfolder per site set (work/eval)")
    p.add_argument("--drift", type=Path, help="folder of drift results <site>.json (work/drift)")
    p.add_argument("--deployed", type=Path, required=True, help="deployed quantized folder with record.json")
    p.add_argument("--deployed-thresholds", type=Path, required=True, help="deployed threshold set JSON")
    p.add_argument("--candidate", type=Path, help="candidate quantized folder with record.json")
    p.add_argument("--candidate-thresholds", type=Path, help="candidate threshold set JSON")
    p.add_argument("--site-sets", type=Path, help="folder holding the site sets, for example thumbnails (default: site_sets)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'report' section")
    p.add_argument("--out", type=Path, default=Path("reports"), help="output folder (default: reports)")
    p.add_argument("--json", action="store_true", help="print the report facts as JSON instead of the verdict")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import ConfigError, InputFileError
    from ..report import ReportConfig, ReportInputs, make_report

    if (args.candidate is None) != (args.candidate_thresholds is None):
        raise ConfigError("--candidate and --candidate-thresholds go together; pass both or neither")
    if args.out.exists() and not args.out.is_dir():
        raise InputFileError(f"{args.out}: is a file; --out takes a folder (the report writes several files into it)")
    cfg = config_from_params(ReportConfig, args.params, "report")
    inputs = ReportInputs(args.eval, args.drift, args.deployed, args.deployed_thresholds, args.candidate, args.candidate_thresholds, args.site_sets)
    report = make_report(inputs, cfg, args.out)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return 0
    head, *facts = report.verdict  # head: what to do, then why
    lines = [head, *(f"  {v}" for v in facts)]
    for s in report.sites:
        lines.append(f"  {s.name}: " + ", ".join(f"{m.variant} {m.status} IoU {m.pixel_iou_vs_fp32:.2f}" for m in s.metrics if m.variant in ("deployed", "candidate")))
    lines.append(f"  written: {args.out / 'shift_report.html'}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0

"""``quantkit report``: write the shift report (HTML, Markdown, DVC metrics and plots) for one or more models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write the shift report (HTML, Markdown, DVC metrics and plots)",
        description=(
            "Aggregate each model's evaluations, drift checks, calibration records and threshold sets into "
            "OUT/shift_report.html (self-contained), OUT/shift_report.md, OUT/metrics.json and OUT/plots/*.csv. "
            "A model's work folder holds eval/<site>/, drift/<site>.json, quantize/{deployed,candidate}/ and "
            "thresholds/{deployed,candidate}.json (the pipeline's layout, e.g. work/ppocr_det)."
        ),
    )
    p.add_argument("--model", type=Path, action="append", required=True, metavar="WORK_DIR",
                   help="a model's work folder (repeat for several models), e.g. work/ppocr_det")
    p.add_argument("--site-sets", type=Path, help="folder holding the site sets, for example thumbnails (default: site_sets)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'report' section")
    p.add_argument("--out", type=Path, default=Path("reports"), help="output folder (default: reports)")
    p.add_argument("--json", action="store_true", help="print the report facts as JSON instead of the verdicts")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import InputFileError
    from ..report import ModelInputs, ReportConfig, make_report

    if args.out.exists() and not args.out.is_dir():
        raise InputFileError(f"{args.out}: is a file; --out takes a folder (the report writes several files into it)")
    for w in args.model:
        if not w.is_dir():
            raise InputFileError(f"{w}: model work folder not found; pass the folder holding eval/, quantize/ and thresholds/ (e.g. work/ppocr_det)")
    cfg = config_from_params(ReportConfig, args.params, "report")
    report = make_report([ModelInputs.from_work_dir(w, site_sets=args.site_sets) for w in args.model], cfg, args.out)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return 0
    lines = []
    for m in report.models:
        head, *facts = m.verdict
        lines += [f"{m.name}: {head}", *(f"  {v}" for v in facts)]
        for s in m.sites:
            lines.append(f"  {s.name}: " + ", ".join(f"{x.variant} {x.status} {m.primary.name} {x.agreement.get(m.primary.name, float('nan')):.2f}"
                                                     for x in s.metrics if x.variant in ("deployed", "candidate")))
    lines.append(f"written: {args.out / 'shift_report.html'}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0

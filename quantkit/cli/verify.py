"""``quantkit verify``: check a deployment bundle on the target runtime; exit non-zero on failure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="verify a deployment bundle on this machine's ONNX Runtime",
        description=(
            "Safely unpack BUNDLE, check every digest, the thresholds' binding, the onnxruntime version, opset and "
            "operator support (optionally against a capability profile), run the golden inputs with the given "
            "execution providers and compare with the golden outputs and decisions. On a failure, compare layer by "
            "layer with the golden FP32 activations and name the first diverging tensor. Prints a pass/fail table; "
            "exit 0 when all checks pass, 4 on a verification failure, 5 when the target lacks an operator."
        ),
    )
    p.add_argument("bundle", type=Path, help="bundle .tar/.tar.gz, its bundle.json, or the folder holding them (dist/)")
    p.add_argument("--providers", nargs="+", metavar="EP", help="execution providers in priority order (default CPUExecutionProvider)")
    p.add_argument("--target", type=Path, metavar="PROFILE", help="target runtime capability: profile JSON, packaged profile (tensorrt, openvino, npu-generic) or EP name (see docs/deploy.md)")
    p.add_argument("--tolerance-steps", type=float, help="override the bundle's output tolerance, in quantization steps")
    p.add_argument("--require-same-runtime", action="store_true", help="fail when onnxruntime's version differs from the build's")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'bundle.verify' section")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bundle import VerifyConfig, verify_bundle
    from ..config import config_from_params

    cfg = config_from_params(VerifyConfig, args.params, "bundle.verify")
    changes: dict = {}
    if args.providers:
        changes["providers"] = tuple(args.providers)
    if args.target:
        changes["target"] = str(args.target)
    if args.tolerance_steps is not None:
        changes["tolerance_steps"] = args.tolerance_steps
    if args.require_same_runtime:
        changes["require_same_runtime"] = True
    if changes:
        cfg = cfg.replace(**changes)
    report = verify_bundle(args.bundle, cfg)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render(report) + "\n")
    err = report.error()
    if err is not None:
        raise err
    return 0


def render(report) -> str:
    """The pass/fail table: one left-aligned row per check, then VERIFIED or FAILED."""
    table = report.table()
    marks = {"pass": "PASS", "fail": "FAIL", "warn": "warn", "skip": "skip"}
    rows = [(marks[r.status], r.kind, r.name, r.detail) for r in table.itertuples(index=False)]
    head = ("status", "kind", "check", "detail")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(3)]
    lines = [f"bundle {report.bundle} on {', '.join(report.providers)}"]
    for r in [head, *rows]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    lines.append("VERIFIED" if report.ok else f"FAILED ({len(report.failures)} check(s))")
    return "\n".join(lines)

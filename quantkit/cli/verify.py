"""``quantkit verify``: check a deployment bundle on the target's runtimes; exit non-zero on failure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="verify a deployment bundle on this machine's runtimes (ONNX Runtime, OpenVINO, ...)",
        description=(
            "Safely unpack BUNDLE, check every digest and the thresholds' binding, then on each runtime (at its deployment "
            "settings: ORT level all, OpenVINO f32 pinned) check that it loads and runs the model, run the golden inputs and "
            "compare with the golden outputs (QDQ simulation) per output tensor and, through the task adapter, per decision; "
            "report the share of Conv/MatMul work it ran in int8/uint8 and the latency. On a failure, cut the model to name "
            "the first diverging tensor and its op. Prints a pass/fail table; exit 0 when all checks pass, 4 on a "
            "verification failure, 5 when the target lacks an operator."
        ),
    )
    p.add_argument("bundle", type=Path, help="bundle .tar/.tar.gz, its bundle.json, or the folder holding them (dist/)")
    p.add_argument("--runtime", action="append", metavar="NAME", help="onnxruntime | openvino | all (repeatable; default onnxruntime)")
    p.add_argument("--providers", nargs="+", metavar="EP", help="ONNX Runtime execution providers in priority order (default CPUExecutionProvider)")
    p.add_argument("--target", metavar="PROFILE", help="also check a documentation-derived capability profile (tensorrt, npu-generic, a .json)")
    p.add_argument("--tolerance-steps", type=float, help="override the bundle's tolerance, in quantization steps")
    p.add_argument("--require-same-runtime", action="store_true", help="fail when a runtime's version differs from the build's")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'bundle.verify' section")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bundle import VerifyConfig, verify_bundle
    from ..config import config_from_params

    cfg = config_from_params(VerifyConfig, args.params, "bundle.verify")
    changes: dict = {}
    if args.runtime:
        changes["runtimes"] = tuple(args.runtime)
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
    """The pass/fail table (one row per check), a per-runtime summary, then VERIFIED or FAILED."""
    marks = {"pass": "PASS", "fail": "FAIL", "warn": "warn", "skip": "skip"}
    rows = [(marks[c.status], c.runtime or "-", c.kind, c.name, c.detail) for c in report.checks]
    head = ("status", "runtime", "kind", "check", "detail")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(4)]
    lines = [f"bundle {report.bundle}"]
    for r in [head, *rows]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    for run in report.runs:
        if run.info is None:
            continue
        lat = f"{run.latency_ms:.1f} ms (machine-dependent)" if run.latency_ms is not None else "-"
        prec = "precision not reported" if run.precision is None else "no Conv/MatMul" if run.precision.integer_share != run.precision.integer_share \
            else f"{100 * run.precision.integer_share:.0f}% of Conv/MatMul MACs in int8"
        dec = f"decisions {run.decisions_agree}/{run.decisions} agree" if run.decisions else "no decisions"
        lines.append(f"{'ok  ' if run.ok else 'FAIL'} {run.info.label} {run.info.version}: {dec}, {prec}, {lat}")
    lines.append("VERIFIED" if report.ok else f"FAILED ({len(report.failures)} check(s))")
    return "\n".join(lines)

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
            "report the share of Conv/MatMul work it ran in int8/uint8 and the latency. On a failure, name the first node whose "
            "output codes differ from the simulation's on its own (fed the simulation's inputs), else cut the model to name the "
            "first diverging tensor and its op. Prints a pass/fail table and, last, whether to deploy: the decisions agreeing "
            "with FP32's within the interval bound with the thresholds make the bundle deployable, and numbers that differ from "
            "the simulation are then a warning. Exit 0 when deployable, 4 when not, 5 when the target lacks an operator, 2 for a "
            "runtime name no plug-in is registered for. With --out the same verdict sets the exit code (params verify.fail: "
            "false keeps it 0 so 'dvc repro' finishes)."
        ),
    )
    p.add_argument("bundle", type=Path, help="bundle .tar/.tar.gz, its bundle.json, or the folder holding them (dist/)")
    p.add_argument("--runtime", action="append", metavar="NAME",
                   help="onnxruntime | openvino | all | a registered plug-in (repeatable; default onnxruntime); another name is exit 2")
    p.add_argument("--providers", nargs="+", metavar="EP", help="ONNX Runtime execution providers in priority order (default CPUExecutionProvider)")
    p.add_argument("--target", metavar="PROFILE", help="also check a documentation-derived capability profile (tensorrt, npu-generic, a .json)")
    p.add_argument("--tolerance-steps", type=float, help="override the bundle's tolerance, in quantization steps")
    p.add_argument("--require-same-runtime", action="store_true", help="fail when a runtime's version differs from the build's")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'bundle.verify' section ('verify' with --out)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    g = p.add_argument_group("the main job's verify stage (writes one artifact the shift report reads)")
    g.add_argument("--out", type=Path, help="write the deployment verification (runtimes from params 'verify', agreement with FP32 per site set)")
    g.add_argument("--fp32", type=Path, help="with --out: intake folder (model.onnx), the FP32 reference")
    g.add_argument("--site-set", type=Path, action="append", default=[], metavar="DIR", help="with --out: a site set (repeatable)")
    g.add_argument("--model", help="with --out: a model under params 'models': its site sets (models.MODEL.sets.site) when no "
                   "--site-set is given, and its verify section merged over the top-level one")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bundle import VerifyConfig, verify_bundle
    from ..config import config_from_params

    if args.out is not None:
        return run_deployment(args)
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
    return 0  # deployable: a numeric mismatch with the simulation alone is a warning (printed in the answer line)


def run_deployment(args: argparse.Namespace) -> int:
    """``--out``: verify the bundle on params' target runtimes and measure agreement with FP32 per site set."""
    from .._overwrite import check_output_file
    from ..artifacts.verification import DeploymentVerification
    from ..bundle.deployment import DeploymentVerifyConfig, verify_deployment
    from ..config import config_from_params
    from ..errors import ConfigError

    from ..calibset.model_sets import set_folders
    from ._roles import model_site_sets

    if args.fp32 is None:
        raise ConfigError("--out needs --fp32 INTAKE_DIR and the site sets: --site-set DIR, or --params params.yaml --model NAME")
    args.site_set = [s for d in args.site_set for s in set_folders(d)] or model_site_sets(args.params, args.model, "--site-set")
    check_output_file(DeploymentVerification.path_in(args.out), DeploymentVerification.file_kind(),  # before the (slow) runs
                      inputs=[args.bundle, args.fp32, *args.site_set, args.params])
    cfg = config_from_params(DeploymentVerifyConfig, args.params, "verify", model=args.model)
    if args.runtime:
        cfg = cfg.replace(runtimes=tuple(args.runtime))
    result = verify_deployment(args.bundle, args.fp32, args.site_set, cfg)
    result.save(args.out)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        for r in result.runtimes:
            if not r.installed:
                sys.stdout.write(f"{r.runtime:<12} not installed here\n")
                continue
            sites = ", ".join(f"{s.site_set} {s.metric} {s.value:.3f} over {s.images} images" for s in r.sites)
            share = f"{100 * r.integer_share:.0f}% int8" if r.integer_share is not None else "-"
            state = "verified" if r.verified else "deployable, numbers differ" if r.deployable else "NOT deployable"
            sys.stdout.write(f"{r.label:<20} {state:<9} {share:<9}  vs FP32: {sites}\n")
            for f in r.failures:
                sys.stdout.write(f"    {f}\n")
        sys.stdout.write(f"wrote {args.out}\n")
        if result.verdict is not None:
            sys.stdout.write(result.verdict.answer + "\n")
    err = result.verdict.error(str(args.bundle)) if result.verdict is not None else None
    if err is not None and not cfg.fail:  # params verify.fail: false lets `dvc repro` finish; the report shows the verdict
        sys.stderr.write(f"quantkit verify: not deployable (exit {err.exit_code} with params verify.fail: true, as 'quantkit verify "
                         f"{args.bundle}' exits); exit 0 because verify.fail is false\n")
        return 0
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
    lines.append(report.answer())
    return "\n".join(lines)

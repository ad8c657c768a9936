"""``quantkit support MODEL --target T [--json]``: can a target runtime run every node? Exit 5 if not."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import TargetSupportError


def register(subparsers: Any) -> None:
    from ..intake.support import list_profiles

    p = subparsers.add_parser(
        "support",
        help="list the nodes a target runtime cannot run (exit 5 when any)",
        description="Check every node against a target: 'cpu' (or any *ExecutionProvider name) uses the installed "
        "onnxruntime's own kernel registry; " + ", ".join(list_profiles()) + " or a path to a .json file use a capability "
        "profile (copy one from quantkit/profiles/ and edit it for your board). Reports unsupported operators, operators "
        "supported only at other opsets or dtypes, custom domains and quantized patterns the target cannot run.",
    )
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--target", required=True, help="cpu | <Name>ExecutionProvider | tensorrt | openvino | npu-generic | PROFILE.json")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..intake.support import check_support

    r = check_support(args.model, args.target)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
    else:
        print(f"target  {r.target}  ({r.source})")
        print(f"nodes   {r.nodes_checked} checked, {len(r.issues)} unsupported")
        for i in r.issues:
            rng = f"  supported at opsets {[list(x) for x in i.supported_opsets]}" if i.supported_opsets else ""
            print(f"  {i.kind:<17} {(i.domain + '::') if i.domain else ''}{i.op_type}@{i.opset}  node {i.node}: {i.detail}{rng}")
    if not r.supported:
        ops = sorted({f"{(i.domain + '::') if i.domain else ''}{i.op_type}" for i in r.issues})
        raise TargetSupportError(f"{args.model}: {len(r.issues)} nodes cannot run on {args.target} ({', '.join(ops[:5])}{', ...' if len(ops) > 5 else ''}); see the report above")
    return 0

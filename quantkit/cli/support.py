"""``quantkit support MODEL --target T [--json]``: can a target runtime run every node? Exit 5 if not."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import TargetSupportError


def register(subparsers: Any) -> None:
    from ..profiles import list_profiles

    p = subparsers.add_parser(
        "support",
        help="list the nodes a target runtime cannot run (exit 5 when any)",
        description="Ask the target runtime itself where it is installed: 'cpu' (or an *ExecutionProvider this "
        "onnxruntime has) loads the model in ONNX Runtime at the deployment optimization level and runs it once; "
        "'openvino' reads, places (query_model), compiles (f32) and runs it with the installed OpenVINO. Execution "
        "providers not in this build use onnxruntime's kernel registry; " + ", ".join(list_profiles()) + " or a .json "
        "path use a documentation-derived capability profile (copy one from quantkit/profiles/ and edit it for your "
        "board). Reports the nodes the target refuses, operators at other opsets or dtypes, custom domains and "
        "quantized patterns; the first line says who answered.",
    )
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--target", required=True, help="cpu | openvino | <Name>ExecutionProvider | tensorrt | npu-generic | PROFILE.json")
    p.add_argument("--level", choices=["disable", "basic", "extended", "all"],
                   help="ONNX Runtime graph optimization level the model is deployed with (default all, ORT's default)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..intake.support import check_support

    r = check_support(args.model, args.target, **({"level": args.level} if args.level else {}))
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
    else:
        print(f"target  {r.target}  ({r.source})")
        print(f"nodes   {r.nodes_checked} checked, {len(r.issues)} unsupported  [{r.provenance}]")
        if r.run_error:
            print(f"note    loaded, but one run on probe inputs failed (check with real inputs): {r.run_error}")
        for i in r.issues:
            rng = f"  supported at opsets {[list(x) for x in i.supported_opsets]}" if i.supported_opsets else ""
            print(f"  {i.kind:<17} {(i.domain + '::') if i.domain else ''}{i.op_type}@{i.opset}  node {i.node}: {i.detail}{rng}")
    if not r.supported:
        ops = sorted({f"{(i.domain + '::') if i.domain else ''}{i.op_type}" for i in r.issues})
        raise TargetSupportError(f"{args.model}: {len(r.issues)} nodes cannot run on {args.target} ({', '.join(ops[:5])}{', ...' if len(ops) > 5 else ''}); see the report above")
    return 0

"""``quantkit inspect MODEL [--json] [--validate]``: what a model is, and whether it is valid ONNX."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import ModelError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="show a model's inputs/outputs, opsets, producer, operator inventory and weights",
        description="Inspect an ONNX model without running it: IO with dtypes and shapes (symbolic dims named), IR version, "
        "opset per domain, producer, operator counts per domain/op type, initializers, external data, custom domains, metadata. "
        "With --validate, run ONNX's full checker and strict shape inference instead and explain each failure.",
    )
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--validate", action="store_true", help="run the checker and strict shape inference; exit 2 on errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..intake import inspect_model, validate_model

    if args.validate:
        rep = validate_model(args.model)
        if args.json:
            print(json.dumps(rep.to_dict(), indent=2, sort_keys=True))
        else:
            print(f"validate {rep.path}: {'ok' if rep.ok else 'FAILED'}")
            for i in rep.issues:
                print(f"  [{i.severity}] {i.stage}: {i.message}\n      fix: {i.fix}")
        if not rep.ok:
            first = next(i for i in rep.issues if i.severity == "error")
            raise ModelError(f"{args.model}: {first.stage} failed ({first.message}); {first.fix}")
        return 0
    r = inspect_model(args.model)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
        return 0
    out = sys.stdout
    out.write(f"model       {r.path}\n")
    out.write(f"ir_version  {r.ir_version}\n")
    out.write("opsets      " + ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in sorted(r.opsets.items())) + "\n")
    out.write(f"producer    {r.producer_name or '(empty)'} {r.producer_version}\n")
    for kind, ts in (("input", r.inputs), ("output", r.outputs)):
        for t in ts:
            sym = f"  symbolic: {', '.join(t.symbolic_dims)}" if t.symbolic_dims else ""
            out.write(f"{kind:<11} {t.name}  {t.dtype}  {t.shape_str()}{sym}\n")
    out.write(f"weights     {r.initializer_count} initializers, {r.initializer_bytes:,} bytes"
              + (f", external: {', '.join(r.external_data)}" if r.external_data else "") + "\n")
    out.write(f"custom      {', '.join(r.custom_domains) or '(none)'}\n")
    for k, v in sorted(r.metadata.items()):
        out.write(f"metadata    {k} = {v if len(v) <= 60 else v[:57] + '...'}\n")
    out.write(f"operators   {r.node_count} nodes\n")
    for o in sorted(r.ops, key=lambda o: (-o.count, o.domain, o.op_type)):
        out.write(f"  {o.count:>6}  {(o.domain + '::') if o.domain else ''}{o.op_type}\n")
    return 0

"""``quantkit intake MODEL --params params.yaml --out work/intake``: the pipeline's intake stage."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .flags import add_model_flag


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "intake",
        help="fix the input shape, upgrade the opset, verify numerically and write the export note",
        description="Take a model in: fix its input to the note's shape (batch x channels x input_size, NCHW or NHWC, or rank 3), convert to opset >= min_opset (recording "
        "per-node semantic changes), compare original vs converted outputs with ONNX Runtime, check the declared "
        "preprocessing on a probe image, and write OUT/model.onnx, OUT/export_note.json and OUT/intake.json atomically. "
        "Options come from the 'intake' section of --params.",
    )
    p.add_argument("model_file", metavar="MODEL", help="path to the source .onnx file")
    p.add_argument("--params", default="params.yaml", help="params file with an 'intake' section (default params.yaml); "
                   "its 'task' section, when present, is checked against the model's output shapes")
    add_model_flag(p)
    p.add_argument("--out", required=True, help="output folder (replaced whole on success, untouched on error)")
    p.add_argument("--accept-numeric-change", action="store_true", help="write the model even if the conversion changes outputs beyond atol")
    p.add_argument("--json", action="store_true", help="print intake.json's content instead of a summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params, has_section
    from ..intake import IntakeConfig, intake

    from ..tasks import TaskConfig

    if args.model is not None:
        from ..paramsfile import check_model_source

        check_model_source(args.params, args.model, args.model_file)
    cfg = config_from_params(IntakeConfig, args.params, "intake", model=args.model)
    task = config_from_params(TaskConfig, args.params, "task", model=args.model).make() if has_section(args.params, "task", model=args.model) else None
    if args.accept_numeric_change:
        cfg = cfg.replace(accept_numeric_change=True)
    r = intake(args.model_file, cfg, args.out, task=task)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
        return 0
    c, n = r.conversion, r.numeric
    print(f"intake      {r.source} -> {args.out}/model.onnx")
    print(f"input       {r.fixed_input[0]} fixed to {list(r.fixed_input[1])}")
    print(f"opset       {c.opset_before} -> {c.opset_after} ({c.method}); {len(c.notes)} semantic notes")
    for note in c.notes:
        print(f"  {note.risk:<9} {note.op_type} {note.node}: {note.what}" + (f" [{note.detail}]" if note.detail else ""))
    print(f"numeric     {'ok' if n.passed else 'CHANGED'}: max |diff| {n.max_abs_diff:.3g} over {n.samples} samples (atol {n.atol:g})")
    if r.note_check is not None:
        print("note check  " + r.note_check.summary())
    print(f"framework   {r.note.provenance.framework} ({r.framework_evidence})")
    if r.named_nodes:
        print(f"node names  {len(r.named_nodes)} unnamed nodes named {r.named_nodes[0]} ... (intake.json: named_nodes)")
    errors = [i for i in r.validation.issues if i.severity == "error"]
    if not errors:
        print("validation  ok")
    else:  # written all the same: ONNX Runtime ran it and the numeric check above compared it with the source
        print(f"validation  {len(errors)} error{'s' if len(errors) != 1 else ''} in the written model by onnx's checker; written all the "
              "same (ONNX Runtime ran it, numeric check above), but another runtime may refuse it:")
        for i in errors:
            print(f"  {i.stage}: {i.message}" + (f" -> {i.fix}" if i.fix else ""))
    return 0


"""``quantkit export MODULE --params params.yaml --out work/export``: a PyTorch model to an intake folder."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

HELP = "export a PyTorch model to ONNX as an intake folder, archive the export and compare it with PyTorch"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help=HELP,
        description=HELP + ". MODULE is 'package.module:factory' (imported with the working folder on sys.path), "
        "'path/file.py:factory', a TorchScript file (torch.jit.save) or a torch.export file (.pt2). Writes OUT/model.onnx, "
        "OUT/export_note.json (preprocessing + provenance: export call, exporter, opset, versions, sample digests), "
        "OUT/sample/*.npy and OUT/export.json atomically. Refused, with the first diverging submodule named, when ONNX "
        "Runtime differs from PyTorch beyond export.atol + export.rtol*|torch|. Options come from the 'export' section of --params.")
    p.add_argument("module", metavar="MODULE", help="package.module:factory, path/file.py:factory, model.pt (TorchScript) or model.pt2 (torch.export)")
    p.add_argument("--params", default="params.yaml", help="params file with an 'export' section (default params.yaml)")
    p.add_argument("--section", default="export", help="params section to read (default: export)")
    p.add_argument("--out", required=True, help="output folder (replaced whole on success, untouched on error)")
    p.add_argument("--json", action="store_true", help="print export.json's content instead of a summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..export import TorchExportConfig, export_torch

    cfg = config_from_params(TorchExportConfig, args.params, args.section)
    command = shlex.join(["quantkit", "export", args.module, "--params", args.params, "--section", args.section, "--out", args.out])
    r = export_torch(args.module, cfg, args.out, command=command)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
        return 0
    rec = r.record
    versions = r.note.provenance.runtime_versions
    w = sys.stdout.write
    w(f"export      {args.module} -> {args.out}/model.onnx ({r.kind}, weights {rec.weights_sha256[:12]})\n")
    w(f"exporter    {rec.exporter}, opset {rec.opset}\n")
    w(f"input       {rec.sample_input.name} {list(rec.sample_input.shape)} {rec.sample_input.dtype} (sample {rec.sample_input.file}, "
      f"sha256 {rec.sample_input.sha256[:12]})\n")
    w("versions    " + ", ".join(f"{k} {versions[k]}" for k in ("torch", "onnx", "onnxruntime") if k in versions) + "\n")
    w(f"compare     ONNX Runtime vs PyTorch on {r.samples} samples (tolerance {cfg.atol:g} + {cfg.rtol:g}*|torch|)\n")
    for o in r.outputs:
        w(f"  {o.name:<16} max |diff| {o.max_abs_diff:.3g}, max rel {o.max_rel_diff:.3g}  {'ok' if o.within_tolerance else 'DIFFERS'}\n")
    w(f"validation  {'ok' if r.validation.ok else 'FAILED'}\n")
    w(f"next        quantkit intake {args.out}/model.onnx --params P --out DIR, or quantkit quantize {args.out} ...\n")
    return 0

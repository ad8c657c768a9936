"""``quantkit bundle``: package a quantized model, its record, thresholds and golden data for a target."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .flags import add_model_flag


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bundle",
        help="build a content-addressed, verifiable deployment bundle",
        description=(
            "Bundle QUANTIZED/model_int8.onnx with its record.json, the threshold set bound to it, the export note and "
            "golden inputs/outputs (FP32, and INT8 from the QDQ simulation with sampled INT8 activations) from the first K "
            "images of a set, and this machine's risky-pattern matrix. Writes OUT/quantkit-bundle-<sha256[:16]>.tar and "
            "OUT/bundle.json; the same inputs give the same bytes. Verify it on the target with 'quantkit verify'."
        ),
    )
    p.add_argument("quantized", type=Path, help="folder with model_int8.onnx and record.json (e.g. work/quantize/deployed)")
    p.add_argument("--thresholds", type=Path, required=True, help="threshold set bound to that record (e.g. work/thresholds/deployed.json)")
    p.add_argument("--fp32", type=Path, required=True, help="intake folder with model.onnx and export_note.json (e.g. work/intake)")
    p.add_argument("--golden", type=Path, help="set folder (images/ + manifest.json) giving the golden images")
    p.add_argument("--role", help="with --model: the golden images from params models.MODEL.sets (deployed: its deployed reference set)")
    add_model_flag(p, reads="with --role deployed: its deployed reference set as the golden images")
    p.add_argument("--out", type=Path, required=True, help="output folder (replaced atomically; may hold only an earlier bundle)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'bundle' section")
    p.add_argument("--golden-count", type=int, help="number of golden images (first K in manifest order; default 4)")
    p.add_argument("--gzip", action="store_true", help="write a gzip-compressed .tar.gz (deterministic, mtime 0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bundle import BundleConfig, build_bundle
    from ..config import has_section, section_for_model
    from ..errors import ConfigError
    from ._roles import role_path

    golden = role_path(args.golden, args.params, args.model, args.role, "reference", "--golden")
    if golden is None:
        raise ConfigError("bundle needs the golden images: pass --golden DIR, or --role deployed --model NAME --params params.yaml")
    data, where = section_for_model(args.params, "bundle", args.model) if args.params and has_section(args.params, "bundle", model=args.model) \
        else ({}, "bundle")
    data = dict(data)
    data.pop("verify", None)  # bundle.verify configures 'quantkit verify'
    cfg = BundleConfig.from_dict(data, where=f"{args.params}:{where}")
    if args.golden_count is not None:
        cfg = cfg.replace(golden_count=args.golden_count)
    if args.gzip:
        cfg = cfg.replace(compress=True)
    result = build_bundle(args.quantized, args.thresholds, args.fp32, golden, args.out, cfg)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    rows = [("bundle", str(result.path)), ("sha256", result.sha256), ("size", f"{result.size} bytes"),
            ("members", str(result.members)), ("golden images", str(result.golden)),
            ("activations", str(result.activations)), ("adapter", result.adapter or "none (tensor-level only)"),
            ("patterns", ", ".join(result.patterns_used) or "none of the suite's"),
            ("record", result.record_fingerprint[:16]), ("thresholds", result.threshold_fingerprint[:16])]
    sys.stdout.write("\n".join(f"  {k:<14} {v}" for k, v in rows) + "\n")
    return 0

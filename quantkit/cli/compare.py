"""``quantkit compare``: FP32 vs the QDQ simulation per tensor, and FP32 / simulation / every installed runtime per output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = ("per-tensor SQNR, cosine, max error and clipping of QUANT_DIR's model vs FP32_DIR's (the QDQ simulation), then per "
        "graph output FP32, the simulation and each installed runtime at its deployment settings, naming where a runtime parts "
        "from the simulation")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("compare", help=HELP, description=HELP + ". Streams over images; memory does not grow with the set.")
    p.add_argument("fp32", metavar="FP32_DIR", help="intake folder (model.onnx + export_note.json)")
    p.add_argument("quantized", metavar="QUANT_DIR", help="quantize output folder (model_int8.onnx + record.json)")
    p.add_argument("--set", required=True, metavar="DIR", help="calibration/reference/site set folder")
    p.add_argument("--max-images", type=int, default=None, metavar="N", help="use the first N images only")
    p.add_argument("--max-elements", type=int, metavar="K", help="sampled elements per tensor per image (default: compare_layers')")
    p.add_argument("--quant-level", choices=["disable", "basic", "extended", "all"],
                   help="ORT graph optimization level of the per-tensor run (default: compare_layers', disable = QDQ simulation)")
    p.add_argument("--runtime", action="append", metavar="NAME", help="runtimes of the per-output comparison (repeatable; default every installed one)")
    p.add_argument("--no-runtimes", action="store_true", help="only the per-tensor table")
    p.add_argument("--levels", action="store_true", help="instead compare the quantized model's outputs with ORT optimizations off vs all")
    p.add_argument("--top", type=int, default=20, metavar="K", help="rows to print (table mode; default 20)")
    p.add_argument("--json", action="store_true", help="print every row as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import onnx

    from ..artifacts import CalibrationRecord
    from ..calibset import CalibrationSet, CalibrationSetReader
    from ..errors import ConfigError
    from ..modelio import check_one_image_batch
    from ..quantize.compare import compare_layers, compare_outputs
    from ..quantize.depthwise import finding_lines, narrow_channels
    from ..quantize.engine import MODEL_FILE, load_intake
    from ..quantize.outputs import collapse_lines
    from ..quantize.runtime_compare import compare_runtimes

    if args.max_images is not None and args.max_images < 1:
        raise ConfigError(f"--max-images: {args.max_images} must be >= 1")
    model_path, fp32_model, note = load_intake(args.fp32)
    check_one_image_batch(fp32_model, note.preprocessing.input_name, model_path, batch_axis=note.preprocessing.batch_axis)
    record = CalibrationRecord.load(Path(args.quantized) / "record.json")
    record.check_quantized_from(model_path, Path(args.quantized) / "record.json", flag="")  # FP32_DIR is positional
    reader = CalibrationSetReader(CalibrationSet.load(args.set, verify=True), note.preprocessing, batch_size=1)
    n = len(reader) if args.max_images is None else min(args.max_images, len(reader))
    reader.set_range(0, n)
    qpath = Path(args.quantized) / MODEL_FILE
    if args.levels:
        df = compare_outputs(qpath, reader.iter_batches(), total=n)
    else:
        given = {k: getattr(args, k) for k in ("max_elements", "quant_level") if getattr(args, k) is not None}
        df = compare_layers(model_path, qpath, record, reader.iter_batches(), total=n, **given)
    findings = collapse_lines(record)
    if not args.levels:  # what the record's grids flatten at the depthwise convolutions' inputs
        findings += finding_lines(narrow_channels(model_path, record, reader.iter_batches(), total=n))
    rc = None
    if not args.levels and not args.no_runtimes:
        name = note.preprocessing.input_name
        rc = compare_runtimes(onnx.load(str(model_path)), onnx.load(str(qpath)), ({name: b[1]} for b in reader.iter_batches()),
                              runtimes=args.runtime, total=n)
    if args.json:
        out = {"images": n, "tensors": json.loads(df.to_json(orient="records")), "findings": findings}
        if rc is not None:
            out["runtimes"] = rc.to_dict()
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    sys.stdout.write(f"{len(df)} tensors over {n} images (lowest SQNR first; FP32 vs the QDQ simulation)\n")
    sys.stdout.write(df.head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n")
    notes = df[df["note"] != ""] if "note" in df else df.iloc[0:0]
    for r in notes.itertuples(index=False):
        sys.stdout.write(f"  {r.tensor}: {r.note}\n")
    for line in findings:  # what its outputs and depthwise inputs lost, with the fix where known
        sys.stdout.write(line + "\n")
    if rc is not None:
        sys.stdout.write(render_runtimes(rc) + "\n")
    return 0


def render_runtimes(rc: Any) -> str:
    """Per output and runtime: SQNR vs FP32, then agreement with the simulation; then where each runtime parts from it."""
    lines = ["", f"per graph output, {rc.images} images: SQNR/cosine vs FP32; worst difference and share of elements more than "
             f"{rc.tolerance_steps:g} step off vs the QDQ simulation"]
    t = rc.table()
    lines.append(t.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for label, why in rc.refused:
        lines.append(f"{label}: REFUSES the quantized model: {why}")
    for label, div in rc.parts:
        parted = any(o.mismatch > rc.max_mismatch for o in rc.outputs if o.runtime == label)
        if not parted:
            lines.append(f"{label}: agrees with the simulation (at most {100 * rc.max_mismatch:g}% of output elements beyond {rc.tolerance_steps:g} step)")
        elif div is None:
            lines.append(f"{label}: parts from the simulation at the outputs; no quantized tensor before them diverges")
        else:
            lines.append(f"{label}: parts from the simulation: {div.describe()}")
    return "\n".join(lines)

"""``quantkit compare``: layer-by-layer error of a quantized model against its FP32 model on a set."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "per-tensor SQNR, cosine, max error and clipping rate of QUANT_DIR's model vs FP32_DIR's, over a set's images"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("compare", help=HELP, description=HELP + ". Streams over images; memory does not grow with the set.")
    p.add_argument("fp32", metavar="FP32_DIR", help="intake folder (model.onnx + export_note.json)")
    p.add_argument("quantized", metavar="QUANT_DIR", help="quantize output folder (model_int8.onnx + record.json)")
    p.add_argument("--set", required=True, metavar="DIR", help="calibration/reference/site set folder")
    p.add_argument("--max-images", type=int, default=None, metavar="N", help="use the first N images only")
    p.add_argument("--max-elements", type=int, default=16384, metavar="K", help="sampled elements per tensor per image (default 16384)")
    p.add_argument("--quant-level", choices=["disable", "basic", "extended", "all"], default="disable",
                   help="ORT graph optimization level for the quantized run (default disable = QDQ simulation; all = fused kernels)")
    p.add_argument("--levels", action="store_true", help="instead compare the quantized model's outputs with ORT optimizations off vs all")
    p.add_argument("--top", type=int, default=20, metavar="K", help="rows to print (table mode; default 20)")
    p.add_argument("--json", action="store_true", help="print every row as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..artifacts import CalibrationRecord
    from ..calibset import CalibrationSet, CalibrationSetReader
    from ..errors import ConfigError
    from ..quantize.compare import compare_layers, compare_outputs
    from ..quantize.engine import MODEL_FILE, load_intake

    if args.max_images is not None and args.max_images < 1:
        raise ConfigError(f"--max-images: {args.max_images} must be >= 1")
    model_path, _, note = load_intake(args.fp32)
    record = CalibrationRecord.load(Path(args.quantized) / "record.json")
    reader = CalibrationSetReader(CalibrationSet.load(args.set), note.preprocessing, batch_size=1)
    n = len(reader) if args.max_images is None else min(args.max_images, len(reader))
    reader.set_range(0, n)
    qpath = Path(args.quantized) / MODEL_FILE
    if args.levels:
        df = compare_outputs(qpath, reader.iter_batches(), total=n)
    else:
        df = compare_layers(model_path, qpath, record, reader.iter_batches(), max_elements=args.max_elements, total=n,
                            quant_level=args.quant_level)
    if args.json:
        print(json.dumps({"images": n, "tensors": json.loads(df.to_json(orient="records"))}, indent=2, sort_keys=True))
        return 0
    sys.stdout.write(f"{len(df)} tensors over {n} images (lowest SQNR first)\n")
    sys.stdout.write(df.head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n")
    return 0

"""``quantkit measure``: time each model's FP32, deployed and candidate variants on this machine's runtimes and write
the shift report's ``machine/`` sidecar (latency stays out of everything DVC hashes)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._overwrite import FileKind, json_with_keys, text_with
from .report import add_model_arguments, model_work_dirs


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "measure",
        help="time FP32 / deployed / candidate per runtime and thread count; write reports/machine/ beside the report",
        description=(
            "For each model work folder, time intake/model.onnx (FP32) and quantize/{deployed,candidate}/model_int8.onnx "
            "interleaved (medians) on each runtime and thread count of params 'measure', at each runtime's deployment "
            "settings, and write OUT/measurements.json and OUT/measurements.js, which the shift report's 'Speed on this "
            "machine' section reads. A variant slower than FP32 is listed and warned about; FP32 is also timed at OpenVINO's "
            "default precision (fp32-default, bf16 on CPUs with it), and a variant slower than its runtime's best float run is named "
            "(--require-speedup: exit 1)."
        ),
    )
    add_model_arguments(p)
    p.add_argument("--set", type=Path, metavar="DIR", help="image set for the inputs (default: each model's deployed calibration set)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'measure' section")
    p.add_argument("--out", type=Path, default=Path("reports/machine"), help="output folder (default: reports/machine)")
    p.add_argument("--require-speedup", action="store_true",
                   help="exit 1 when a quantized variant is slower than its runtime's best float run (e.g. OpenVINO's default-precision FP32)")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.set_defaults(func=run)


MEASUREMENT_FILES = {
    "measurements.json": FileKind("measurements file", json_with_keys(("latency", "skipped", "slower_than_fp32"))),
    "measurements.js": FileKind("measurements script", text_with("window.QUANTKIT_MEASUREMENTS")),
}
"""What measure may replace in --out: the files of an earlier run (here until :mod:`quantkit.report.measure` checks them)."""


def run(args: argparse.Namespace) -> int:
    from .._overwrite import check_not_input, check_not_output_dir, check_output_file
    from ..config import config_from_params
    from ..paramsfile import targets
    from ..report.measure import MeasureConfig, measure, write_measurements

    args.model = model_work_dirs(args.model, args.params, args.work, args.work_dir)
    cfg = config_from_params(MeasureConfig, args.params, "measure")
    check_not_input(args.out, [*args.model, args.set, args.params])  # before the (slow) timing
    check_not_output_dir(args.out)
    for name, kind in MEASUREMENT_FILES.items():
        check_output_file(args.out / name, kind)
    result = measure(args.model, cfg, image_set=args.set, targets=targets(args.params))
    paths = write_measurements(result, args.out)
    status = 1 if args.require_speedup and result["slower_than_best_float"] else 0
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return status
    w = sys.stdout.write
    w(f"{'model':<14} {'variant (placement)':<23} {'runtime':<12} {'threads':>7} {'median ms':>10} {'vs FP32':>8} {'vs best float':>14}\n")
    for r in result["latency"]:
        vs = f"{r['vs_fp32']:.2f}x" if r["vs_fp32"] is not None else "-"
        best = f"{r['vs_best_float']:.2f}x" if r["vs_fp32"] is not None else ("best" if r["variant"] == r["best_float"] else "-")
        variant = r["variant"] + (f" ({r['placement']})" if r.get("placement") else "")
        w(f"{r['model']:<14} {variant:<23} {r['runtime']:<12} {r['threads']:>7} {r['median_ms']:>10.1f} {vs:>8} {best:>14}\n")
    for rt, why in result["skipped"].items():
        w(f"{rt}: skipped ({why})\n")
    for p in result.get("node_time", []):
        kinds = ", ".join(f"{k['type']} {k['precision']} {k['ms']:.1f}" for k in p["by_kind"][:4])
        w(f"{p['model']} {p['variant']} ({p.get('placement', 'ort')} placement) on {p['runtime']}@{p['threads']}: {100 * p['integer_kernel_share']:.0f}% of {p['total_ms']:.1f} ms "
          f"in integer Conv/MatMul kernels; {p['conversions']} standalone Q/DQ nodes, {p['conversion_ms']:.1f} ms; {kinds}\n")
    for s in result["slower_than_fp32"]:
        w(f"slower than FP32: {s}\n")
    for s in result["slower_than_best_float"]:
        w(f"slower than the runtime's best float run: {s}\n")
    w(f"wrote {paths['js']}\n")
    return status

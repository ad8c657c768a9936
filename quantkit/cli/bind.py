"""``quantkit bind``: derive thresholds for a quantized model on a reference set and bind them to its record."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bind",
        help="derive INT8 thresholds on a reference set and bind them to a calibration record",
        description=(
            "Run the FP32 and quantized models once over REFERENCE, choose the quantized model's thresholds "
            "for the operating point in params (keep_fp32: best agreement with FP32's decisions; fixed_far; "
            "target_recall; best_f1), compute their integer-domain values under the output tensor's scale and "
            "zero point, and write a threshold set bound to QUANT_DIR/record.json (with bootstrap confidence "
            "intervals and the figures the FP32 thresholds give on the new model)."
        ),
    )
    p.add_argument("quant_dir", type=Path, help="quantized folder: model_int8.onnx + record.json (e.g. work/quantize/deployed)")
    p.add_argument("--fp32", type=Path, required=True, help="intake folder: model.onnx + export_note.json (e.g. work/intake)")
    p.add_argument("--reference", type=Path, required=True, help="reference set folder (images/ + manifest.json)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'thresholds' section")
    p.add_argument("--mode", choices=["keep_fp32", "fixed_far", "target_recall", "best_f1"], help="override thresholds.operating_point.mode")
    p.add_argument("--history", type=Path, help="append-only JSON Lines history (e.g. thresholds/history-deployed.jsonl)")
    p.add_argument("--out", type=Path, required=True, help="threshold set JSON to write (atomically)")
    p.add_argument("--json", action="store_true", help="print the threshold set as JSON instead of a table")
    p.set_defaults(func=run)


def _fmt(est: dict | None) -> str:
    if not est:
        return "-"
    return f"{est['value']:.3f} [{est['ci'][0]:.3f}, {est['ci'][1]:.3f}]"


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import InputFileError
    from ..thresholds.operating_point import ThresholdsConfig, bind

    cfg = config_from_params(ThresholdsConfig, args.params, "thresholds")
    if args.mode:
        cfg = cfg.replace(operating_point=cfg.operating_point.replace(mode=args.mode))
    if not (args.fp32 / "model.onnx").is_file() or not (args.fp32 / "export_note.json").is_file():
        raise InputFileError(f"{args.fp32}: --fp32 expects the intake folder (model.onnx + export_note.json, e.g. work/intake); "
                             "run 'quantkit intake MODEL --out DIR' and pass DIR")
    result = bind(args.quant_dir, args.fp32, args.reference, cfg, args.out, history=args.history)
    ts = result.threshold_set
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    op = ts.operating_point
    lines = [f"{result.path}: {ts.adapter} thresholds bound to calibration '{ts.binding.calibration_set_name}' "
             f"(record {ts.binding.record_fingerprint[:12]}), mode {op.get('mode')} on {op.get('reference_set', {}).get('name')}",
             f"  {'threshold':<12} {'fp32':>8} {'int8':>8} {'integer (q >=)':>15}"]
    for k in sorted(ts.values):
        iq = ts.integer_domain.get(k)
        lines.append(f"  {k:<12} {ts.fp32_values.get(k, float('nan')):>8.4g} {ts.values[k]:>8.4g} "
                     f"{(str(iq.decision_value) + ' ' + iq.dtype) if iq else '-':>15}")
    for key in ("pixel_iou_vs_fp32",):
        if key in op:
            lines.append(f"  pixel IoU vs FP32: chosen {_fmt(op[key].get('chosen'))}, at FP32 thresholds {_fmt(op[key].get('fp32_thresholds'))}")
    for key in ("agreement_vs_fp32", "vs_ground_truth"):
        if key in op:
            lines.append(f"  F1 {key.replace('_', ' ')}: chosen {_fmt(op[key]['chosen']['f1'])}, "
                         f"at FP32 thresholds {_fmt(op[key]['fp32_thresholds']['f1'])}"
                         + (f", previous {_fmt(op[key]['previous_thresholds']['f1'])}" if "previous_thresholds" in op[key] else ""))
    if "false_alarm_rate" in op:
        lines.append(f"  false-alarm rate: chosen {_fmt(op['false_alarm_rate']['chosen'])}, at FP32 thresholds {_fmt(op['false_alarm_rate']['fp32_thresholds'])}")
    if result.history_entry:
        lines.append(f"  history: {args.history} += {result.history_entry['reason']}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


"""``quantkit bind``: derive thresholds for a quantized model on a reference set and bind them to its record."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .flags import add_model_flag


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bind",
        help="derive INT8 thresholds on a reference set and bind them to a calibration record",
        description=(
            "Run the FP32 and quantized models once over REFERENCE, choose the quantized model's thresholds "
            "for the operating point in params (keep_fp32: best agreement with FP32's decisions; fixed_far; "
            "target_recall; best_f1), compute their integer-domain values under the output tensor's scale and "
            "zero point, and write a threshold set bound to QUANT_DIR/record.json (with bootstrap confidence "
            "intervals and the figures the FP32 thresholds give on the new model). Refuses (exit 6) when the "
            "task's primary agreement metric is below thresholds.min_agreement."
        ),
    )
    p.add_argument("quant_dir", type=Path, help="quantized folder: model_int8.onnx + record.json (e.g. work/models/ppocr_det/quantize/deployed)")
    p.add_argument("--fp32", type=Path, required=True, help="intake folder: model.onnx + export_note.json (e.g. work/models/ppocr_det/intake)")
    p.add_argument("--reference", type=Path, help="reference set folder (images/ + manifest.json)")
    p.add_argument("--role", help="with --model: take the reference set from params models.MODEL.sets (deployed: its deployed set)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'task' and 'thresholds' sections")
    add_model_flag(p, reads="with --role deployed: its deployed reference set")
    p.add_argument("--mode", choices=["keep_fp32", "fixed_far", "target_recall", "best_f1"], help="override thresholds.operating_point.mode")
    p.add_argument("--no-floor", action="store_true", help="record the agreement without refusing below thresholds.min_agreement (the main "
                   "job's bind of the deployed calibration's own ORT file, which no runtime runs: each runtime's chosen file is bound with "
                   "the floor by bind_target)")
    p.add_argument("--history", type=Path, help="append-only JSON Lines history (e.g. thresholds/history-ppocr_det-deployed.jsonl)")
    p.add_argument("--out", type=Path, required=True, help="threshold set JSON to write (atomically)")
    p.add_argument("--json", action="store_true", help="print the threshold set as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import InputFileError
    from ..tasks import TaskConfig
    from ..thresholds import ThresholdsConfig, bind

    from ..errors import ConfigError
    from ._roles import role_path

    reference = role_path(args.reference, args.params, args.model, args.role, "reference", "--reference")
    if reference is None:
        raise ConfigError("bind needs the reference set: pass --reference DIR, or --role deployed --model NAME --params params.yaml")
    cfg = config_from_params(ThresholdsConfig, args.params, "thresholds", model=args.model)
    task = config_from_params(TaskConfig, args.params, "task", model=args.model).make()
    if args.mode:
        cfg = cfg.replace(operating_point=cfg.operating_point.replace(mode=args.mode))
    if args.no_floor:
        cfg = cfg.replace(min_agreement=0.0)
    if not (args.fp32 / "model.onnx").is_file() or not (args.fp32 / "export_note.json").is_file():
        raise InputFileError(f"{args.fp32}: --fp32 expects the intake folder (model.onnx + export_note.json); "
                             "run 'quantkit intake MODEL --out DIR' and pass DIR")
    result = bind(args.quant_dir, args.fp32, reference, task, cfg, args.out, history=args.history)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write(render(result, task, args.history) + "\n")
    return 0


def render(result, task, history) -> str:  # type: ignore[no-untyped-def]
    """The bind summary: thresholds FP32 -> INT8 with integer codes, then every agreement metric with its CI."""
    ts = result.threshold_set
    op = ts.operating_point
    lines = [f"{result.path}: {ts.adapter} thresholds bound to calibration '{ts.binding.calibration_set_name}' "
             f"(record {ts.binding.record_fingerprint[:12]}), mode {op.mode} on {op.reference_set.name} ({op.images} images)",
             f"  {'threshold':<14} {'fp32':>8} {'int8':>8} {'integer (q >=)':>15}"]
    for k in sorted(ts.values):
        iq = ts.integer_domain.get(k)
        code = f"{iq.decision_value} {iq.dtype}" if iq else "-"
        lines.append(f"  {k:<14} {ts.fp32_values.get(k, float('nan')):>8.4g} {ts.values[k]:>8.4g} {code:>15}")
    for m in task.AGREEMENT:
        chosen = op.agreement.get("chosen", {}).get(m.name)
        at_fp32 = op.agreement.get("fp32_thresholds", {}).get(m.name)
        prev = op.agreement.get("previous_thresholds", {}).get(m.name)
        if chosen is not None:
            lines.append(f"  {m.label}: {chosen}" + (f", at FP32 thresholds {at_fp32}" if at_fp32 else "") + (f", previous {prev}" if prev else ""))
    for m in task.ACCURACY:
        chosen = op.accuracy.get("chosen", {}).get(m.name)
        if chosen is not None:
            lines.append(f"  {m.label}: {chosen}")
    if op.false_alarm_rate:
        lines.append(f"  false-alarm rate: chosen {op.false_alarm_rate['chosen']}, at FP32 thresholds {op.false_alarm_rate['fp32_thresholds']}")
    if result.history_entry:
        lines.append(f"  history: {history} += {result.history_entry['reason']}")
    return "\n".join(lines)

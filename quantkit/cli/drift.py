"""``quantkit drift``: compare a site set with the calibration set; say whether and how the site changed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .flags import add_model_flag


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "drift",
        help="check a site set for camera/lighting change against the calibration set",
        description=(
            "Compare per-image statistics of SITE_SET with the calibration set (normalized Wasserstein, PSI, "
            "Jensen-Shannon against thresholds derived from the calibration set's own variability) and the INT8 "
            "model's activation clipping; write a DriftResult JSON saying whether the site changed and how."
        ),
    )
    p.add_argument("site_set", type=Path, help="site set folder (manifest.json + images/ [+ stats.csv]), or a folder of site sets "
                   "(a model's sets.site): each is checked, --out is then a folder of <set name>.json")
    p.add_argument("--calibration-set", type=Path, required=True, help="calibration set the deployed model was calibrated on")
    p.add_argument("--quantized", type=Path, help="quantized folder with record.json (e.g. work/quantize/deployed)")
    p.add_argument("--fp32", type=Path, help="intake folder with the FP32 model.onnx (e.g. work/intake)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'drift' section")
    add_model_flag(p)
    p.add_argument("--no-clipping", action="store_true", help="skip the activation clipping check")
    p.add_argument("--out", type=Path, help="write the DriftResult JSON here (atomically)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._overwrite import check_output_file
    from ..artifacts.drift import DriftResult
    from ..config import config_from_params
    from ..drift import DriftConfig, check_drift
    from ..errors import InputFileError

    from ..calibset.model_sets import holds_sets

    cfg = config_from_params(DriftConfig, args.params, "drift", model=args.model)
    if args.no_clipping:
        cfg = cfg.replace(clipping=False)
    if holds_sets(args.site_set):
        return _run_sets(args, cfg)
    if args.out is not None and args.out.is_dir():  # fail before the (slow) check, not after it
        raise InputFileError(f"{args.out}: is a folder; --out takes the drift result's file path, e.g. {args.out / 'site.json'}")
    if args.out is not None:
        check_output_file(args.out, DriftResult.file_kind(), inputs=[args.site_set, args.calibration_set, args.quantized, args.fp32, args.params])
    result = check_drift(args.site_set, args.calibration_set, cfg, quantized=args.quantized, fp32=args.fp32)
    if args.out:
        result.save(args.out)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write(_lines(result, cfg) + "\n")
    return 0


def _run_sets(args: argparse.Namespace, cfg: Any) -> int:
    """Every set of the folder ``args.site_set``, each written to ``args.out/<set name>.json`` (the folder whole or not at all)."""
    from .._io import atomic_output_dir
    from .._overwrite import check_output_dir
    from ..calibset.model_sets import set_folders
    from ..drift import check_drift

    sets = set_folders(args.site_set)
    inputs = [args.site_set, args.calibration_set, args.quantized, args.fp32, args.params]
    if args.out is not None:
        check_output_dir(args.out, "drift", inputs=inputs)  # before the (slow) checks, not after them
    results = [check_drift(s, args.calibration_set, cfg, quantized=args.quantized, fp32=args.fp32) for s in sets]
    if args.out is not None:
        with atomic_output_dir(args.out, command="drift", inputs=inputs) as tmp:
            for s, r in zip(sets, results):
                r.save(tmp / f"{s.name}.json")
    if args.json:
        sys.stdout.write(json.dumps([r.to_dict() for r in results], indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write("\n".join(_lines(r, cfg) for r in results) + "\n")
    return 0


def _lines(result: Any, cfg: Any) -> str:
    """The table of one site set's drift check."""
    from ..drift import PLAIN_NAMES
    from ..drift.advice import diagnose_result

    verdict = "CHANGED (see the shift report for whether the model still agrees)" if result.changed else "no change"
    out = [f"site set {result.site_set.name} vs calibration set {result.calibration_set.name}: {verdict}"]
    out.append(f"  {'statistic':<26} {'calib':>10} {'site':>10} {'change':>8}  metrics moved")
    for c in result.changes:
        mark = ("MOVED" + (" (site median outside calibration range)" if c.median_outside else "")) if c.moved else ""
        out.append(f"  {PLAIN_NAMES.get(c.name, c.name):<26} {c.value_text(c.calibration_median):>10} {c.value_text(c.site_median):>10} "
                   f"{c.change_text:>8}  {c.metrics_moved}/{len(cfg.metrics)} {mark}")
    if result.clipping:
        k = result.clipping
        out.append(f"  clipping: {100 * k.rate:.3f}% vs baseline {100 * k.baseline:.3f}% (threshold {100 * k.threshold:.3f}%)"
                   f"{' MOVED' if k.moved else ''}")
    out.extend(f"  - {r}" for r in result.reasons)
    if result.changed:  # the one rule (quantkit.decision): agreement held -> watch, fell -> the cause -> action table's action
        held, fell = diagnose_result(result, covered=True), diagnose_result(result, agreement_low=True)
        if held.action is fell.action:  # a camera fault or new content: the same whatever the agreement
            out.append(f"  what to do: {fell.sentence}")
        else:
            out.append(f"  what to do while the deployed model still agrees with FP32: {held.sentence}")
            out.append(f"  if its agreement falls (the shift report says): {fell.sentence}")
    out.extend(f"  warning: {w}" for w in result.warnings)
    return "\n".join(out)

"""``quantkit quantize``: calibrate and quantize the intake model (static), or quantize it dynamically."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .flags import add_model_flag

HELP = "quantize work/intake statically (calibrated on a set) or dynamically; writes model_int8.onnx + record.json"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("quantize", help=HELP, description=HELP + ". Options come from the 'quantize' section of "
                              "--params (static fields; its 'dynamic' sub-mapping for --dynamic); flags override.")
    p.add_argument("intake", help="intake folder (model.onnx + export_note.json) or a model file with an embedded note")
    p.add_argument("--calibration-set", metavar="DIR", help="calibration set folder (images/ + manifest.json); static only")
    p.add_argument("--role", help="with --model: take the calibration set from params models.MODEL.sets (deployed: its deployed set)")
    p.add_argument("--dynamic", action="store_true", help="dynamic quantization (ORT quantize_dynamic); no calibration set")
    p.add_argument("--params", metavar="YAML", help="params file with a 'quantize' section (default: built-in defaults)")
    p.add_argument("--section", default="quantize", help="params section to read (default: quantize)")
    add_model_flag(p, reads="with --role deployed: its deployed calibration set")
    p.add_argument("--method", choices=["minmax", "entropy", "percentile", "distribution"], help="override the calibration method")
    p.add_argument("--chunk-size", type=int, metavar="N", help="override calibration_chunk_size (images per chunk: progress and checkpoint unit)")
    p.add_argument("--max-images", type=int, metavar="N", help="calibrate on the first N images only")
    p.add_argument("--checkpoint", metavar="FILE", help="calibration checkpoint file (default: next to --out; resumes an interrupted run)")
    p.add_argument("--min-levels", type=float, metavar="N", help="flag output channels spanning fewer quantization steps "
                   "(default: quantkit.quantize.outputs.DEFAULT_LEVELS_FLOOR)")
    p.add_argument("--placement", metavar="NAME", help="override quantize.placement: where Q/DQ pairs go (ort | openvino | nncf)")
    p.add_argument("--target", metavar="RUNTIME", help="take the placement from params targets.RUNTIME.placement (the main job's "
                   "per-runtime files, with --ranges-from the deployed record); where the target lists recipes "
                   "(targets.RUNTIME.recipes), build each from the deployed calibration, judge each on RUNTIME (agreement on the "
                   "reference set, speed against its best float run) and write the one chosen, with choice.json")
    p.add_argument("--reference-set", metavar="DIR", help="with a target's recipes: the set the files are judged on (default with "
                   "--role deployed: the model's deployed reference set)")
    p.add_argument("--engine", metavar="NAME", help="override quantize.engine: ort (ONNX Runtime's quantizer), nncf (NNCF's, the "
                   "nncf extra; its placement is nncf unless the section names one) or a registered plug-in engine")
    p.add_argument("--ranges-from", metavar="RECORD", help="use this record's calibrated ranges instead of calibrating "
                   "(same float model and calibration settings; e.g. another placement of one calibration)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (written whole or not at all)")
    p.add_argument("--json", action="store_true", help="print the record summary as JSON")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> Any:
    """Params section + flag overrides -> StaticQuantConfig or DynamicQuantConfig."""
    from ..config import has_section, section_for_model
    from ..errors import UnsupportedOptionError
    from ..quantize import DynamicQuantConfig, StaticQuantConfig

    section: dict[str, Any] = {}
    where = args.section
    if args.params and has_section(args.params, args.section, model=getattr(args, "model", None)):  # no section: the defaults
        section, where = section_for_model(args.params, args.section, getattr(args, "model", None))
    dynamic_section = section.pop("dynamic", {}) or {}
    if args.dynamic:
        for flag in ("calibration_set", "method", "chunk_size", "max_images", "checkpoint", "placement", "target", "ranges_from", "engine"):
            if getattr(args, flag) is not None:
                raise UnsupportedOptionError(f"--{flag.replace('_', '-')} applies to static quantization only; drop it or drop --dynamic")
        return DynamicQuantConfig.from_dict(dynamic_section, where=f"{args.params or 'params'}: {where}.dynamic")
    engine = getattr(args, "engine", None)
    placement = args.placement
    if args.target is not None:  # the target's file: the engine's own, or ORT's placement on its ranges
        from ..quantize.placement import target_engine

        engine, placement = target_engine(engine or section.get("engine", "ort"), args.target, target_placement(args))
    overrides = {"method": args.method, "calibration_chunk_size": args.chunk_size, "max_images": args.max_images,
                 "placement": placement, "engine": engine}
    chosen = engine or section.get("engine", "ort")
    if chosen != "ort" and overrides["placement"] is None and "placement" not in section:
        overrides["placement"] = chosen  # the engine's own placement: engine: nncf alone is enough
    section.update({k: v for k, v in overrides.items() if v is not None})
    return StaticQuantConfig.from_dict(section, where=f"{args.params or 'params'}: {where}")


def target_placement(args: argparse.Namespace) -> str:
    """``targets.<args.target>.placement`` of ``args.params``.

    Raises:
        ConfigError: no --params, --placement given too, an unknown runtime, or no such target in params.
    """
    from ..errors import ConfigError
    from ..paramsfile import targets as params_targets
    from ..runtimes import registered_runtimes

    if args.placement is not None:
        raise ConfigError("--target takes the placement from params targets.RUNTIME; drop --placement or --target")
    if args.params is None:
        raise ConfigError(f"--target {args.target} reads targets.{args.target}.placement from --params; pass --params params.yaml")
    if args.target not in registered_runtimes():
        raise ConfigError(f"--target {args.target}: not a runtime; use one of {', '.join(registered_runtimes())}")
    targets = params_targets(args.params)
    if targets is None:
        raise ConfigError(f"{args.params}: no targets section; add targets: {{{args.target}: {{placement: NAME}}}} or drop --target")
    if args.target not in targets:
        raise ConfigError(f"{args.params}: targets has no {args.target!r} (it has {', '.join(targets)}); add it or fix --target")
    return targets[args.target]


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    """``(inode, size, mtime ns)`` of a file, None when absent: a checkpoint whose stamp changed during the run was
    written by it (a stale one, made for another model, set or config, is left as it was and not resumed)."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else None


def run(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..quantize import quantize, quantize_with_ranges
    from ..quantize.engines import checkpoint_path
    from ._roles import role_path

    if args.target is not None and args.params is not None and not args.dynamic:
        from ..paramsfile import target_recipes

        recipes = target_recipes(args.params, args.target)
        if recipes:
            return run_recipes(args, recipes)
    if args.reference_set is not None:
        raise ConfigError("--reference-set is read only for a target with recipes (params targets.RUNTIME.recipes); drop it")
    if args.ranges_from is None:
        args.calibration_set = role_path(args.calibration_set, args.params, args.model, args.role, "calibration", "--calibration-set")
    config = build_config(args)
    if not args.dynamic and not args.calibration_set and args.ranges_from is None:
        raise ConfigError("static quantization needs --calibration-set DIR (or --ranges-from RECORD, or pass --dynamic)")
    floor = {} if args.min_levels is None else {"levels_floor": args.min_levels}
    if args.min_levels is not None and args.dynamic:
        raise ConfigError("--min-levels applies to static quantization only (dynamic models keep float outputs); drop it")
    ckpt = None if args.dynamic or args.ranges_from else checkpoint_path(args.out, args.checkpoint)
    before = _stamp(ckpt)
    try:
        if args.ranges_from is not None:
            if args.calibration_set or args.dynamic:
                raise ConfigError("--ranges-from reuses a record's calibration; drop --calibration-set / --role / --dynamic")
            rec = quantize_with_ranges(args.ranges_from, args.intake, config, out=args.out, **floor)
        else:
            rec = quantize(args.intake, config, out=args.out, calibration_set=None if args.dynamic else args.calibration_set,
                           checkpoint=args.checkpoint, **floor)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: quantize keeps the checkpoint it saved; main() says so
        if ckpt is not None and ckpt.is_file() and _stamp(ckpt) != before:
            e.kept = f"the calibration checkpoint {ckpt} was kept: the same command resumes from it"  # type: ignore[attr-defined]
        raise
    summary = {"out": args.out, "mode": rec.mode, "fingerprint": rec.fingerprint, "tensors": len(rec.tensors),
               "quantized_model_digest": rec.quantized_model_digest, "opset_before": rec.opset_before, "opset_after": rec.opset_after,
               "calibration_set": rec.calibration_set.to_dict() if rec.calibration_set else None, "calibration": rec.calibration}
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    w = sys.stdout.write
    engine = "" if rec.config.get("engine", "ort") == "ort" else f", engine {rec.config['engine']} {rec.versions.get(rec.config['engine'], '')}"
    w(f"wrote {args.out}/model_int8.onnx and record.json ({rec.mode}{engine}, opset {rec.opset_before} -> {rec.opset_after})\n")
    if rec.calibration_set:
        cs = rec.calibration_set
        used = (rec.calibration or {}).get("images")
        images = f"{used} of {cs.count} images" if isinstance(used, int) and used != cs.count else f"{cs.count} images"
        w(f"calibration set: {cs.name} ({cs.camera}/{cs.lighting}, {images}, id {cs.set_id[:12]})\n")
    w(f"fingerprint: {rec.fingerprint}\n")
    for (label, dtype), n in role_counts(rec).items():
        w(f"  {label:<10} {dtype:<6} {n:>5} tensors\n")
    if any(label == "constant" for label, _ in role_counts(rec)):
        w("  constant = initializer ORT quantized with the activation type (e.g. a scalar Mul/Add operand); role 'weight' in record.json\n")
    for line in findings(rec):
        w(line + "\n")
    return 0


def run_recipes(args: argparse.Namespace, recipes: tuple[str, ...]) -> int:
    """``--target RUNTIME`` where params ``targets.RUNTIME.recipes`` lists recipes: :func:`quantkit.quantize.recipes.choose_for_runtime`
    from the deployed record (``--ranges-from``), its calibration set and the reference set; prints the table and the choice."""
    from ..config import config_from_params
    from ..errors import ConfigError
    from ..quantize.recipes import choose_for_runtime
    from ..report.config import ReportConfig
    from ..runtimes import registered_runtimes
    from ._roles import role_path
    from .flags import task_agreement_metric

    if args.target not in registered_runtimes():
        raise ConfigError(f"{args.params}: targets.{args.target}: not a runtime; use one of {', '.join(registered_runtimes())}")
    if args.ranges_from is None:
        raise ConfigError(f"--target {args.target}: targets.{args.target}.recipes places the deployed record's ranges; pass --ranges-from "
                          f"work/models/{args.model or 'MODEL'}/quantize/deployed")
    for flags, reason in ((("placement", "engine"), "names each recipe's engine and placement"),
                          (("method", "max_images", "chunk_size"), "reuse the deployed record's calibration (its method, images and chunking)"),
                          (("checkpoint",), "calibrate nothing (no checkpoint to resume)")):
        for flag in flags:
            if getattr(args, flag) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')}: targets.{args.target}.recipes {reason}; drop it")
    cset = role_path(args.calibration_set, args.params, args.model, args.role, "calibration", "--calibration-set")
    ref = role_path(args.reference_set, args.params, args.model, args.role, "reference", "--reference-set")
    if cset is None or ref is None:
        raise ConfigError(f"--target {args.target}: the recipes need the deployed calibration and reference sets; pass --role deployed "
                          "--model NAME (or --calibration-set DIR --reference-set DIR)")
    config = build_config(argparse.Namespace(**{**vars(args), "target": None}))  # the deployed record's section; each recipe sets engine and placement
    target = config_from_params(ReportConfig, args.params, "report", model=args.model).min_agreement
    metric = task_agreement_metric(args.params, args.model, args.intake)
    rec, choice = choose_for_runtime(args.intake, args.ranges_from, cset, [ref], config, args.target, recipes, metric,
                                     target=target, out=args.out)
    if args.json:
        print(json.dumps(choice, indent=2, sort_keys=True))
        return 0
    w = sys.stdout.write
    w(f"recipes for {args.target} ({choice['cpu']}), agreement = {choice['metric']} vs FP32 on {choice['figures'][0]['images']} reference "
      f"images, speed against {args.target}'s best float run:\n")
    for f in choice["figures"]:
        ci = f"[{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f["ci"] else ""
        mark = "  <- chosen" if f["name"] == choice["chosen"] else ""
        w(f"  {f['name']:<18} agreement {f['agreement']:.3f} {ci:<16} {f['median_ms']:>8.1f} ms  {f['vs_best_float']:.2f}x ({f['best_float']}){mark}\n")
    w(f"chose {choice['chosen']} ({choice['rule']}): {choice['reason']}\n")
    w(f"wrote {args.out}/model_int8.onnx, record.json and choice.json (fingerprint {rec.fingerprint})\n")
    return 0


def findings(rec: Any) -> list[str]:
    """Lines describing what the written model computes at its outputs and what quantize changed or noticed
    (the record's ``calibration`` entries of :mod:`quantkit.quantize.outputs` and :mod:`quantkit.quantize.calibration.calibrate`)."""
    from ..quantize.outputs import collapse_lines, describe_change

    cal = rec.calibration or {}
    lines = ["graph outputs:"] if cal.get("outputs") else []
    for o in cal.get("outputs", []):
        if not o["quantized"]:
            lines.append(f"  {o['name']}: float (not quantized)")
            continue
        cr = o.get("calibrated")
        span = f"calibrated [{cr[0]:.4g}, {cr[1]:.4g}], " if cr else ""
        shares = f" (shares {o['shares']}'s parameters)" if o.get("shares") else ""
        lines.append(f"  {o['name']}: {o['dtype']} scale {o['scale']:.4g} zero point {o['zero_point']}{shares}, {span}"
                     f"represents [{o['written'][0]:.4g}, {o['written'][1]:.4g}]")
    for name in cal.get("outputs_pinned", []):
        lines.append(f"kept its own range: graph output {name!r} feeds a Relu/Clip, whose range ONNX Runtime would have given it")
    for c in cal.get("range_changes", []):
        lines.append("range changed: " + describe_change(c))
    lines += collapse_lines(rec)
    if cal.get("variable_shape"):
        lines.append(f"variable shape (calibrated at whatever size arrived): {', '.join(cal['variable_shape'])}")
    if cal.get("unobserved"):
        lines.append(f"no value on any calibration image (their nodes stay in float): {', '.join(cal['unobserved'])}")
    if cal.get("activations_to_uint8"):
        lines.append(f"rewritten as uint8 on the same grid (zero point + 128): {len(cal['activations_to_uint8'])} of NNCF's int8 activation "
                     "pairs (OpenVINO miscomputes int8 pairs after a Concat; quantize.activation_type: int8 keeps them)")
    if cal.get("float_nodes"):
        lines.append(f"kept in float by quantize: {', '.join(cal['float_nodes'])}")
    lines += [f"warning: {w}" for w in cal.get("warnings", [])]
    return lines


def role_counts(rec: Any) -> dict[tuple[str, str], int]:
    """Tensors per (printed label, dtype), sorted. The label is the record's role, except that a ``weight``
    whose dtype is the activation type and not the weight type is printed as ``constant``: ORT quantizes
    initializers that are not weights of a Conv/MatMul/Gemm (scalar Mul/Add operands) with the activation
    type. The record's roles themselves are unchanged."""
    cfg = rec.config or {}
    wtype, atype = cfg.get("weight_type"), cfg.get("activation_type")
    counts: dict[tuple[str, str], int] = {}
    for t in rec.tensors:
        label = t.role
        if t.role == "weight" and wtype and atype and wtype != atype and t.dtype == atype:
            label = "constant"
        counts[(label, t.dtype)] = counts.get((label, t.dtype), 0) + 1
    return dict(sorted(counts.items()))

"""``quantkit fallback``: keep the fewest nodes of an 8-bit model in float (or 16 bits) until its agreement
with FP32 reaches a target on every reference set; time the result against FP32."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from .flags import add_model_flag

HELP = "precision fallback: promote the fewest nodes until agreement with FP32 reaches the target on every reference set"

#: Flags that override one field of the params ``fallback`` section (no defaults here: they live in FallbackConfig).
OVERRIDES: dict[str, tuple[str, Any, str]] = {
    "target": ("--target", float, "agreement with FP32 the worst reference set must reach, in (0, 1]"),
    "strategy": ("--strategy", str, "float: promoted nodes stay float; int16: their activations get 16 bits"),
    "search": ("--search", str, "bisect: task-metric bisection of prefix, suffix (head) and island windows of the node order; "
                                "sqnr: local-SQNR ranking"),
    "pick": ("--pick", str, "cost: the candidate with the fewest float nodes and Q/DQ edges; latency: the fastest, timed (needs timings)"),
    "prune": ("--prune", int, "bisect: blocks of the window tried back in 8 bits (0: off)"),
    "max_kept": ("--max-kept", int, "most nodes (bisect) / activations (sqnr) promoted"),
    "max_reference_images": ("--max-reference-images", int, "use the first N images of each reference set"),
    "holdout": ("--holdout", float, "share of each reference set held out of the search; the written figure is measured on it (0: in-sample)"),
}
CHOICES = {"strategy": ["float", "int16"], "search": ["bisect", "sqnr"], "pick": ["cost", "latency"]}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("fallback", help=HELP, description=HELP + ". Settings come from the 'fallback' section of --params "
                              "(FallbackConfig; flags override single fields); the agreement metric is the task adapter's primary one (params "
                              "'models.NAME.task' / 'task': pixel IoU of the binarized map for db_text, box F1 vs FP32 for box_detector). Start from a quantize output (--base) or quantize first "
                              "(--calibration-set, options from --quantize-section).")
    p.add_argument("intake", help="intake folder (model.onnx + export_note.json)")
    p.add_argument("--reference-set", required=True, action="extend", nargs="+", metavar="DIR",
                   help="reference sets the metric is measured on, one per condition (the worst set counts); a folder of sets stands for each of them")
    p.add_argument("--base", metavar="DIR", help="quantize output to start from (model_int8.onnx + record.json; its ranges are reused)")
    p.add_argument("--calibration-set", metavar="DIR", help="without --base: quantize on this set first; with recovery: the images it reads")
    p.add_argument("--deployed", metavar="DIR", help="deployed quantize output, timed beside the result")
    p.add_argument("--params", metavar="YAML", help="params file ('fallback', 'task' and the quantize section)")
    add_model_flag(p)
    p.add_argument("--section", default="fallback", help="params section of the fallback settings")
    p.add_argument("--quantize-section", default="quantize", help="params section of the quantization options (without --base)")
    p.add_argument("--engine", choices=["ort", "nncf"], help="override quantize.engine (without --base); nncf: NNCF's "
                   "quantize_with_accuracy_control chooses what returns to float (max drop 1 - target), the nncf extra")
    for field, (flag, typ, text) in OVERRIDES.items():
        kw: dict[str, Any] = {"choices": CHOICES[field]} if field in CHOICES else {}
        p.add_argument(flag, dest=field, type=typ, default=None, help=text + " (overrides the params value)", **kw)
    p.add_argument("--out", required=True, metavar="DIR", help="output folder: model_int8.onnx, record.json, fallback.json (written whole or not at all)")
    p.add_argument("--json", action="store_true", help="print fallback.json")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> Any:
    """Params ``fallback`` section (``models.<model>.fallback`` when ``--model`` has one; defaults without
    --params) + flag overrides -> FallbackConfig."""
    from ..config import config_from_params, has_section, load_params
    from ..quantize.fallback.config import FallbackConfig

    model = getattr(args, "model", None)
    if args.params is not None and args.section != "fallback" and not has_section(args.params, args.section, model=model):
        load_params(args.params, args.section)  # a section named on the command line must exist: one line naming it
    config = config_from_params(FallbackConfig, args.params, args.section, model=model)
    overrides = {k: getattr(args, k) for k in OVERRIDES if getattr(args, k) is not None}
    config = config.replace(**overrides) if overrides else config
    if config.target is None:  # the model's green line (AgreementPolicy.fallback_target): one number, stated once
        from ..report.config import ReportConfig

        config = config.with_target(config_from_params(ReportConfig, args.params, "report", model=model).policy().fallback_target)
    return config


def _metric(args: argparse.Namespace) -> Any:
    """The task adapter's primary agreement metric of ``args.intake``'s model (:func:`.flags.task_agreement_metric`)."""
    from .flags import task_agreement_metric

    return task_agreement_metric(args.params, getattr(args, "model", None), args.intake)


def run(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..quantize.fallback import precision_fallback

    from ..calibset.model_sets import set_folders

    config = build_config(args)
    args.reference_set = [str(x) for r in args.reference_set for x in set_folders(r)]  # a folder of sets: each of them
    qconfig = None
    if args.base is None:
        if not args.calibration_set:
            raise ConfigError("fallback: pass --base DIR (a quantize output) or --calibration-set DIR to quantize on")
        from .quantize import build_config as quantize_config

        qconfig = quantize_config(argparse.Namespace(params=args.params, section=args.quantize_section, dynamic=False, method=None,
                                                     chunk_size=None, max_images=None, placement=None, target=None, engine=args.engine,
                                                     model=getattr(args, "model", None)))
    elif args.engine is not None:
        raise ConfigError("--engine applies when fallback quantizes (--calibration-set); drop it, or drop --base")
    if not sys.stderr.isatty():  # no progress bar: one log line per round instead
        logging.getLogger("quantkit.quantize.fallback").setLevel(logging.INFO)
    if qconfig is not None and qconfig.engine == "nncf":
        from ..quantize.fallback.accuracy_control import nncf_accuracy_control

        r = nncf_accuracy_control(args.intake, config, qconfig, reference_sets=args.reference_set, calibration_set=args.calibration_set,
                                  out=args.out, metric=_metric(args), deployed=args.deployed)
    else:
        r = precision_fallback(args.intake, config, reference_sets=args.reference_set, out=args.out, base=args.base, quantize_config=qconfig,
                               calibration_set=args.calibration_set, metric=_metric(args), deployed=args.deployed)
    ok = (r.met or not config.fail_if_missed) and not (config.fail_if_slower and r.slower_than_fp32)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2, sort_keys=True))
        return 0 if ok else 1
    sys.stdout.write(render(r, args.out))
    return 0 if ok else 1


def _interval(ci: Any, confidence: float) -> str:
    return f" ({100 * confidence:.0f}% interval {ci[0]:.4f} to {ci[1]:.4f})" if ci is not None else ""


def render(r: Any, out: str) -> str:
    """The human summary of a :class:`~quantkit.quantize.fallback.FallbackResult`."""
    held = r.heldout_images > 0
    where = "held-out images" if held else "every image, in-sample"
    lines = [f"wrote {out}/model_int8.onnx, record.json and fallback.json ({r.search}, {r.strategy}"
             + (f", {r.window_kind} window" if r.window_kind else "") + ")",
             f"{r.metric} vs FP32, worst reference set, on {where}: {r.metric_before:.4f} -> {r.metric_after:.4f}"
             f"{_interval(r.metric_after_ci, r.confidence)}, target {r.target}: {'met' if r.met else 'NOT met'} after {len(r.rounds)} rounds"
             + (f" ({r.seconds['search']:.0f} s search)" if 'search' in r.seconds else "")]
    if held:
        lines.append(f"split (fallback.holdout {r.holdout}, seed {r.seed}): {r.split_words()}; the search measured candidates "
                     "on the search images only")
    else:
        lines.append("no held-out images (fallback.holdout 0): these figures are measured on the images the search chose on, so they "
                     "are optimistic")
    figs = {f.name: f for f in r.figures}
    for name, before in r.metric_before_per_set.items():
        f = figs.get(name)
        extra = (f"{_interval(f.ci, r.confidence)}; {f.search:.4f} on the {f.search_images} search images" if f is not None and held
                 else _interval(f.ci, r.confidence) if f is not None else "")
        lines.append(f"  {name:<24} {before:.4f} -> {r.metric_after_per_set.get(name, float('nan')):.4f}{extra}")
    for s in r.recovery:
        lines.append(f"recovery {s.name}: {', '.join(f'{k} {v}' for k, v in s.detail.items() if not isinstance(v, (list, dict)))}"
                     + (f"; metric {s.metric_before:.4f} -> {s.metric_after:.4f}" if s.metric_before is not None and s.metric_after is not None else ""))
    what = "nodes kept in float" if r.strategy == "float" else "nodes with 16-bit activations"
    lines.append(f"{len(r.kept)} {what} in {len(r.islands)} islands ({r.transitions} Q/DQ transitions)"
                 + (f": {', '.join(r.kept_names[:8])}{' ...' if len(r.kept) > 8 else ''}" if r.kept else ""))
    for row in r.latency:
        dep = f", deployed {row.deployed_ms:.1f} ms ({row.speedup_vs_deployed:.2f}x)" if row.deployed_ms is not None else ""
        lines.append(f"latency {row.runtime} {row.threads} thread{'s' if row.threads > 1 else ''} (median of {row.repeats}, interleaved): "
                     f"FP32 {row.fp32_ms:.1f} ms, all-8-bit {row.base_ms:.1f} ms, result {row.candidate_ms:.1f} ms "
                     f"({row.speedup_vs_fp32:.2f}x FP32){dep}")
    for where in r.slower_than_fp32:
        lines.append(f"warning: the result is not faster than FP32 on {where}")
    if not r.met and r.met_on_search:
        lines.append(f"target NOT met on the held-out images: {r.metric_after:.4f} < {r.target}, although the search images gave "
                     f"{min(f.search for f in r.figures):.4f}; the search's own figure was optimistic. The model was written; "
                     "try more reference images, a calibration set covering every condition, or a lower target")
    elif not r.met:
        lines.append("target NOT met: no candidate reached it on the search images; the one with the highest metric was written; "
                     "try a calibration set covering every condition ('quantkit calibset compose'), recovery options, or a lower target")
    return "\n".join(lines) + "\n"

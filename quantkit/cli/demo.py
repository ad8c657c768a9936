"""``quantkit demo``: the embedded demo's model and image sets."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="embedded demo: copy the PP-OCR detector, render demo image sets",
                              description="Embedded demo: the PP-OCRv4 text detector shipped by rapidocr-onnxruntime and "
                                          "deterministic photo-realistic image sets rendered from params.yaml (demo section).")
    sub = p.add_subparsers(dest="demo_command", metavar="ACTION")
    sub.required = True

    m = sub.add_parser("model", help="copy a model shipped in a PyPI wheel to --out (atomically)")
    m.add_argument("--name", default="ppocr_det", help="ppocr_det (default), ppocr_rec, ppocr_cls or ddddocr_det")
    m.add_argument("--out", required=True, help="destination .onnx path, e.g. models/ppocr_det.onnx")
    m.add_argument("--json", action="store_true", help="print the result as JSON")
    m.set_defaults(func=_model)

    s = sub.add_parser("make-set", help="render demo set NAME (params demo.sets.NAME) into its out folder",
                       description="Render images/*.jpg + manifest.json (with ground-truth text boxes) + stats.csv, "
                                   "deterministically (same params, same bytes), into the set's `out` folder atomically.")
    s.add_argument("--params", default="params.yaml", help="params file with a `demo` section (default: params.yaml)")
    s.add_argument("--name", required=True, help="key of demo.sets in the params file, e.g. calib-cam1-day")
    s.add_argument("--out", default=None, help="override the set's `out` folder")
    s.add_argument("--count", type=int, default=None, help="override the number of images (for quick runs)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=_make_set)

    f = sub.add_parser("make-fleet", help="render the demo fleet (params fleet.demo) and its planted truth",
                       description="Render cameras on several sites over days, with planted events (refocus, night-shift lighting, "
                                   "exposure drift, camera swap) whose truth is written to fleet.demo.truth; deterministic.")
    f.add_argument("--params", default="params.yaml", help="params file with a `fleet.demo` section (default: params.yaml)")
    f.add_argument("--json", action="store_true", help="print the result as JSON")
    f.set_defaults(func=_make_fleet)

    c = sub.add_parser("check", help="accuracy of an FP32 model against a labelled set's ground truth",
                       description="Run a model on a labelled (demo) set and compare its decisions with the labels through "
                                   "its task adapter (params models.NAME.task / task, and its intake preprocessing).")
    c.add_argument("set", help="set folder with manifest.json (labels)")
    c.add_argument("--params", default="params.yaml", help="params file with the model's task and intake sections (default params.yaml)")
    c.add_argument("--model", default="ppocr_det", help="name under params 'models' (default ppocr_det)")
    c.add_argument("--file", help="the FP32 model file (default: params models.NAME.file)")
    c.add_argument("--limit", type=int, default=None, help="only the first N images")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=_check)


def _model(args: argparse.Namespace) -> int:
    from ..demo import copy_model

    res = copy_model(args.out, args.name)
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(f"{res.out}  {res.bytes} bytes  sha256 {res.sha256}")
    return 0


def _make_set(args: argparse.Namespace) -> int:
    from ..demo.synth import load_demo_config, make_set

    cfg = load_demo_config(args.params)
    if args.count is not None and args.name in cfg.sets:
        cfg = cfg.replace(sets={**cfg.sets, args.name: cfg.sets[args.name].replace(count=args.count)})
    res = make_set(cfg, args.name, out=args.out)
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(f"{args.name} (set {res.name!r}): {res.count} images, {res.text_boxes} text boxes -> {res.out}  (set_id {res.set_id[:12]})")
    return 0


def _make_fleet(args: argparse.Namespace) -> int:
    from ..demo.fleet import render_fleet
    from ..fleet.config import load_fleet_config

    res = render_fleet(load_fleet_config(args.params).demo)
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(f"demo fleet: {res.cameras} cameras, {res.images} images -> {res.out} (truth {res.truth})")
    return 0


def _check(args: argparse.Namespace) -> int:
    from ..calibset import CalibrationSet
    from ..config import config_from_params, has_section, load_params
    from ..demo.check import check_accuracy
    from ..intake import IntakeConfig
    from ..tasks import TaskConfig

    task = config_from_params(TaskConfig, args.params, "task", model=args.model).make()
    pre = config_from_params(IntakeConfig, args.params, "intake", model=args.model).preprocessing if has_section(
        args.params, "intake", model=args.model) else None
    model = args.file or load_params(args.params, f"models.{args.model}").get("file", f"models/{args.model}.onnx")
    res = check_accuracy(CalibrationSet.load(args.set, verify=True), model, task, preprocessing=pre, limit=args.limit)
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(f"{args.set}: {res.task} on {res.images} images: " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in res.metrics.items()))
    return 0

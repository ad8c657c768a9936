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

    m = sub.add_parser("model", help="copy the packaged PP-OCRv4 detector to --out (atomically)")
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

    c = sub.add_parser("check", help="recall/precision of the FP32 detector against a labelled set's text boxes",
                       description="Run the DB text detector on a set with labels.text_boxes (a demo set) and match its "
                                   "boxes to the ground truth (polygon IoU >= --iou), to confirm the text is detectable.")
    c.add_argument("set", help="set folder with manifest.json (labels.text_boxes)")
    c.add_argument("--model", default="models/ppocr_det.onnx", help="FP32 detector (default models/ppocr_det.onnx)")
    c.add_argument("--limit", type=int, default=None, help="only the first N images")
    c.add_argument("--thresh", type=float, default=0.3, help="binarization threshold (default 0.3)")
    c.add_argument("--box-thresh", type=float, default=0.5, help="box score threshold (default 0.5)")
    c.add_argument("--unclip-ratio", type=float, default=1.6, help="DB unclip ratio (default 1.6)")
    c.add_argument("--iou", type=float, default=0.5, help="match IoU (default 0.5)")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=_check)


def _model(args: argparse.Namespace) -> int:
    from ..demo import copy_model

    res = copy_model(args.out)
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
    from ..demo.check import detector_recall

    res = detector_recall(CalibrationSet.load(args.set), args.model, limit=args.limit, thresh=args.thresh,
                          box_thresh=args.box_thresh, unclip_ratio=args.unclip_ratio, iou=args.iou)
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    else:
        print(f"{args.set}: recall {res.recall:.3f}  precision {res.precision:.3f}  "
              f"({res.matched}/{res.gt_boxes} boxes matched, {res.detections} detections, {res.images} images, IoU>={res.iou})")
    return 0

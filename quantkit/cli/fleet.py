"""``quantkit fleet``: register, score (on Dask), check and report a fleet of cameras."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._overwrite import FileKind, json_with_keys, text_with


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fleet", help="per-camera drift and INT8 agreement over a fleet's site images (Dask)",
                              description="A fleet of cameras: build or check the image manifest, score every image on Dask "
                                          "(statistics, FP32 and INT8 decisions), judge each camera against its own reference, "
                                          "and write the HTML report. Options: params.yaml section 'fleet'.")
    sub = p.add_subparsers(dest="fleet_command", metavar="ACTION")
    sub.required = True

    r = sub.add_parser("register", help="build a manifest from a folder tree, or check a given manifest",
                       description="SOURCE a folder: walk it (--layout levels), write the manifest to --out. SOURCE a .parquet/.csv "
                                   "manifest: check it. Missing, unreadable and duplicate images are counted and named; exit 1 when any.")
    r.add_argument("source", type=Path, help="image tree root, or a manifest file to check")
    r.add_argument("--out", type=Path, help="manifest to write (.parquet, or .csv) when SOURCE is a folder")
    r.add_argument("--layout", default="{site}/{camera}/{date}", help="folder levels under SOURCE (default {site}/{camera}/{date})")
    r.add_argument("--verify", choices=["decode", "exists", "none"], default="decode", help="decode every image (default), only read it, or neither")
    r.add_argument("--json", action="store_true", help="print the check as JSON")
    r.set_defaults(func=_register)

    s = sub.add_parser("score", help="score every image of a manifest on Dask (resumable)",
                       description="One Dask task per camera x time window (paths only). Rows go to OUT/rows (Parquet, by camera and "
                                   "date), mergeable summaries to OUT/shards and OUT/summary.json. Shards already done are skipped.")
    s.add_argument("manifest", type=Path, help="fleet manifest (quantkit fleet register)")
    s.add_argument("--model", help="name under params 'models' to score (default: params fleet.model); its task adapter "
                                   "(models.NAME.task) reads the outputs and the folders below default to work/NAME/...")
    s.add_argument("--fp32", type=Path, help="intake folder (model.onnx + export_note.json) (default work/MODEL/intake)")
    s.add_argument("--quantized", type=Path, help="deployed quantized folder (default work/models/MODEL/targets/onnxruntime/quantize, the file chosen for ONNX "
                   "Runtime, where present; else work/models/MODEL/quantize/deployed)")
    s.add_argument("--thresholds", type=Path, help="deployed threshold set (default: that file's thresholds.json; else work/models/MODEL/thresholds/deployed.json)")
    s.add_argument("--calibration-set", type=Path, help="deployed calibration set (freezes the histogram edges; default: the "
                   "model's deployed set, params models.MODEL.sets)")
    s.add_argument("--params", type=Path, help="params.yaml; options from 'fleet.score' (the whole 'fleet' section is checked) "
                                                "and the model's task (models.NAME.task)")
    s.add_argument("--workers", type=int, help="embedded LocalCluster workers (0 = synchronous in this process; default one per core)")
    s.add_argument("--scheduler", help="attach to a running Dask scheduler, e.g. tcp://HOST:8786, instead of starting one")
    s.add_argument("--ort-threads", type=int, help="ONNX Runtime intra-op threads per worker (default: the cores a worker owns)")
    s.add_argument("--out", type=Path, required=True, help="scores folder (must be on storage every worker can write)")
    s.add_argument("--run-info", type=Path, metavar="FILE",
                   help="where run.json goes (workers, timings, throughput: they differ between runs); default OUT/run.json. "
                        "The main job writes it to reports/machine/ so the DVC-tracked scores are the same bytes on every run")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=_score)

    c = sub.add_parser("check", help="judge each camera against its reference windows; exit 1 when an alert fires",
                       description="Per camera x window: image statistics against the camera's reference (thresholds derived per "
                                   "camera), INT8 agreement with FP32, detections per image, clipping; rollups per site and fleet; "
                                   "cameras ranked with since when and why. Exit 1 when a camera alerts (unless --exit-zero).")
    c.add_argument("scores", type=Path, help="scores folder (quantkit fleet score --out)")
    c.add_argument("--calibration-set", type=Path, help="the deployed calibration set the scores were made with (default: the "
                   "deployed set of params fleet.model, models.MODEL.sets)")
    c.add_argument("--params", type=Path, help="params.yaml; options from 'fleet.check'")
    c.add_argument("--truth", type=Path, help="planted-truth JSON (demo fleet) to score the alerts against")
    c.add_argument("--out", type=Path, help="write the check (JSON) here")
    c.add_argument("--metrics", type=Path, help="write flat DVC metrics (JSON) here")
    c.add_argument("--exit-zero", action="store_true", help="exit 0 even when an alert fires (pipelines that report instead)")
    c.add_argument("--json", action="store_true", help="print the check as JSON")
    c.set_defaults(func=_check)

    h = sub.add_parser("report", help="write the fleet report (one self-contained HTML file)")
    h.add_argument("check", type=Path, help="fleet check JSON (quantkit fleet check --out)")
    h.add_argument("--params", type=Path, help="params.yaml; options from 'fleet.report'")
    h.add_argument("--out", type=Path, required=True, help="HTML file to write, e.g. reports/fleet/index.html")
    h.set_defaults(func=_report)


# What each fleet command may replace (:func:`quantkit._overwrite.check_output_file`): the files an earlier run of the
# same command wrote. Here, not in quantkit.fleet, until the fleet writers check their outputs themselves.
SCORES_ENTRIES = frozenset({"rows", "shards", "edges.json", "summary.json", "run.json"})
"""What ``fleet score`` writes into its --out (see :mod:`quantkit.fleet.score`); hidden names are locks and temporaries."""


def _is_manifest(path: Path) -> bool:
    """A fleet manifest ``fleet register`` wrote: Parquet tagged ``quantkit: fleet manifest v1``, or CSV with its header."""
    from ..fleet.manifest import COLUMNS

    try:
        if path.suffix.lower() == ".csv":
            with open(path, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n") == ",".join(COLUMNS)
        import pyarrow.parquet as pq

        meta = pq.read_schema(path).metadata or {}
        return meta.get(b"quantkit", b"").startswith(b"fleet manifest")
    except Exception:  # unreadable, not Parquet, not text: not ours to replace
        return False


def _kinds() -> dict[str, FileKind]:
    import dataclasses

    from ..fleet.check import FleetCheck

    check_keys = {f.name for f in dataclasses.fields(FleetCheck)} | {"schema_version"}
    return {"manifest": FileKind("fleet manifest", _is_manifest),
            "run_info": FileKind("fleet score run info", json_with_keys(("scheduler", "ort_threads", "timing_s"))),
            "check": FileKind("fleet check", json_with_keys(("schema_version", "verdict", "cameras"), check_keys)),
            "metrics": FileKind("fleet metrics file", json_with_keys(("cameras", "cameras_alerting", "images_scored"))),
            "report": FileKind("fleet report page", text_with("<!DOCTYPE html>", "<title>Fleet report: "))}


def _check_scores_dir(out: Path, inputs: list[Any]) -> None:
    """--out of ``fleet score``: not an input, not another command's output, and holding only what score writes
    (it adds to and prunes an earlier scores folder instead of replacing it)."""
    from .._overwrite import check_not_input, check_not_output_dir
    from ..errors import InputFileError

    check_not_input(out, inputs)
    check_not_output_dir(out)
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in SCORES_ENTRIES and not p.name.startswith("."))
        if foreign:
            raise InputFileError(f"{out}: folder holds files quantkit fleet score did not write ({foreign[0]!r}); "
                                 "pass a new or empty --out, or an earlier scores folder")


def _register(args: argparse.Namespace) -> int:
    from .._overwrite import check_output_file
    from ..errors import InputFileError
    from ..fleet.manifest import check_manifest, load_manifest, register_tree

    if args.source.is_dir():
        if args.out is None:
            raise InputFileError(f"{args.source}: is a folder; pass --out MANIFEST.parquet to build a manifest from it")
        check_output_file(args.out, _kinds()["manifest"], inputs=[args.source])
        manifest, chk = register_tree(args.source, args.out, layout=args.layout, verify=args.verify)
        head = f"{manifest.path}: {len(manifest)} images, {manifest.frame['camera'].nunique()} cameras, {manifest.frame['site'].nunique()} sites"
    else:
        manifest = load_manifest(args.source)
        chk = check_manifest(manifest, verify=args.verify)
        head = f"{manifest.path}: {len(manifest)} images listed"
    if args.json:
        sys.stdout.write(json.dumps(chk.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write("\n".join([head, *("  " + line for line in chk.lines())]) + "\n")
    return 0 if chk.ok else 1


def _score(args: argparse.Namespace) -> int:
    from .._overwrite import check_output_file
    from ..config import config_from_params, has_section
    from ..fleet.config import load_fleet_config
    from ..fleet.score import score_fleet
    from ..tasks import TaskConfig

    fleet = load_fleet_config(args.params)
    cfg = fleet.score
    if args.workers is not None:
        cfg = cfg.replace(workers=args.workers)
    if args.ort_threads is not None:
        cfg = cfg.replace(ort_threads=args.ort_threads)
    model = args.model or fleet.model
    task = config_from_params(TaskConfig, args.params, "task", model=model).adapter if has_section(args.params, "task", model=model) else None
    work = Path("work/models") / model  # the pipeline's layout (dvc.yaml)
    if args.calibration_set is None:
        args.calibration_set = _deployed_calibration_set(args.params, model)
    from ..pipeline import deployed_files

    # the file chosen for ONNX Runtime (the fleet runs ONNX Runtime) where the main job made one
    dep, dep_t = deployed_files(work, chosen=deployed_files(work, chosen=True)[1].is_file())
    fp32, quantized = args.fp32 or work / "intake", args.quantized or dep
    thresholds = args.thresholds or dep_t
    inputs = [args.manifest, fp32, quantized, thresholds, args.calibration_set, args.params]
    _check_scores_dir(args.out, inputs)
    if args.run_info is not None:
        check_output_file(args.run_info, _kinds()["run_info"], inputs=inputs, flag="--run-info")
    try:
        res = score_fleet(args.manifest, fp32, quantized, thresholds, args.calibration_set, args.out, cfg,
                          scheduler=args.scheduler, task=task, run_info=args.run_info)
    except KeyboardInterrupt as e:  # score_fleet named the finished shards in e.kept; the same command line resumes
        e.resume = True  # type: ignore[attr-defined]
        raise
    if args.json:
        sys.stdout.write(json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        lost = f"; workers lost and their shards retried: {', '.join(res.workers_lost)}" if res.workers_lost else ""
        sys.stdout.write(f"{res.out}: {res.images} images in {res.shards} shards ({res.shards_skipped} already done), "
                         f"{res.scored} scored by FP32 and INT8, {res.errors} failed; {res.images_per_s:.1f} images/s{lost}\n")
    return 0


def _deployed_calibration_set(params: Any, model: str) -> Path:
    """The deployed calibration set of ``model`` (``models.<model>.sets``).

    Raises:
        ConfigError: no --params, or the model or its sets missing. InputFileError: the set is not registered.
    """
    from ..calibset.model_sets import model_sets
    from ..errors import ConfigError

    if params is None:
        raise ConfigError("pass --calibration-set DIR, or --params params.yaml to take the model's deployed calibration set")
    return model_sets(params, model).deployed_set("calibration")


def _check(args: argparse.Namespace) -> int:
    from .._io import atomic_write_json
    from .._overwrite import check_output_file
    from ..drift.advice import ACTIONS
    from ..fleet.check import check_fleet
    from ..fleet.config import load_fleet_config

    fleet = load_fleet_config(args.params)
    cfg = fleet.check
    if args.calibration_set is None:
        args.calibration_set = _deployed_calibration_set(args.params, fleet.model)
    inputs = [args.scores, args.calibration_set, args.params, args.truth]
    for path, kind, flag in ((args.out, "check", "--out"), (args.metrics, "metrics", "--metrics")):
        if path is not None:
            check_output_file(path, _kinds()[kind], inputs=inputs, flag=flag)
    from ..config import config_from_params
    from ..report.config import ReportConfig

    policy = config_from_params(ReportConfig, args.params, "report", model=fleet.model).policy(fleet_drop=cfg.agreement_drop)
    res = check_fleet(args.scores, args.calibration_set, cfg, truth=args.truth, policy=policy)
    if args.out:
        res.save(args.out)
    if args.metrics:
        atomic_write_json(args.metrics, res.metrics())
    if args.json:
        sys.stdout.write(json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        out = [res.verdict]
        for i, name in enumerate(res.ranked, 1):
            c = res.camera(name)
            badge = ACTIONS[c.action].badge if c.action in ACTIONS else c.action
            out.append(f"  {i:>2}. {c.camera} ({c.site}) {badge} since {(c.since or '')[:10]}: {'; '.join(c.reasons)}")
        if res.truth is not None:
            out.append(f"  planted events: alert precision {res.truth['precision']:.2f}, recall {res.truth['recall']:.2f}")
        sys.stdout.write("\n".join(out) + "\n")
    return 1 if res.alerting and not args.exit_zero else 0


def _report(args: argparse.Namespace) -> int:
    from .._overwrite import check_output_file
    from ..fleet.config import load_fleet_config
    from ..fleet.report import write_fleet_report

    check_output_file(args.out, _kinds()["report"], inputs=[args.check, args.params])
    res = write_fleet_report(args.check, args.out, load_fleet_config(args.params).report)
    sys.stdout.write(f"{res.path}: {res.cameras} cameras, {res.alerting} alerting ({res.bytes} bytes)\n")
    return 0

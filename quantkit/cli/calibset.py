"""``quantkit calibset``: register, list, show, diff and measure image sets."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._overwrite import FileKind


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibset", help="versioned image sets: register, list, show, diff, stats, compose",
                              description="A set is a folder: images/ + manifest.json (+ stats.csv). A changed set is a new "
                                          "version in a new folder; an existing manifest is never rewritten.")
    sub = p.add_subparsers(dest="calibset_command", metavar="ACTION")
    sub.required = True

    r = sub.add_parser("register", help="hash, decode and measure FOLDER/images/*, write manifest.json + stats.csv")
    r.add_argument("folder", help="set folder holding images/")
    r.add_argument("--name", required=True, help="set name, e.g. cam1-day")
    defaults = _defaults("register_set")
    r.add_argument("--kind", choices=("calibration", "reference", "site"), help=f"what the set is for (default {defaults['kind']})")
    r.add_argument("--camera", help=f"camera id (default {defaults['camera']})")
    r.add_argument("--lighting", help=f"lighting condition, e.g. day/night (default {defaults['lighting']})")
    r.add_argument("--site", help=f"site / line id (default {defaults['site']})")
    r.add_argument("--labels", type=Path, metavar="JSON",
                   help="ground truth: a JSON object {image file (images/0001.jpg): {labels}}; the keys each task reads: "
                        "db_text text_boxes, box_detector boxes, classifier class, ctc_text text, segmentation boxes")
    r.add_argument("--on-error", choices=("fail", "skip"),
                   help=f"unreadable image: fail (nothing written) or skip it (logged by name, left out); default {defaults['on_error']}")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(func=_register)

    ls = sub.add_parser("list", help="list registered sets under ROOT")
    ls.add_argument("root", nargs="?", default=".", help="folder to search (default .)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    sh = sub.add_parser("show", help="show one set's manifest summary (and check hashes with --verify)")
    sh.add_argument("folder", help="set folder")
    sh.add_argument("--verify", action="store_true", help="re-hash every image against the manifest")
    sh.add_argument("--images", action="store_true", help="also list the images")
    sh.add_argument("--json", action="store_true", help="print JSON")
    sh.set_defaults(func=_show)

    d = sub.add_parser("diff", help="images added, removed and changed from set A to set B")
    d.add_argument("a", help="older set folder")
    d.add_argument("b", help="newer set folder")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.set_defaults(func=_diff)

    st = sub.add_parser("stats", help="set-level image statistics (from stats.csv, or computed with --recompute)")
    st.add_argument("folder", help="set folder")
    st.add_argument("--recompute", action="store_true", help="decode the images again instead of reading stats.csv")
    st.add_argument("--per-image", action="store_true", help="print the per-image table instead of the summary")
    st.add_argument("--plot", default=None, metavar="PNG", help="also save histograms of each statistic to PNG")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_stats)

    c = sub.add_parser("compose", help="a new set from N images of each of several sets (e.g. day + night)",
                       description="Copy N images of each source set (spread evenly over its manifest order; all without :N) "
                                   "into DEST/images and register DEST; the manifest records the composition.")
    c.add_argument("dest", help="new set folder (must not exist)")
    c.add_argument("--from", dest="sources", action="extend", nargs="+", required=True, metavar="SET[:N]",
                   help="source set folder, optionally :N images, or a folder of sets (at most N of each); repeat for each source "
                        "(with --cover: the base set only)")
    c.add_argument("--cover", action="extend", nargs="+", metavar="DRIFT", default=None,
                   help="drift results (files or folders, e.g. work/drift): add, for each condition (camera, lighting) they flag, "
                        "the --pool set of that condition with the base's image count")
    c.add_argument("--pool", action="extend", nargs="+", metavar="SET", default=None,
                   help="with --cover: calibration sets to pick from (a folder of sets: each of them, e.g. a model's sets.calibration)")
    c.add_argument("--name", required=True, help="name of the new set, e.g. cam1-day+night")
    c.add_argument("--kind", choices=("calibration", "reference", "site"), help=f"what the set is for (default {_defaults('compose_set')['kind']})")
    c.add_argument("--json", action="store_true", help="print the new set as JSON")
    c.set_defaults(func=_compose)


def _defaults(function: str) -> dict[str, Any]:
    """Keyword defaults of a ``quantkit.calibset`` function: flags leave them to the library (one place)."""
    import inspect

    from .. import calibset

    return {k: v.default for k, v in inspect.signature(getattr(calibset, function)).parameters.items() if v.default is not inspect.Parameter.empty}


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, sort_keys=True, indent=2))


def _register(args: argparse.Namespace) -> int:
    from ..calibset import register_set

    given = {k: getattr(args, k) for k in ("kind", "camera", "lighting", "site", "on_error") if getattr(args, k) is not None}
    if args.labels is not None:
        given["labels"] = _labels(args.labels)
    res = register_set(args.folder, name=args.name, **given)
    if args.json:
        _print_json(res.to_dict())
    else:
        state = "registered" if res.written else "already registered (identical)"
        print(f"{res.set.root}: {state}, {res.set.count} images, set_id {res.set.set_id}")
        for f in res.skipped:
            print(f"  skipped unreadable {f}")
    return 0


def _labels(path: Path) -> dict[str, Any]:
    """``--labels``: ``{relative image file: labels mapping}``.

    Raises:
        InputFileError: the file is missing, not JSON, or not an object of objects."""
    from .._io import read_json
    from ..errors import InputFileError

    data = read_json(path, "labels file")
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputFileError(f"{path}: labels must be a JSON object {{\"images/0001.jpg\": {{\"class\": 3}}, ...}}")
    return data


def _list(args: argparse.Namespace) -> int:
    import sys

    from ..calibset import scan_sets

    listing = scan_sets(args.root)
    sets = listing.sets
    note = (f"skipped {len(listing.skipped)} malformed manifest(s) (first: {listing.skipped[0][0]}); "
            "see the warnings above or run 'quantkit calibset show FOLDER'") if listing.skipped else ""
    if args.json:  # stdout stays the list of sets; the skipped count goes to stderr
        _print_json([s.to_dict() for s in sets])
        if note:
            sys.stderr.write(note + "\n")
        return 0
    if not sets:
        print(f"no registered sets under {args.root}")
    else:
        import pandas as pd

        table = pd.DataFrame([{**s.to_dict(), "set_id": s.set_id[:12]} for s in sets])
        print(table[["path", "name", "kind", "camera", "lighting", "count", "set_id"]].to_string(index=False))
    if note:
        print(note)
    return 0


def _show(args: argparse.Namespace) -> int:
    from ..calibset import CalibrationSet

    cset = CalibrationSet.load(args.folder, verify=args.verify)
    if args.json:
        out = cset.to_dict()
        if args.images:
            out["images"] = [e.to_dict() for e in cset.entries]
        if args.verify:
            out["verified"] = True
        _print_json(out)
        return 0
    for k, v in cset.to_dict().items():
        print(f"{k:14s} {v}")
    if args.verify:
        print(f"{'verified':14s} all {cset.count} hashes match")
    if args.images:
        for e in cset.entries:
            n = 0 if e.text_boxes is None else len(e.text_boxes)
            print(f"  {e.file}  {e.width}x{e.height} {e.format} {e.bytes} B  {e.sha256[:12]}  {e.captured_at or '-'}  boxes={n}")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from ..calibset import CalibrationSet, diff_sets

    d = diff_sets(CalibrationSet.load(args.a), CalibrationSet.load(args.b))
    if args.json:
        _print_json(d.to_dict())
        return 0
    if d.identical:
        print(f"identical ({d.unchanged} images)")
    for tag, names in (("+", d.added), ("-", d.removed), ("~", d.changed)):
        for n in names:
            print(f"{tag} {n}")
    print(f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed, {d.unchanged} unchanged")
    return 0


def _parse_source(spec: str) -> tuple[str, int | None]:
    from ..errors import ConfigError

    path, sep, n = spec.rpartition(":")
    if not sep or not path:
        return spec, None
    if not n.isdigit():
        raise ConfigError(f"--from {spec}: expected SET or SET:N with N a whole number of images, e.g. calibration_sets/cam1-day:32")
    return path, int(n)


def _compose(args: argparse.Namespace) -> int:
    from ..calibset import compose_set
    from ..errors import ConfigError

    from ..calibset import CalibrationSet
    from ..calibset.model_sets import set_folders

    sources: list = []
    for path, n in map(_parse_source, args.sources):
        dirs = set_folders(path)
        if dirs == [Path(path)]:
            sources.append((path, n))
        else:  # a folder of sets: at most N of each
            sources += [(str(d), None if n is None else min(n, CalibrationSet.load(d).count)) for d in dirs]
    pool = [str(d) for p in args.pool or [] for d in set_folders(p)]
    notes = []
    if args.cover:
        from ..calibset.cover import covering_sources

        if len(sources) != 1:
            raise ConfigError("--cover: give one --from set (the deployed calibration set, e.g. calibration_sets/cam1-day:32); the rest comes from --pool")
        base, n = sources[0]
        n = None if n is None else min(n, CalibrationSet.load(base).count)  # the pipeline's images_per_set: at most that many
        cov = covering_sources((base, n), args.cover, pool)
        sources = list(cov.sources)
        notes = [f"drift flagged {name} ({cam}/{light})" for name, cam, light in cov.flagged] or ["drift flagged no site set: the base set alone"]
        notes += [f"warning: no --pool set covers {cam}/{light}; capture and register one" for cam, light in cov.uncovered]
    elif args.pool:
        raise ConfigError("--pool is used with --cover only; list the sources with --from")
    cset = compose_set(sources, args.dest, name=args.name, **({"kind": args.kind} if args.kind else {}))
    for n in notes:
        print(n, file=sys.stderr)
    if args.json:
        _print_json({**cset.to_dict(), "composition": (cset.generator or {}).get("composition")})
        return 0
    print(f"{cset.root}: registered {cset.count} images ({cset.camera}/{cset.lighting}), set_id {cset.set_id}")
    for c in (cset.generator or {}).get("composition", []):
        print(f"  {c['images']:>5} of {c['of']:<5} from {c['path']} ({c['name']}, id {c['set_id'][:12]})")
    return 0


PLOT_SOFTWARE = "quantkit calibset stats"
"""The PNG ``Software`` text of a ``--plot``: how a later ``--plot`` knows it may replace the file."""


def _is_stats_plot(path: Path) -> bool:
    """A PNG whose ``Software`` text is :data:`PLOT_SOFTWARE` (a plot this command wrote). Never raises."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    return head.startswith(b"\x89PNG\r\n\x1a\n") and b"Software\x00" + PLOT_SOFTWARE.encode() in head


PLOT_KIND = FileKind("calibration set statistics plot", _is_stats_plot)


def _stats(args: argparse.Namespace) -> int:
    from .._overwrite import check_output_file
    from ..calibset import CalibrationSet, compute_stats, plot_stats, summarize

    cset = CalibrationSet.load(args.folder)
    if args.plot:
        check_output_file(args.plot, PLOT_KIND, inputs=[args.folder], flag="--plot")  # before decoding the images again
    frame = compute_stats(cset.paths(), root=cset.root) if args.recompute else cset.stats()
    if args.plot:
        import io

        from .._io import atomic_write_bytes

        buf = io.BytesIO()
        plot_stats({cset.name: frame}).savefig(buf, format="png", dpi=80, metadata={"Software": PLOT_SOFTWARE})
        atomic_write_bytes(args.plot, buf.getvalue())
    table = frame if args.per_image else summarize(frame).reset_index()
    if args.json:
        _print_json(json.loads(table.to_json(orient="records")))
    else:
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0

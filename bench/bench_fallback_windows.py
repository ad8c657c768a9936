"""Issue 32 item 5: the fallback's window search and held-out figure beside the prefix-only search, in one run.

Three runs of :func:`quantkit.quantize.fallback.precision_fallback` on the same intake, base and reference sets, one
after the other in this process (JSON lines on stdout, one per run, then a side-by-side table):

* ``prefix``: the search before issue 32 item 5: the shortest prefix by exact bisection, then pruning, the figure
  measured on the images it searched on (``holdout: 0``). Emulated here by replacing the window search with
  :func:`quantkit.quantize.fallback.search.bisect_window` alone, with a ``RESOLUTION`` that bisects to the node.
* ``windows in-sample``: prefix, suffix (head) and island windows, ``holdout: 0``: the same images as ``prefix``, so
  the difference is the search's alone.
* ``windows held-out``: the default: the search on one part of each set, the written figure (with its interval) on
  the other part.

Per run: candidates built (rounds), images the search evaluated, wall seconds of the whole call, float nodes,
islands, the window, the search's figure (worst set, on the images it chose on) and the written figure. Wall time
on a shared machine varies from run to run: compare rounds and images first.

Usage::

    python bench/bench_fallback_windows.py INTAKE --base QUANT_DIR --reference-set DIR [DIR ...] \\
        [--params params.yaml --model NAME] [--target 0.96] [--calibration-set DIR]
    python bench/bench_fallback_windows.py --tiny    # the head-only detector of tests/test_fallback_windows.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock


def _prefix_only(names, probe, *, limit, full_meets, narrow, cost):  # the search before: prefix bisection only
    from quantkit.quantize.fallback.search import bisect_window

    w = bisect_window(names, probe, limit=limit, full_meets=full_meets, find_start=narrow)
    return [w] if w else []


def _run(label: str, intake: Path, config, metric, refs, base: Path, calibration_set, out: Path) -> dict:
    from quantkit.quantize.fallback import precision_fallback

    t0 = time.perf_counter()
    if label == "prefix":
        with mock.patch("quantkit.quantize.fallback.run.window_search", _prefix_only), \
                mock.patch("quantkit.quantize.fallback.search.RESOLUTION", 10**9):
            r = precision_fallback(intake, config.replace(holdout=0.0), reference_sets=refs, out=out, base=base, metric=metric,
                                   calibration_set=calibration_set)
    else:
        cfg = config.replace(holdout=0.0) if label == "windows in-sample" else config
        r = precision_fallback(intake, cfg, reference_sets=refs, out=out, base=base, metric=metric, calibration_set=calibration_set)
    seconds = time.perf_counter() - t0
    return {"run": label, "rounds": len(r.rounds), "images_searched": sum(x.images for x in r.rounds), "seconds": round(seconds, 1),
            "float_nodes": len(r.kept), "islands": len(r.islands), "window": r.window, "window_kind": r.window_kind,
            "search_figure": round(min(f.search for f in r.figures), 4), "written_figure": round(r.metric_after, 4),
            "written_on": "held-out" if r.heldout_images else "in-sample", "interval": r.metric_after_ci, "met": r.met,
            "split": r.split_words() if r.heldout_images else ""}


def _tiny(root: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_fallback_windows import FAST, SIZE, _metric, make_head_detector
    from test_quantize_fixtures import make_set

    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.fallback import FallbackConfig

    intake, cset = make_head_detector(root / "intake"), make_set(root / "set", 8, size=SIZE)
    quantize(intake, StaticQuantConfig(), out=root / "base", calibration_set=cset)
    return intake, root / "base", [cset], FallbackConfig.from_dict({**FAST, "target": 0.9, "timings": False}), _metric(), None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("intake", nargs="?")
    ap.add_argument("--tiny", action="store_true", help="the head-only detector of tests/test_fallback_windows.py")
    ap.add_argument("--base")
    ap.add_argument("--reference-set", nargs="+", default=[])
    ap.add_argument("--calibration-set")
    ap.add_argument("--params")
    ap.add_argument("--model")
    ap.add_argument("--target", type=float)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fallback-") as tmp:
        root = Path(tmp)
        if args.tiny:
            intake, base, refs, config, metric, cset = _tiny(root)
        else:
            if not (args.intake and args.base and args.reference_set):
                ap.error("give INTAKE, --base and --reference-set (or --tiny)")
            from quantkit.cli.fallback import OVERRIDES, _metric, build_config

            ns = argparse.Namespace(params=args.params, section="fallback", model=args.model, intake=args.intake,
                                    **{k: None for k in OVERRIDES})
            config = build_config(ns).replace(timings=False)
            config = config.replace(target=args.target) if args.target else config
            intake, base, refs, metric, cset = Path(args.intake), Path(args.base), args.reference_set, _metric(ns), args.calibration_set
        rows = []
        for i, label in enumerate(("prefix", "windows in-sample", "windows held-out")):
            rows.append(_run(label, intake, config, metric, refs, base, cset, root / f"out{i}"))
            print(json.dumps(rows[-1]), flush=True)
    keys = ["rounds", "images_searched", "seconds", "float_nodes", "islands", "window", "search_figure", "written_figure", "written_on",
            "interval", "met"]
    print(f"{'':<18}" + "".join(f"{r['run']:>22}" for r in rows))
    for k in keys:
        print(f"{k:<18}" + "".join(f"{str(r[k]):>22}" for r in rows))
    print(rows[-1]["split"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


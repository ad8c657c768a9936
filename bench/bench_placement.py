"""Q/DQ placement recipes side by side on ONNX Runtime and OpenVINO: latency (interleaved, one run) and agreement with FP32.

For each model folder ``WORK/<model>`` (``intake/`` and a static record ``quantize/ort/`` quantized with the ``ort``
placement), INT8 variants are built from that one record's calibrated ranges (no calibration here,
:func:`quantkit.quantize.quantize_with_ranges`), each a placement change on the way from ORT's recipe to ``openvino``:

* ``ort``: the record's own file (ORT's placement: every op type, outputs too);
* ``conv+outputs``: Q/DQ on Conv/ConvTranspose/Gemm/MatMul only, their outputs quantized too (a pair between each Conv
  and its activation), symmetric per-channel weights;
* ``openvino``: the same, no output quantized (Conv -> activation chain left whole, graph outputs float): the
  ``openvino`` recipe (called ``conv-inputs`` in the first runs);
* ``openvino-eltwise``: ``openvino`` plus residual Add/Mul on two integer inputs (measured slower, not kept);
* with ``--nncf SET`` (and NNCF installed, the ``nncf`` extra): NNCF's files, quantized here on that calibration set by
  ``quantize.engine: nncf`` (:mod:`quantkit.quantize.nncf_engine`; same images and preprocessing as ours): ``nncf``
  (the default config: NNCF's ``mixed`` preset, its int8 activation pairs rewritten as uint8 on the same grid) and
  ``nncf-int8`` (NNCF's own activation types, the file NNCF writes; OpenVINO 2026.4 miscomputes its int8 pairs after
  a Concat);
* each ``--extra MODEL:LABEL=PATH`` as given.

Every model of one thread count is timed in ONE interleaved loop (:func:`quantkit.runtimes.latency.interleaved_latency`:
each repeat runs every entry once, rotating the order; medians), ORT sessions with spinning off: FP32 on ORT (level
``all``), FP32 on OpenVINO at its default precision (``ov-default``, bf16 on CPUs with AVX-512 BF16 / AMX) and f32
pinned (``ov-f32``), and each INT8 variant on ORT and on OpenVINO (default precision, what a user compiling the file
without options gets). Agreement: the task adapter's primary metric (params ``models.<model>.task``) of each runtime's
outputs against ORT's FP32 outputs, worst reference set, on the first ``--agreement-images`` images of each set.

Usage::

    python bench/bench_placement.py --work /tmp/spd/work --params /tmp/spd/params.yaml \\
        --reference-set /tmp/spd/reference_sets/cam1-day --reference-set /tmp/spd/reference_sets/cam1-night \\
        --models ppocr_det ddddocr_det --threads 1 2 --repeats 15 --out bench/results/placement.json \\
        --nncf /tmp/spd/calibration_sets/cam1-day
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from quantkit.quantize.placement import OPENVINO, OPENVINO_ELTWISE, PlacementRecipe, register_placement  # noqa: E402

CONV_OPS = OPENVINO.op_types
RECIPES = {
    "conv+outputs": PlacementRecipe("bench-conv-outputs", op_types=CONV_OPS, quantize_outputs=True, per_channel_weights=True,
                                    symmetric_weights=True, activation_type="uint8"),
    "openvino": OPENVINO,
    "openvino-eltwise": OPENVINO_ELTWISE,
}
TARGETS = {("openvino", 1): 1.6, ("openvino", 2): 1.6, ("onnxruntime", 1): 1.5, ("onnxruntime", 2): 1.3}
"""Issue 32's bars: the candidate vs the runtime's best float run (OpenVINO: its default precision; ORT: level all)."""


def _cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    isa = [f for f in ("avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16") if f in flags]
    return f"{name} ({', '.join(isa) or 'no VNNI/BF16/AMX'}, {len([ln for ln in text.splitlines() if ln.startswith('processor')])} CPUs)"


def build_variants(intake: Path, base: Path, dest: Path) -> dict[str, Path]:
    """The INT8 files of each placement, from ``base``'s ranges (:func:`quantkit.quantize.quantize_with_ranges`)."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize import StaticQuantConfig, quantize_with_ranges

    rec = CalibrationRecord.load(base)
    cfg = StaticQuantConfig.from_dict(rec.config)
    out = {"ort": base / "model_int8.onnx"}
    for label, recipe in RECIPES.items():
        register_placement(recipe)
        quantize_with_ranges(base, intake, cfg.replace(placement=recipe.name, per_channel=True), out=dest / label)
        out[label] = dest / label / "model_int8.onnx"
    return out


NNCF_VARIANTS = {"nncf": {}, "nncf-int8": {"activation_type": "int8"}}
"""NNCF's files ``--nncf`` builds: label -> ``quantize`` fields beside ``engine: nncf, placement: nncf``."""


def build_nncf(intake: Path, calibration_set: Path, dest: Path) -> dict[str, Path]:
    """NNCF's INT8 files of :data:`NNCF_VARIANTS` (``quantize.engine: nncf``), or none when nncf is not installed."""
    from quantkit.quantize import StaticQuantConfig, quantize

    try:
        import nncf  # noqa: F401
    except ImportError:
        sys.stderr.write("--nncf: nncf is not installed (pip install 'quantkit[nncf]'); NNCF's files left out\n")
        return {}
    out = {}
    for label, fields in NNCF_VARIANTS.items():
        quantize(intake, StaticQuantConfig(engine="nncf", placement="nncf", **fields), out=dest / label, calibration_set=calibration_set)
        out[label] = dest / label / "model_int8.onnx"
    return out


def _runner(runtime: str) -> Any:
    from quantkit.runtimes.latency import FLOAT_RUNS, RUNTIMES

    return {"ort": RUNTIMES["onnxruntime"], "ov-f32": RUNTIMES["openvino"], "ov-default": FLOAT_RUNS["openvino"]["fp32-default"]}[runtime]


def agreement(entries: dict[str, tuple[Path, str]], refs: Any, metric: Any) -> dict[str, dict[str, float]]:
    """Metric of each entry's outputs against ORT's FP32 outputs (``refs``), per reference set name."""
    res = {}
    for label, (path, runtime) in entries.items():
        r = _runner(runtime)(path, 2)
        r.activate()
        try:
            res[label] = {s.name: round(metric(ref, [r.infer({refs.input_name: x}) for x in xs]), 4)
                          for s, xs, ref in zip(refs.sets, refs.feeds, refs.fp32)}
        finally:
            r.deactivate()
    return res


def bench_model(name: str, work: Path, params: Path, ref_sets: list[Path], threads: list[int], repeats: int, warmup: int,
                images: int, tmp: Path, extra: dict[str, Path] | None = None, only: list[str] | None = None,
                nncf_set: Path | None = None) -> dict[str, Any]:
    from quantkit.config import config_from_params
    from quantkit.modelio import load_model
    from quantkit.quantize.engine import load_intake
    from quantkit.quantize.fallback.candidates import load_references
    from quantkit.quantize.fallback.metric import agreement_metric
    from quantkit.runtimes.latency import interleaved_latency
    from quantkit.tasks import TaskConfig

    intake = work / name / "intake"
    model_path, _, note = load_intake(intake)
    variants = {**build_variants(intake, work / name / "quantize" / "ort", tmp / name),
                **(build_nncf(intake, nncf_set, tmp / name) if nncf_set is not None else {}), **(extra or {})}
    entries: dict[str, tuple[Path, str]] = {"fp32 ort": (model_path, "ort"), "fp32 ov-default": (model_path, "ov-default"),
                                            "fp32 ov-f32": (model_path, "ov-f32")}
    for v, p in variants.items():
        entries[f"{v} ort"] = (p, "ort")
        entries[f"{v} ov-default"] = (p, "ov-default")
    if only:
        entries = {k: v for k, v in entries.items() if k in only}
    task = config_from_params(TaskConfig, params, "task", model=name).make().with_model(load_model(model_path))
    refs = load_references(ref_sets, note, model_path, images)
    agree = agreement(entries, refs, agreement_metric(task))
    feeds = [{refs.input_name: x} for xs in refs.feeds for x in xs[:2]]
    rows = []
    for t in threads:
        got = interleaved_latency({k: p for k, (p, _) in entries.items()}, feeds, threads=t, repeats=repeats, warmup=warmup,
                                  label_factories={k: _runner(rt) for k, (_, rt) in entries.items()})
        ms = {k: statistics.median(x.runs_ms) for k, x in got.items()}
        for k, (_, rt) in entries.items():
            base = ms.get("fp32 ort") if rt == "ort" else ms.get("fp32 ov-default")
            rows.append({"model": name, "threads": t, "entry": k, "median_ms": round(ms[k], 2),
                         "vs_runtime_fp32": round(base / ms[k], 3) if base else None, "agreement": agree[k]})
    return {"model": name, "metric": agreement_metric(task).description if hasattr(agreement_metric(task), "description") else "",
            "variants": {k: str(p) for k, p in variants.items()}, "rows": rows}


def render(results: list[dict[str, Any]], cpu: str, repeats: int) -> str:
    lines = [f"CPU: {cpu}; interleaved medians of {repeats} runs per entry; speed-up vs the same runtime's FP32 "
             "(ORT: level all; OpenVINO: its default precision); agreement = task primary metric vs ORT FP32, per reference set"]
    for res in results:
        lines.append(f"\n{res['model']} ({res['metric']})")
        ts = sorted({r["threads"] for r in res["rows"]})
        sets = list(res["rows"][0]["agreement"])
        head = f"  {'entry':<24}" + "".join(f" {f'{t} thr ms':>9} {'x':>6}" for t in ts) + "".join(f" {s[:14]:>14}" for s in sets)
        lines.append(head)
        x = lambda v: f"{v:>5.2f}x" if v is not None else f"{'-':>6}"  # noqa: E731
        for entry in dict.fromkeys(r["entry"] for r in res["rows"]):
            rs = {r["threads"]: r for r in res["rows"] if r["entry"] == entry}
            lines.append(f"  {entry:<24}" + "".join(f" {rs[t]['median_ms']:>9.1f} {x(rs[t]['vs_runtime_fp32'])}" for t in ts)
                         + "".join(f" {rs[ts[0]]['agreement'][s]:>14.4f}" for s in sets))
        for (rt, t), bar in sorted(TARGETS.items()):
            entry = "openvino ov-default" if rt == "openvino" else "ort ort"
            r = next((r for r in res["rows"] if r["entry"] == entry and r["threads"] == t), None)
            if r is None or r["vs_runtime_fp32"] is None:
                continue
            ok = "met" if r["vs_runtime_fp32"] >= bar else "NOT met"
            lines.append(f"  target {rt} @{t}: {entry} {r['vs_runtime_fp32']:.2f}x vs >= {bar}x: {ok}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder with <model>/intake and <model>/quantize/ort")
    ap.add_argument("--params", type=Path, required=True, help="params.yaml with models.<model>.task")
    ap.add_argument("--reference-set", type=Path, action="append", required=True)
    ap.add_argument("--models", nargs="+", default=["ppocr_det", "ddddocr_det"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--agreement-images", type=int, default=4, help="images of each reference set for agreement")
    ap.add_argument("--extra", action="append", default=[], metavar="MODEL:LABEL=PATH",
                    help="another INT8 file of MODEL timed and scored beside the placements")
    ap.add_argument("--nncf", type=Path, metavar="SET", help="also quantize each model with NNCF (quantize.engine: nncf) on this "
                    "calibration set and time and score its files beside ours (needs the nncf extra)")
    ap.add_argument("--only", nargs="+", metavar="ENTRY", help="time and score only these entries (e.g. 'fp32 ov-default' 'openvino ov-default')")
    ap.add_argument("--out", type=Path, help="write the results as JSON here too")
    a = ap.parse_args(argv)
    extra: dict[str, dict[str, Path]] = {}
    for e in a.extra:
        model, rest = e.split(":", 1)
        label, path = rest.split("=", 1)
        extra.setdefault(model, {})[label] = Path(path)
    cpu = _cpu()
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp:
        results = [bench_model(m, a.work, a.params, a.reference_set, a.threads, a.repeats, a.warmup, a.agreement_images, Path(tmp), extra.get(m), a.only,
                               a.nncf) for m in a.models]
    sys.stdout.write(render(results, cpu, a.repeats) + "\n")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"cpu": cpu, "repeats": a.repeats, "results": results}, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

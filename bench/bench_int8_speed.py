"""Where INT8 time goes on ONNX Runtime's CPU provider, and what changes it: one run, JSON on stdout.

Variants of the intake model are built from one calibration record's ranges (no calibration here), each scored
against FP32 on the reference sets (pooled pixel IoU of the binarized map, worst set) and timed interleaved
(:func:`quantkit.runtimes.latency.interleaved_latency`: every repeat runs each model once, rotating the
order; medians) at each ``--threads`` count:

* ``fp32``: the intake model; ``fp32-folded``: the same after :mod:`quantkit.quantize.recovery.fold` (the fair
  float baseline: the folding is exact in float);
* ``int8``: every op ORT quantizes; ``int8-folded``: the folded model, all 8-bit;
* ``int8-folded-no-eltwise``: folded, element-wise ``Mul`` / ``Add`` left in float (``op_types_to_exclude``);
* ``int8-folded-conv-only``: folded, only ``Conv`` quantized (``op_types_to_quantize``);
* ``int8-folded-s8s8``: folded, int8 symmetric activations (``activation_type: int8``, ``symmetric_activations``);
* each ``--extra LABEL=MODEL`` (e.g. a fallback output) as given.

Session options (``--session-options``) are timed for ``fp32`` and the ``--session-variant`` model: ORT's default,
``session.intra_op.allow_spinning = 0`` and graph optimization level ``extended``. With ``--profile``, ORT's own
profiler (``SessionOptions.enable_profiling``) gives node time summed per op type (mean per run) for the fp32,
int8 and int8-folded models at each thread count, and per op type the share of node runs whose work ORT split over
the intra-op thread pool (``split_share``: 0 means the kernel never used the second thread).

Usage::

    python bench/bench_int8_speed.py --intake work/ppocr_det/intake --base work/ppocr_det/quantize/candidate-int8 --threads 1 2 --repeats 15 --profile \\
        --out bench/results/int8_speed.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def build_variants(intake: Path, base: Path, work: Path) -> dict[str, Path]:
    """Quantize the variants from ``base``'s ranges (quantkit's engine; the folded model through recovery)."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.engine import MODEL_FILE, RangeSource, load_intake, write_static
    from quantkit.quantize.recovery.apply import apply_recovery
    from quantkit.quantize.recovery.config import RecoveryConfig

    model_path, model, note = load_intake(intake)
    rec = CalibrationRecord.load(base)
    cfg = StaticQuantConfig.from_dict(rec.config)
    folded = apply_recovery(model, rec, cfg, RecoveryConfig(fold_affine=True))
    (work / "fp32-folded.onnx").write_bytes(folded.model.SerializeToString())
    out = {"fp32": model_path, "fp32-folded": work / "fp32-folded.onnx", "int8": base / MODEL_FILE}
    recipes = {
        "int8-folded": {},
        "int8-folded-no-eltwise": {"op_types_to_exclude": ["Mul", "Add"]},
        "int8-folded-conv-only": {"op_types_to_quantize": ["Conv"]},
        "int8-folded-s8s8": {"activation_type": "int8", "symmetric_activations": True},
    }
    for label, change in recipes.items():
        d = work / label
        d.mkdir()
        write_static(folded.model, model_path, note, cfg.replace(**change), RangeSource(record=folded.record, replay_scales=False), d)
        out[label] = d / MODEL_FILE
    return out


def score(models: dict[str, Path], intake: Path, ref_sets: list[Path], n: int | None, thresh: float) -> dict[str, Any]:
    """Pixel IoU vs FP32 per reference set (pooled), each model over the same images."""
    from quantkit.quantize.fallback.candidates import Scorer, load_references
    from quantkit.quantize.fallback.metric import pixel_iou
    from quantkit.quantize.engine import load_intake

    model_path, _, note = load_intake(intake)
    refs = load_references(ref_sets, note, model_path, n)
    scorer = Scorer(refs, pixel_iou(thresh), 0.0, early_stop=False)
    res = {}
    for label, p in models.items():
        s = scorer.score(p, full=True)
        res[label] = {"worst": round(s.metric, 4), "per_set": {k: round(v, 4) for k, v in s.per_set.items()}}
    return res, [{refs.input_name: x} for f in refs.feeds for x in f[:2]][:4]


class SessionRunner:
    """An ORT runner with session config entries and a graph optimization level (bench only)."""

    def __new__(cls, model: Path, threads: int, entries: dict[str, str], level: str) -> Any:
        from quantkit.runner import OrtRunner

        class _R(OrtRunner):
            def activate_impl(self) -> None:
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self._LEVELS[level])
                opts.intra_op_num_threads = threads
                opts.log_severity_level = 3
                for k, v in entries.items():
                    opts.add_session_config_entry(k, v)
                self.session = ort.InferenceSession(os.fspath(model), sess_options=opts, providers=["CPUExecutionProvider"])

        return _R(model, intra_op_num_threads=threads, name=f"{Path(model).name}")


def profile(model: Path, threads: int, feed: dict[str, Any], runs: int) -> dict[str, Any]:
    """ORT profiler: mean milliseconds per run summed per op type (kernel time), and node counts."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(d, "p")
        s = ort.InferenceSession(os.fspath(model), so, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            s.run(None, feed)
        events = json.loads(Path(s.end_profiling()).read_text())
    by: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    split: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"].get("op_name", "?")
            by[op] += e["dur"] / 1000.0 / runs
            count[op] += 1
            # ORT records, per node, how the intra-op pool split its work ("block_size" of the main thread's
            # parallel loops); a node without it ran on the calling thread only (or through a path ORT does not record)
            main = (e["args"].get("thread_scheduling_stats") or {}).get("main_thread") or {}
            split[op] += bool(main.get("block_size"))
    total = sum(by.values())
    return {"total_ms": round(total, 2), "ops": {k: {"ms": round(v, 2), "share": round(v / total, 3), "nodes": count[k] // runs,
                                                     "split_share": round(split[k] / count[k], 2)}
                                                 for k, v in sorted(by.items(), key=lambda kv: -kv[1])}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intake", type=Path, default=REPO / "work" / "ppocr_det" / "intake")
    ap.add_argument("--base", type=Path, required=True, help="a quantize output (model_int8.onnx + record.json) whose ranges every variant uses")
    ap.add_argument("--ref-sets", type=Path, nargs="+", default=[REPO / "reference_sets" / s for s in ("cam1-day", "cam1-night")])
    ap.add_argument("--n-ref", type=int, default=None, help="first N images of each reference set (default all)")
    ap.add_argument("--extra", nargs="*", default=[], metavar="LABEL=MODEL", help="more models to score and time")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--thresh", type=float, default=0.3)
    ap.add_argument("--profile", action="store_true", help="ORT profiler per op type for fp32, int8, int8-folded")
    ap.add_argument("--profile-runs", type=int, default=10)
    ap.add_argument("--session-variant", default="int8-folded", help="model the session options are tried on (beside fp32)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    from quantkit.runtimes.latency import interleaved_latency

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-int8-speed-") as tmp:
        models = build_variants(args.intake, args.base, Path(tmp))
        models.update({k: Path(v) for k, v in (e.split("=", 1) for e in args.extra)})
        accuracy, feeds = score(models, args.intake, args.ref_sets, args.n_ref, args.thresh)
        latency: dict[str, Any] = {}
        for t in args.threads:
            res = interleaved_latency({k: os.fspath(v) for k, v in models.items()}, feeds, threads=t, repeats=args.repeats)
            fp = res["fp32"].median_ms
            latency[str(t)] = {k: {"median_ms": round(v.median_ms, 2), "speedup_vs_fp32": round(fp / v.median_ms, 3)} for k, v in res.items()}
        sessions: dict[str, Any] = {}
        options = {"default": ({}, "all"), "no-spinning": ({"session.intra_op.allow_spinning": "0"}, "all"), "extended": ({}, "extended")}
        for t in args.threads:
            pair = {f"{m}|{o}": (models[m], e, lvl) for m in ("fp32", args.session_variant) for o, (e, lvl) in options.items()}
            res = interleaved_latency(pair, feeds, threads=t, repeats=args.repeats,
                                      factory=lambda spec, th: SessionRunner(spec[0], th, spec[1], spec[2]))
            fp = res["fp32|default"].median_ms
            sessions[str(t)] = {k: {"median_ms": round(v.median_ms, 2), "speedup_vs_fp32_default": round(fp / v.median_ms, 3)} for k, v in res.items()}
        prof = {f"{m}@{t}": profile(models[m], t, feeds[0], args.profile_runs) for m in ("fp32", "int8", "int8-folded") for t in args.threads} if args.profile else {}
    result = {"bench": "int8_speed", "cpu": _cpu(), "cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
              "base": str(args.base), "threads": args.threads, "repeats": args.repeats, "accuracy_pixel_iou_vs_fp32": accuracy,
              "latency": latency, "session_options": sessions, "profile": prof, "seconds": round(time.perf_counter() - t0, 1)}
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

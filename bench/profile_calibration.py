"""Where one calibration inference's time goes: quantkit's reading sessions beside a plain forward pass, timed
interleaved on the same images, then each broken down by ONNX Runtime's own profiler.

For the PP-OCR detector (prepared as ``bench_calibration.py`` prepares it, ``--size``, constants made
initializers as ``quantize`` does) and the demo's calibration set, it sets up the session each method reads
with after its first images, exactly as the calibration does (:class:`quantkit.quantize.calibration.reading.TensorReader`,
``--warm`` images read first): MinMax's extrema model once the derived ranges are known, Percentile's tails
model once the cut-offs are set. Then, per ``--graph`` (``exact``: ORT level ``disable``, as ORT's calibrators;
``optimized``: level ``all``):

* ``ms``: median milliseconds per inference over ``--rounds`` rounds of ``--runs`` images, the sessions in
  turn (forward at level ``all`` -- the forward pass ``bench_calibration.py`` divides by --, forward at the
  graph's level, MinMax's session, Percentile's session), each reading included (``ExtremaSession.run``);
* ``kernels_ms``: per session, ORT's profiler (``SessionOptions.enable_profiling``, same level and node order
  as the calibration) summed per group and divided by the runs (the first run of the profiled session included): the model's own nodes by op type
  (``model:Conv``), the nodes quantkit adds by role (``read:row_min``: the suffix after ``__qk_``);
  ``nodes``: how many of each the session runs; ``overhead_ms``: the run's wall time the kernels do not
  account for (ORT's per-node scheduling).

The profiler slows every node a little: compare groups within one session, and sessions by ``ms``.
Prints JSON. Usage::

    python bench/profile_calibration.py --size 640 --graph exact optimized [--runs 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _feeds(cset: Path, intake: Path, n: int) -> list[dict[str, np.ndarray]]:
    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote

    reader = CalibrationSetReader(CalibrationSet.load(cset), ExportNote.load(intake / "export_note.json").preprocessing)
    reader.set_range(0, min(n, len(reader)))
    return list(iter(reader.get_next, None))


def _reader(model: Path, method: str, graph: str, work: Path, warm: list[dict[str, np.ndarray]]) -> Any:
    """The calibration's reader for ``method`` after the ``warm`` images (its session as the calibration runs it)."""
    import onnx

    from quantkit.quantize import StaticQuantConfig, ort_bridge
    from quantkit.quantize.calibration.calibrate import CALIBRATION_LEVELS, make_state
    from quantkit.quantize.calibration.derive import derivations
    from quantkit.quantize.calibration.reading import TensorReader

    cfg = StaticQuantConfig(method=method, per_channel=True, calibration_graph=graph)
    plan = ort_bridge.calibration_plan(model, cfg, ort_bridge.default_op_types("qdq"), work)
    derivs = derivations(onnx.load(str(plan.tap_model), load_external_data=False), plan.tensors) if method == "minmax" else None
    state = make_state(plan.params, list(plan.tensors), derivs)
    reader = TensorReader(plan.tap_model, state.pass_names(1), state, None, None, CALIBRATION_LEVELS[graph], plan.graph_outputs)
    for feed in warm:
        reader.read(1, feed)
    return reader


def _session(model: Path, level: str, order: str = "default", profile: Path | None = None) -> Any:
    """An ORT CPU session at ``level`` and node ``order`` (quantkit's names, :mod:`quantkit.runtimes.ort`), profiled
    to files starting with ``profile`` when given."""
    import onnxruntime as ort

    from quantkit.runtimes.ort import EXECUTION_ORDERS, LEVELS

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    so.execution_order = getattr(ort.ExecutionOrder, EXECUTION_ORDERS[order])
    if profile is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile)
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def _profile(model: Path, level: str, order: str, feeds: list[dict[str, np.ndarray]], prefix: Path) -> dict[str, Any]:
    """ORT's profiler over one run per feed, after one more run of the first (its allocations, counted too): kernel
    milliseconds per group, node counts, unaccounted wall time."""
    sess = _session(model, level, order, prefix)
    outs = [o.name for o in sess.get_outputs()]
    for feed in [feeds[0], *feeds]:
        sess.run(outs, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    kernels: dict[str, float] = collections.defaultdict(float)
    nodes: dict[str, set[str]] = collections.defaultdict(set)
    runs: list[float] = []
    for e in events:
        if e.get("cat") == "Session" and e.get("name") == "model_run":
            runs.append(e["dur"])
        elif e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            group = "read:" + name.rsplit("__qk_", 1)[1] if "__qk_" in name else "model:" + e["args"].get("op_name", "?")
            kernels[group] += e["dur"]
            nodes[group].add(name)
    n = len(runs)  # every run, the first included: kernels and runs over the same runs
    run_ms, kernel_ms = sum(runs) / n / 1000, sum(kernels.values()) / n / 1000
    per_run = {g: round(v / n / 1000, 2) for g, v in sorted(kernels.items(), key=lambda kv: -kv[1])}
    return {"run_ms": round(run_ms, 1), "kernels_ms": per_run, "kernels_total_ms": round(kernel_ms, 1),
            "overhead_ms": round(run_ms - kernel_ms, 1),
            "nodes": {g: len(v) for g, v in sorted(nodes.items(), key=lambda kv: -len(kv[1]))}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--graph", nargs="+", default=["exact", "optimized"], choices=["exact", "optimized"])
    p.add_argument("--runs", type=int, default=8, help="images per round (the set's first ones)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, the sessions in turn within each")
    p.add_argument("--warm", type=int, default=2, help="images each reader reads before it is timed")
    p.add_argument("--set")
    p.add_argument("--intake")
    a = p.parse_args()
    logging.disable(logging.WARNING)
    import bench_calibration as bc
    import onnx
    import onnxruntime as ort

    from quantkit.quantize.calibration.calibrate import CALIBRATION_LEVELS
    from quantkit.quantize.engine import constants_to_initializers

    with tempfile.TemporaryDirectory(prefix="quantkit-profile-") as tmp_s:
        tmp = Path(tmp_s)
        intake = Path(a.intake) if a.intake else bc._prepare_intake(tmp / "intake", a.size)
        cset = Path(a.set) if a.set else bc._default_set(tmp / "set", a.runs + a.warm, a.size)
        m = onnx.load(str(intake / "model.onnx"))
        constants_to_initializers(m)
        model = tmp / "prepared.onnx"
        onnx.save(m, str(model))
        feeds = _feeds(cset, intake, a.warm + a.runs)
        warm, timed = feeds[: a.warm], feeds[a.warm:] or feeds
        out: dict[str, Any] = {"cpu_count": os.cpu_count(), "onnxruntime": ort.__version__, "size": a.size, "runs": len(timed),
                               "rounds": a.rounds, "graphs": {}}
        for graph in a.graph:
            level = CALIBRATION_LEVELS[graph]
            readers = {meth: _reader(model, meth, graph, tmp / f"{graph}-{meth}", warm) for meth in ("minmax", "percentile")}

            def plain(lv: str) -> Any:
                s = _session(model, lv)
                return lambda feed: s.run(None, feed)

            runners = {"forward (level all)": plain("all")}
            if level != "all":
                runners[f"forward (level {level})"] = plain(level)
            runners.update({f"{meth} reading": r.session.run for meth, r in readers.items()})
            times: dict[str, list[float]] = {k: [] for k in runners}
            for _ in range(a.rounds):
                for k, fn in runners.items():
                    fn(timed[0])
                    t = []
                    for f in timed:
                        t0 = time.perf_counter()
                        fn(f)
                        t.append(time.perf_counter() - t0)
                    times[k].append(float(np.median(t)))
            g: dict[str, Any] = {"ms": {k: round(1000 * float(np.median(v)), 1) for k, v in times.items()}, "profile": {}}
            g["profile"]["forward"] = _profile(model, level, "default", timed, tmp / "p")
            for meth, r in readers.items():
                g["profile"][f"{meth} reading"] = {"tensors_reduced": len(r.session.reduced), "tensors_whole": len(r.session.whole),
                                                   **_profile(Path(r.tap_model).with_name("extrema_model.onnx"), level, "priority_based",
                                                              timed, tmp / "p")}
                r.close()
            out["graphs"][graph] = g
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

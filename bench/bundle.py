"""Benchmark ``quantkit bundle`` + ``quantkit verify`` on the embedded PP-OCRv4 detector; prints JSON.

By default builds its inputs with quantkit itself at --size (demo sets rendered from params.yaml's demo section:
8 calibration and --golden reference images; intake, MinMax quantization, bind); with --pipeline it bundles the
main job's outputs (work/ppocr_det/{quantize/deployed,thresholds/deployed.json,intake}, reference_sets/cam1-day).

    python bench/bundle.py --size 640 --golden 4
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepare(t: Path, size: int, golden: int) -> tuple[Path, Path, Path, Path]:
    """Demo model and sets at ``size`` -> intake -> quantize -> bind, with the library's own functions."""
    from quantkit.config import config_from_params
    from quantkit.demo import copy_model
    from quantkit.demo.synth import load_demo_config, make_set
    from quantkit.intake import IntakeConfig, intake
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.tasks import TaskConfig
    from quantkit.thresholds import ThresholdsConfig, bind

    params = ROOT / "params.yaml"
    demo = load_demo_config(params).replace(input_size=[size, size])
    for name, n, out in (("calib-cam1-day", 8, t / "calib"), ("ref-cam1-day", golden, t / "ref")):
        make_set(demo.replace(sets={**demo.sets, name: demo.sets[name].replace(count=n)}), name, out=out)
    cfg = config_from_params(IntakeConfig, params, "intake", model="ppocr_det")
    cfg = cfg.replace(input_size=[size, size], preprocessing=cfg.preprocessing.replace(input_size=[size, size]))
    task = config_from_params(TaskConfig, params, "task", model="ppocr_det").make()
    intake(copy_model(t / "model.onnx").out, cfg, t / "intake", task=task)
    quantize(t / "intake", config_from_params(StaticQuantConfig, params, "quantize"), out=t / "quantize", calibration_set=t / "calib")
    bind(t / "quantize", t / "intake", t / "ref", task, config_from_params(ThresholdsConfig, params, "thresholds").replace(min_agreement=0.0),
         t / "deployed.json")
    return t / "quantize", t / "deployed.json", t / "intake", t / "ref"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--golden", type=int, default=4)
    ap.add_argument("--activation-max-elements", type=int, default=2048)
    ap.add_argument("--pipeline", action="store_true", help="bundle the DVC pipeline's outputs under the repo root")
    args = ap.parse_args()

    from quantkit.bundle import BundleConfig, build_bundle, verify_bundle

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        t0 = time.perf_counter()
        if args.pipeline:
            w = ROOT / "work" / "ppocr_det"
            q, ts, intake, golden = w / "quantize/deployed", w / "thresholds/deployed.json", w / "intake", ROOT / "reference_sets/cam1-day"
        else:
            q, ts, intake, golden = prepare(t, args.size, args.golden)
        prep = time.perf_counter() - t0
        cfg = BundleConfig(golden_count=args.golden, activation_max_elements=args.activation_max_elements)
        t0 = time.perf_counter()
        res = build_bundle(q, ts, intake, golden, t / "dist", cfg)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = build_bundle(q, ts, intake, golden, t / "dist2", cfg)
        rebuild_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = verify_bundle(res.path)
        verify_s = time.perf_counter() - t0
        print(json.dumps({
            "size": args.size, "golden": res.golden, "activations": res.activations, "members": res.members,
            "bundle_bytes": res.size, "identical_rebuild": again.path.read_bytes() == res.path.read_bytes(),
            "prepare_s": round(prep, 2), "build_s": round(build_s, 2), "rebuild_s": round(rebuild_s, 2), "verify_s": round(verify_s, 2),
            "verified": report.ok, "deployable": report.verdict.deployable, "checks": len(report.checks), "failures": [c.to_dict() for c in report.failures],
        }, indent=2))


if __name__ == "__main__":
    main()

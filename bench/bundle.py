"""Benchmark ``quantkit bundle`` + ``quantkit verify`` on the embedded PP-OCRv4 detector; prints JSON.

By default builds stand-in inputs (intake at --size, ORT static QDQ quantization on seeded random data,
a threshold set, a golden set of --golden synthetic images) with tests/test_bundle_fixtures.py; with
--pipeline it bundles the real DVC outputs (work/quantize/deployed, work/thresholds/deployed.json,
work/intake, site_sets/cam1-day) instead.

    python bench/bundle.py --size 640 --golden 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
            q, ts, intake, golden = ROOT / "work/quantize/deployed", ROOT / "work/thresholds/deployed.json", ROOT / "work/intake", ROOT / "site_sets/cam1-day"
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            from test_bundle_fixtures import (
                make_golden_set,
                make_ppocr_intake,
                make_quantized,
                make_thresholds,
            )

            intake = make_ppocr_intake(t / "intake", size=args.size)
            q = make_quantized(intake, t / "quantize", seed=1)
            ts = make_thresholds(q, t / "deployed.json")
            golden = make_golden_set(t / "site", n=args.golden)
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
            "verified": report.ok, "checks": len(report.checks), "failures": [c.to_dict() for c in report.failures],
        }, indent=2))


if __name__ == "__main__":
    main()

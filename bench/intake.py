"""Benchmark of model intake on the embedded PP-OCRv4 detector. Prints JSON; not run by tests.

Usage: python bench/intake.py [--size 640] [--repeat 3]
Times (seconds, best of ``repeat``): inspect, validate, fix shape + opset conversion + shape
inference, numeric check (2 samples), note check (8+1 ORT runs), support check (cpu, npu-generic),
and the whole ``intake`` stage.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import onnx


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    from quantkit.demo import packaged_model_path
    from quantkit.intake import (
        IntakeConfig,
        check_note,
        convert_opset,
        inspect_model,
        intake,
        text_probe,
        validate_model,
        verify_conversion,
    )
    from quantkit.intake.prepare import _infer, fix_input_shape
    from quantkit.intake.support import check_support

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    src = packaged_model_path()
    cfg = IntakeConfig.from_dict({"input_size": [a.size, a.size]})
    res: dict = {"model": src.name, "input_size": a.size, "repeat": a.repeat}
    original = onnx.load(src)
    res["inspect_s"], _ = best(lambda: inspect_model(src), a.repeat)
    res["validate_s"], _ = best(lambda: validate_model(src), a.repeat)
    res["fix_convert_infer_s"], prepared = best(lambda: _infer(convert_opset(fix_input_shape(original, "x", (1, 3, a.size, a.size)), 13)[0], "m"), a.repeat)
    probe = text_probe((a.size, a.size))
    feeds = [{"x": cfg.preprocessing.apply(probe.image)[0]}] * 2
    res["numeric_check_s"], chk = best(lambda: verify_conversion(original, prepared, feeds), a.repeat)
    res["numeric_max_abs_diff"] = chk.max_abs_diff
    res["note_check_s"], rep = best(lambda: check_note(prepared, cfg.preprocessing, probe), a.repeat)
    res["note_check_scores"] = {f"{s.layout}/{s.color_order}/{s.value_range}": s.score for s in rep.scores}
    for t in ("cpu", "npu-generic"):
        res[f"support_{t}_s"], r = best(lambda t=t: check_support(prepared, t), a.repeat)
        res[f"support_{t}_issues"] = len(r.issues)
    with tempfile.TemporaryDirectory() as d:
        res["intake_total_s"], _ = best(lambda: intake(src, cfg, Path(d) / "intake"), a.repeat)
    print(json.dumps(res, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()

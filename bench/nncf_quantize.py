"""NNCF's post-training quantization of an intake model, for bench_placement.py's ``--extra`` (not a quantkit engine yet).

``nncf.quantize`` on the ONNX model (NNCF's ONNX backend, CPU target, performance preset: symmetric weights and
activations) on the images of a calibration set read through the model's export note (the same preprocessing quantkit
calibrates with), writing ``OUT/model_int8.onnx``. NNCF is optional and not a quantkit dependency; it was installed
outside the project venv for this (``pip install --no-deps --target DIR nncf ninja openvino-telemetry safetensors
scikit-learn threadpoolctl joblib``, then ``PYTHONPATH=DIR``), leaving onnx 1.23 / onnxruntime 1.32 as they were.

Usage::

    PYTHONPATH=/tmp/nncf_site:. python bench/nncf_quantize.py --intake work/ppocr_det/intake \\
        --calibration-set calibration_sets/cam1-day --out work/ppocr_det/quantize/nncf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intake", type=Path, required=True)
    ap.add_argument("--calibration-set", type=Path, required=True)
    ap.add_argument("--subset-size", type=int, default=16)
    ap.add_argument("--preset", choices=["performance", "mixed"], default="performance")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    import nncf
    import onnx

    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.quantize.engine import constants_to_initializers, load_intake

    model_path, model, note = load_intake(a.intake)
    constants_to_initializers(model)
    reader = CalibrationSetReader(CalibrationSet.load(a.calibration_set, verify=True), note.preprocessing)
    name = note.preprocessing.input_name
    items = [{name: x} for _, x in reader.iter_batches()]
    preset = nncf.QuantizationPreset.PERFORMANCE if a.preset == "performance" else nncf.QuantizationPreset.MIXED
    q = nncf.quantize(model, nncf.Dataset(items), subset_size=min(a.subset_size, len(items)), preset=preset,
                      target_device=nncf.TargetDevice.CPU)
    a.out.mkdir(parents=True, exist_ok=True)
    onnx.save(q, str(a.out / "model_int8.onnx"))
    print(f"wrote {a.out / 'model_int8.onnx'} ({len(items)} calibration images, subset {min(a.subset_size, len(items))}, {a.preset})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Run inside a throwaway environment by ``test_quantize_ort_floor.py``: the quantize path on tiny generated models
with whatever onnxruntime is installed there. Prints one JSON line; exits non-zero on any failure."""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import onnxruntime

    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize import DynamicQuantConfig, StaticQuantConfig, quantize, replay
    from models import output_feeds_activation_model
    from test_quantize_fixtures import make_set, make_tiny_intake, write_model_intake

    logging.disable(logging.WARNING)
    done = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        cset = make_set(tmp / "set", 3, size=32)
        intake = make_tiny_intake(tmp / "intake")
        for name, cfg in {"minmax": StaticQuantConfig(per_channel=True), "percentile": StaticQuantConfig(method="percentile"),
                          "entropy": StaticQuantConfig(method="entropy", num_bins=256), "qoperator": StaticQuantConfig(format="qoperator")}.items():
            rec = quantize(intake, cfg, out=tmp / name, calibration_set=cset)
            assert CalibrationRecord.load(tmp / name).fingerprint == rec.fingerprint
            done.append(name)
        again = replay(tmp / "minmax" / "record.json", intake, out=tmp / "replayed")
        assert (tmp / "replayed" / "model_int8.onnx").read_bytes() == (tmp / "minmax" / "model_int8.onnx").read_bytes(), "replay"
        assert again.fingerprint == CalibrationRecord.load(tmp / "minmax").fingerprint
        done.append("replay")
        quantize(intake, DynamicQuantConfig(), out=tmp / "dynamic")
        done.append("dynamic")
        relu = write_model_intake(output_feeds_activation_model(), tmp / "relu", 16)
        assert quantize(relu, StaticQuantConfig(), out=tmp / "relu-q", calibration_set=cset).calibration["outputs_pinned"] == ["y1"]
        done.append("output-pinned")
    print(json.dumps({"onnxruntime": onnxruntime.__version__, "passed": done}))


if __name__ == "__main__":
    main()

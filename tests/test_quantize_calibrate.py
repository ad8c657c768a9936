"""Chunked calibration reproduces ORT's one-call calibrators; checkpoints resume an interrupted run.

Real PP-OCR detector at 64x64, 8 calibration images (the issue's N=8 check at a test-sized input).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_quantize_fixtures import make_intake, make_set

from quantkit.calibset import CalibrationSet, CalibrationSetReader
from quantkit.errors import CalibrationSetError
from quantkit.note import ExportNote
from quantkit.quantize import StaticQuantConfig, adapter
from quantkit.quantize.calibrate import collect_ranges, quiet_ort
from quantkit.quantize.engine import constants_to_initializers

SIZE = 64


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib")
    intake = make_intake(root / "intake", SIZE)
    m = onnx.load(str(intake / "model.onnx"))
    constants_to_initializers(m)
    onnx.save(m, str(root / "prepared.onnx"))
    cset = CalibrationSet.load(make_set(root / "set", 8, size=80))
    return root, root / "prepared.onnx", cset, ExportNote.load(intake / "export_note.json").preprocessing


def _ort_one_call(model: Path, reader, cfg: StaticQuantConfig, tmp: Path):
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    with quiet_ort():
        cal = create_calibrator(model, adapter.default_op_types("qdq"), augmented_model_path=str(tmp / "aug.onnx"),
                                calibrate_method=getattr(CalibrationMethod, adapter.METHODS[cfg.method]),
                                extra_options=adapter.calibrator_options(cfg))
        cal.collect_data(reader)
        return cal.compute_data()


@pytest.mark.parametrize("cfg", [StaticQuantConfig(), StaticQuantConfig(moving_average=True, averaging_constant=0.3),
                                 StaticQuantConfig(method="percentile"), StaticQuantConfig(method="entropy"),
                                 StaticQuantConfig(method="distribution", calibration_chunk_size=3)],
                         ids=["minmax", "minmax-ema", "percentile", "entropy", "distribution"])
def test_chunked_ranges_equal_ort_one_call_bit_for_bit(env, cfg, tmp_path):
    root, model, cset, pre = env
    ref = _ort_one_call(model, CalibrationSetReader(cset, pre), cfg, tmp_path)
    run = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=tmp_path, op_types=adapter.default_op_types("qdq"))
    assert run.images == 8 and run.chunks >= 8 // cfg.calibration_chunk_size
    assert set(run.tensors.data) == set(ref.data) and len(ref.data) > 300
    for name in ref.data:
        a, b = ref[name].range_value, run.tensors[name].range_value
        assert np.array_equal(np.asarray(a), np.asarray(b)), name  # tolerance: exact (0 ulp)


def test_ort_merge_per_call_would_differ(env, tmp_path):
    """Why the two-pass histogram exists: ORT's own per-call merge drifts from its one-call result."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    root, model, cset, pre = env
    cfg = StaticQuantConfig(method="percentile")
    ref = _ort_one_call(model, CalibrationSetReader(cset, pre), cfg, tmp_path)
    with quiet_ort():
        cal = create_calibrator(model, adapter.default_op_types("qdq"), augmented_model_path=str(tmp_path / "a2.onnx"),
                                calibrate_method=CalibrationMethod.Percentile)
        r = CalibrationSetReader(cset, pre)
        for i in range(len(r)):
            r.set_range(i, i + 1)
            cal.collect_data(r)
        merged = cal.compute_data()
    assert any(not np.array_equal(np.asarray(ref[k].range_value), np.asarray(merged[k].range_value)) for k in ref.data)


class _Interrupting(CalibrationSetReader):
    """Raises KeyboardInterrupt when batch ``stop_at`` is requested; counts decoded batches."""

    def __init__(self, *a, stop_at=None, **k):
        super().__init__(*a, **k)
        self.stop_at, self.seen = stop_at, []

    def get_next(self):
        out = super().get_next()
        if out is not None:
            self.seen.append(self._start)
            if self.stop_at is not None and len(self.seen) > self.stop_at:
                raise KeyboardInterrupt
        return out


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_interrupted_calibration_resumes_from_checkpoint(env, tmp_path, method):
    root, model, cset, pre = env
    cfg = StaticQuantConfig(method=method, calibration_chunk_size=2)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        collect_ranges(model, _Interrupting(cset, pre, stop_at=5), cfg, workdir=tmp_path, checkpoint=ckpt, key="k")
    saved = pickle.loads(ckpt.read_bytes())
    assert (saved["pass"], saved["done"]) == (1, 4)  # chunks [0,2) and [2,4) finished before the interrupt
    again = _Interrupting(cset, pre)
    run = collect_ranges(model, again, cfg, workdir=tmp_path, checkpoint=ckpt, key="k")
    passes = 2 if method != "minmax" else 1
    assert len(again.seen) == 8 * passes - 4  # the 4 finished images were not read again
    assert run.resumed_batches == 4
    full = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=tmp_path)
    for k in full.tensors.data:
        assert np.array_equal(np.asarray(full.tensors[k].range_value), np.asarray(run.tensors[k].range_value)), k
    # a checkpoint made for another run is ignored, not trusted
    other = _Interrupting(cset, pre)
    collect_ranges(model, other, cfg, workdir=tmp_path, checkpoint=ckpt, key="another")
    assert len(other.seen) == 8 * passes


def test_max_images_and_empty(env, tmp_path):
    root, model, cset, pre = env
    run = collect_ranges(model, CalibrationSetReader(cset, pre), StaticQuantConfig(max_images=3), workdir=tmp_path)
    assert run.images == 3 and run.batches == 3

    class Empty:
        batch_size = 1

        def __len__(self):
            return 0

    with pytest.raises(CalibrationSetError, match="no images to calibrate on"):
        collect_ranges(model, Empty(), StaticQuantConfig(), workdir=tmp_path)

"""An intake with ``intake.batch_size: 4`` fixes the model's input to ``[4, 3, H, W]``; every stage that runs the model
on images feeds one image at a time, so each refuses such a model up front in one line naming ``intake.batch_size``,
the fixed batch and the fix, instead of an ONNX Runtime shape error blamed on the image set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import ModelError
from quantkit.intake import IntakeConfig, intake
from quantkit.modelio import check_one_image_batch, fixed_batch
from quantkit.quantize import DynamicQuantConfig, StaticQuantConfig, quantize

FIX = r"input 'x' is fixed to a batch of 4 \(intake\.batch_size: 4\), .* re-run 'quantkit intake' with intake\.batch_size: 1"


def _map_model(batch: int | str = "N") -> onnx.ModelProto:
    """``x[batch, 3, H, W] -> Conv(3 -> 1) -> Sigmoid -> y``: a per-pixel map (db_text's layout)."""
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((1, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="quantkit-tests")
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, Path]:
    from test_quantize_fixtures import make_set

    root = tmp_path_factory.mktemp("fixed-batch")
    onnx.save(_map_model(), str(root / "m.onnx"))
    out = {"set": make_set(root / "set", n=3, size=48)}
    for b in (1, 4):
        cfg = IntakeConfig.from_dict({"input_size": [32, 32], "batch_size": b, "note_check": "off", "random_samples": 0})
        intake(root / "m.onnx", cfg, root / f"intake-b{b}")
        out[f"intake{b}"] = root / f"intake-b{b}"
    quantize(out["intake1"], StaticQuantConfig(), out=root / "q1", calibration_set=out["set"])
    out["q1"] = root / "q1"
    return out


def test_fixed_batch_reads_the_input():
    assert fixed_batch(_map_model(4), "x") == 4 and fixed_batch(_map_model(1), "x") == 1
    assert fixed_batch(_map_model("N"), "x") is None and fixed_batch(_map_model(-1), "x") is None
    assert fixed_batch(_map_model(4), "other") is None
    check_one_image_batch(_map_model(4), "x", "m.onnx", batch_axis=False)  # a rank-3 contract has no batch axis


def test_quantize_refuses_up_front_and_writes_nothing(env, tmp_path):
    with pytest.raises(ModelError, match=FIX) as e:
        quantize(env["intake4"], StaticQuantConfig(), out=tmp_path / "q4", calibration_set=env["set"])
    assert str(e.value).startswith(str(env["intake4"] / "model.onnx")) and "\n" not in str(e.value)
    assert not (tmp_path / "q4").exists()


def test_the_cli_says_it_in_one_line(env, tmp_path, run_cli):
    rc, _, err = run_cli(["quantize", env["intake4"], "--calibration-set", env["set"], "--out", tmp_path / "q4"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "intake.batch_size: 1" in lines[0] and "ONNXRuntimeError" not in lines[0], err
    rc, _, err = run_cli(["compare", env["intake4"], env["q1"], "--set", env["set"]])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "fixed to a batch of 4" in err, err


def test_dynamic_quantization_feeds_no_image_and_is_not_refused(env, tmp_path):
    rec = quantize(env["intake4"], DynamicQuantConfig(), out=tmp_path / "d4")
    assert rec.mode == "dynamic"


def test_bind_evaluate_drift_and_fallback_refuse_it_too(env, tmp_path):
    from quantkit.drift.clipping import clipping_rates
    from quantkit.evaluate import evaluate
    from quantkit.quantize.fallback import FallbackConfig, precision_fallback
    from quantkit.tasks import make_adapter
    from quantkit.thresholds import ThresholdsConfig, bind

    task = make_adapter("db_text")
    with pytest.raises(ModelError, match=FIX):
        bind(env["q1"], env["intake4"], env["set"], task, ThresholdsConfig(), tmp_path / "t.json")
    with pytest.raises(ModelError, match=FIX):
        evaluate(env["set"], env["intake4"], {}, task, tmp_path / "eval")
    with pytest.raises(ModelError, match=FIX):
        clipping_rates(env["intake4"], env["q1"], sorted((env["set"] / "images").iterdir()))
    with pytest.raises(ModelError, match=FIX):
        precision_fallback(env["intake4"], FallbackConfig(), reference_sets=[env["set"]], out=tmp_path / "fb", calibration_set=env["set"])
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "eval").exists() and not (tmp_path / "fb").exists()

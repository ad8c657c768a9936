"""Accuracy-recovery techniques on tiny generated models: each keeps the float function and does what it says."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_quantize_fixtures import _write_intake, make_set, make_tiny_intake

from quantkit.errors import ConfigError
from quantkit.quantize import StaticQuantConfig, quantize
from quantkit.quantize.fallback import FallbackConfig, precision_fallback
from quantkit.quantize.recovery.bias import correct_bias
from quantkit.quantize.recovery.equalize import equalize_pairs
from quantkit.quantize.recovery.fold import (
    fold_conv_affine,
    hardswish_as_hardsigmoid,
    new_ranges,
)
from quantkit.quantize.recovery.ranges import search_ranges
from quantkit.quantize.recovery.weights import fake_quant_weight

RNG = np.random.default_rng(7)


def _c(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _model(nodes, inits, out_shape, size=8):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _run(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def affine_hardswish_model():
    """Conv -> Mul(c, .) -> Add(., d) -> hard-swish (Add 3, Clip 0..6, Mul, Div 6) -> Conv, Paddle2ONNX style."""
    inits = [_c("w1", RNG.normal(0, 0.5, (4, 3, 3, 3))), _c("b1", RNG.normal(0, 0.1, 4)), _c("c", [1.7]), _c("d", RNG.normal(0, 0.2, (1, 4, 1, 1))),
             _c("three", 3.0), _c("zero", 0.0), _c("six", 6.0), _c("w2", RNG.normal(0, 0.5, (2, 4, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "h"], ["hm"], name="mul_affine"),
             helper.make_node("Add", ["hm", "d"], ["ha"], name="add_affine"),
             helper.make_node("Add", ["ha", "three"], ["p3"], name="add3"),
             helper.make_node("Clip", ["p3", "zero", "six"], ["cl"], name="clip"),
             helper.make_node("Mul", ["ha", "cl"], ["mm"], name="mul_hs"),
             helper.make_node("Div", ["mm", "six"], ["hs"], name="div6"),
             helper.make_node("Conv", ["hs", "w2"], ["y"], name="conv2")]
    return _model(nodes, inits, [1, 2, 8, 8])


def test_fold_keeps_the_function_and_removes_nodes():
    m = affine_hardswish_model()
    x = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    ref = _run(m, x)
    folded = fold_conv_affine(m)
    made = hardswish_as_hardsigmoid(m)
    onnx.checker.check_model(m)
    assert folded == ["mul_affine", "add_affine"] and made == ["mul_hs_hardswish"]
    assert [n.op_type for n in m.graph.node] == ["Conv", "HardSigmoid", "Mul", "Conv"]
    np.testing.assert_allclose(_run(m, x), ref, rtol=1e-5, atol=1e-5)
    assert new_ranges(m, {"ha": (-6.0, 1.5)}) == {"p3_hsig": (0.0, 0.75)}
    assert m.graph.node[0].output[0] == "ha"  # the folded Conv writes the last folded node's tensor: its range still applies


def test_fold_leaves_non_channel_constants_alone():
    inits = [_c("w1", RNG.normal(0, 0.5, (4, 3, 1, 1))), _c("k", RNG.normal(0, 1, (8, 1)))]  # (8, 1) broadcasts over H, W
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="conv"), helper.make_node("Mul", ["h", "k"], ["y"], name="mul")]
    m = _model(nodes, inits, [1, 4, 8, 8])
    assert fold_conv_affine(m) == [] and len(m.graph.node) == 2


def test_equalization_keeps_the_function_and_balances_ranges():
    w1 = RNG.normal(0, 0.5, (4, 3, 3, 3)) * np.array([10.0, 0.1, 1.0, 3.0]).reshape(-1, 1, 1, 1)
    inits = [_c("w1", w1), _c("b1", RNG.normal(0, 0.1, 4)), _c("w2", RNG.normal(0, 0.5, (2, 4, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu"), helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    m = _model(nodes, inits, [1, 2, 8, 8])
    x = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    ref = _run(m, x)
    from quantkit.quantize.recovery.equalize import between

    pairs = equalize_pairs(m)
    assert pairs == [("conv1", "conv2")] and between(m, pairs) == ["h", "r"]  # their ranges are re-measured
    np.testing.assert_allclose(_run(m, x), ref, rtol=1e-4, atol=1e-5)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    r1 = np.abs(inits[m.graph.node[0].input[1]]).reshape(4, -1).max(1)
    r2 = np.abs(inits[m.graph.node[2].input[1]]).transpose(1, 0, 2, 3).reshape(4, -1).max(1)
    np.testing.assert_allclose(r1, r2, rtol=1e-5)


def test_fake_quant_weight_matches_what_ort_writes(tmp_path):
    intake = make_tiny_intake(tmp_path / "intake", size=16)
    cset = make_set(tmp_path / "set", 2, size=24)
    quantize(intake, StaticQuantConfig(per_channel=True), out=tmp_path / "q", calibration_set=cset)
    q = onnx.load(str(tmp_path / "q" / "model_int8.onnx"))
    qi = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    w = numpy_helper.to_array(next(i for i in onnx.load(str(intake / "model.onnx")).graph.initializer if i.name == "w1"))
    dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("w1"))
    deq = (qi[dq.input[0]].astype(np.float64)) * qi[dq.input[1]].reshape(-1, 1, 1, 1)
    np.testing.assert_allclose(fake_quant_weight(w, per_channel=True), deq, rtol=1e-6, atol=1e-9)


def test_bias_correction_removes_the_mean_shift():
    w = RNG.normal(0, 0.5, (4, 3, 1, 1))
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], [_c("w", w)], [1, 4, 8, 8])
    images = [(RNG.normal(0, 1, (1, 3, 8, 8)) + 2.0).astype(np.float32) for _ in range(3)]
    wq = fake_quant_weight(w.astype(np.float32), per_channel=False)
    ref = np.mean([_run(m, x).mean(axis=(0, 2, 3)) for x in images], axis=0)
    n, shift = correct_bias(m, StaticQuantConfig(per_channel=False), images, "x")
    assert n == 1 and shift > 0
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    b = inits[m.graph.node[0].input[2]]
    quant = [np.einsum("oi,nihw->nohw", wq[:, :, 0, 0], x).mean(axis=(0, 2, 3)) + b for x in images]
    np.testing.assert_allclose(np.mean(quant, axis=0), ref, atol=1e-5)  # the quantized weights' mean output is FP32's


def test_range_search_weighs_dark_images_like_bright_ones():
    from quantkit.artifacts.record import CalibrationRecord, TensorScale

    inits = [_c("w", np.eye(3).reshape(3, 3, 1, 1))]
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], inits, [1, 3, 64, 64], size=64)
    rec = CalibrationRecord(fingerprint="", model_digest="", quantized_model_digest="", calibration_set=None, config={}, config_hash="",
                            opset_before=13, opset_after=13, versions={}, tensors=(TensorScale("y", "activation", "uint8", None, (1.0,), (0,)),))
    rng = np.random.default_rng(0)
    uniform = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    chosen, counts = search_ranges(m, rec, StaticQuantConfig(), [uniform], "x", ["minmax", "p99.9"])
    assert counts == {"minmax": 1, "p99.9": 0} and chosen["y"] == pytest.approx((0.0, float(uniform.max())), rel=1e-6)
    bright = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    bright.ravel()[:6] = 50.0  # a few spikes set the min-max range ...
    dark = rng.uniform(0, 0.05, (1, 3, 64, 64)).astype(np.float32)  # ... which leaves a night image one or two codes
    chosen, counts = search_ranges(m, rec, StaticQuantConfig(), [bright, dark], "x", ["minmax", "p99.9"])
    assert counts == {"minmax": 0, "p99.9": 1} and chosen["y"][1] < 2


def test_hardswish_written_as_one_hardswish_node():
    """op="HardSwish": the chain becomes one HardSwish (opset 14) writing the chain's last tensor, so its
    calibrated range still applies and no new tensor needs a range; below opset 14 it is refused."""
    m = affine_hardswish_model()
    x = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    ref = _run(m, x)
    with pytest.raises(ValueError, match="opset 14"):
        hardswish_as_hardsigmoid(m, "HardSwish")
    plain = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [], [1, 3, 8, 8])
    assert hardswish_as_hardsigmoid(plain, "HardSwish") == []  # nothing to rewrite: no opset needed
    m.opset_import[0].version = 14
    fold_conv_affine(m)
    assert hardswish_as_hardsigmoid(m, "HardSwish") == ["mul_hs_HardSwish"]
    onnx.checker.check_model(m)
    assert [n.op_type for n in m.graph.node] == ["Conv", "HardSwish", "Conv"] and m.graph.node[1].output[0] == "hs"
    np.testing.assert_allclose(_run(m, x), ref, rtol=1e-5, atol=1e-5)
    assert new_ranges(m, {"ha": (-6.0, 1.5)}) == {}


def _fallback_base(tmp_path):
    """(intake, calibration set) of :func:`affine_hardswish_model` at 16x16, its all-8-bit model in ``tmp_path/base``."""
    m = affine_hardswish_model()
    for d in m.graph.input[0].type.tensor_type.shape.dim[2:]:
        d.dim_value = 16
    m.graph.output[0].type.tensor_type.shape.dim[2].dim_value = m.graph.output[0].type.tensor_type.shape.dim[3].dim_value = 16
    intake = _write_intake(m, tmp_path / "intake", 16)
    cset = make_set(tmp_path / "set", 3, size=24)
    quantize(intake, StaticQuantConfig(per_channel=True), out=tmp_path / "base", calibration_set=cset)
    return intake, cset


def test_fallback_with_hardswish_raises_the_opset_and_records_it(tmp_path):
    """fold_affine with hardswish_op HardSwish on an opset-13 model: raised to 14 by onnx's version converter,
    recorded in the step; the quantized model loads in ONNX Runtime and keeps HardSwish (in float) and no Div."""
    intake, cset = _fallback_base(tmp_path)
    config = FallbackConfig.from_dict({"target": 0.5, "latency": {"threads": [1], "repeats": 3, "warmup": 0},
                                       "recovery": {"fold_affine": True, "hardswish_op": "HardSwish"}})
    r = precision_fallback(intake, config, reference_sets=[cset], out=tmp_path / "fb", base=tmp_path / "base", calibration_set=cset)
    detail = r.recovery[0].detail
    assert detail["hardswish_rewritten"] == 1 and detail["hardswish_op"] == "HardSwish" and detail["opset_raised"] == "13 -> 14"
    q = onnx.load(str(tmp_path / "fb" / "model_int8.onnx"))
    ops = {n.op_type for n in q.graph.node}
    assert "HardSwish" in ops and not ops & {"HardSigmoid", "Div", "Clip"}
    assert next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")) >= 14
    ort.InferenceSession(str(tmp_path / "fb" / "model_int8.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="hardswish_op"):
        FallbackConfig.from_dict({"recovery": {"hardswish_op": "Swish"}})
    with pytest.raises(ConfigError, match="hardswish_op: HardSwish is what fold_affine writes hard-swish as; set fold_affine: true"):
        FallbackConfig.from_dict({"recovery": {"hardswish_op": "HardSwish"}})  # would be silently ignored


def test_fallback_records_each_recovery_step(tmp_path):
    intake, cset = _fallback_base(tmp_path)
    config = FallbackConfig.from_dict({"target": 0.5, "latency": {"threads": [1], "repeats": 3, "warmup": 0},
                                       "recovery": {"fold_affine": True, "equalization": True, "adaround": True, "adaround_iterations": 20,
                                                                    "range_search": True, "bias_correction": True, "images": 2}})
    r = precision_fallback(intake, config, reference_sets=[cset], out=tmp_path / "fb", base=tmp_path / "base", calibration_set=cset)
    assert [s.name for s in r.recovery] == ["fold_affine", "equalization", "adaround", "range_search", "bias_correction"]
    assert r.recovery[0].detail["affine_nodes_folded"] == 2 and r.recovery[0].detail["hardswish_rewritten"] == 1
    assert all(s.metric_after is not None for s in r.recovery) and r.recovery[0].metric_before is not None
    kept = r.recovery[0].metric_before  # each step starts from the last step kept (one that lowered the metric is undone)
    for s in r.recovery:
        assert s.metric_before == kept
        if s.detail.get("reverted"):
            assert s.metric_after < s.metric_before
        else:
            kept = s.metric_after
    assert r.rounds[0].metric == r.recovery[-1].metric_after  # the search starts from the recovered model (both on the search images)
    q = onnx.load(str(tmp_path / "fb" / "model_int8.onnx"))
    assert "HardSigmoid" in {n.op_type for n in q.graph.node} and "Div" not in {n.op_type for n in q.graph.node}


def test_adaround_lowers_the_output_error_and_keeps_the_scales(tmp_path):
    from quantkit.quantize.recovery.adaround import adaround

    w = RNG.normal(0, 0.5, (6, 3, 3, 3)).astype(np.float32)
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], [_c("w", w)], [1, 6, 8, 8])
    images = [RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    info = adaround(m, StaticQuantConfig(per_channel=True), images, "x", iterations=200, positions=64)
    assert info["layers"] == 1 and info["of"] == 1 and info["relative_error"] < 1.0
    w2 = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == m.graph.node[0].input[0 + 1]))
    np.testing.assert_allclose(np.abs(w2).reshape(6, -1).max(1), np.abs(w).reshape(6, -1).max(1), rtol=1e-6)  # scales frozen
    s = np.abs(w).reshape(6, -1).max(1).reshape(-1, 1, 1, 1) / 127
    np.testing.assert_allclose(w2 / s, np.round(w2 / s), atol=1e-3)  # on ORT's grid: quantizing reproduces the choice
    nearest = fake_quant_weight(w, per_channel=True)
    err = [np.mean((_run(m, x) - _run(_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [_c("w", w)], [1, 6, 8, 8]), x)) ** 2)
           for x in images]
    ref = [np.mean((_run(_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [_c("w", nearest)], [1, 6, 8, 8]), x)
                    - _run(_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [_c("w", w)], [1, 6, 8, 8]), x)) ** 2) for x in images]
    assert np.mean(err) < np.mean(ref)  # lower output error than rounding to nearest on the images it saw


@pytest.mark.parametrize("pads, group, folds", [([0, 0, 0, 0], 1, 2), ([0, 0, 0, 0], 4, 2), ([1, 1, 1, 1], 1, 0)])
def test_affine_before_an_unpadded_conv_folds_into_its_input_channels(pads, group, folds):
    from quantkit.quantize.recovery.fold import fold_affine_into_next_conv

    k = 3 if pads[0] else 1
    inits = [_c("c", RNG.normal(1, 0.3, (1, 4, 1, 1))), _c("d", RNG.normal(0, 0.5, (1, 4, 1, 1))),
             _c("w", RNG.normal(0, 0.5, (4, 4 // group, k, k))), _c("b", RNG.normal(0, 0.1, 4)), _c("w0", RNG.normal(0, 0.5, (4, 3, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], name="conv0"), helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Mul", ["c", "r"], ["m"], name="mul"), helper.make_node("Add", ["m", "d"], ["a"], name="add"),
             helper.make_node("Conv", ["a", "w", "b"], ["y"], name="conv", pads=pads, group=group)]
    m = _model(nodes, inits, [1, 4, 8, 8])
    x = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    ref = _run(m, x)
    assert len(fold_affine_into_next_conv(m)) == folds
    np.testing.assert_allclose(_run(m, x), ref, rtol=1e-5, atol=1e-5)


def test_nodes_kept_in_float_get_their_untuned_parameters(tmp_path):
    """Bias correction and AdaRound tune a layer for its 8-bit weights; in float the layer must be FP32's again,
    so keeping every node in float reproduces FP32."""
    intake = make_tiny_intake(tmp_path / "intake", size=16)
    cset = make_set(tmp_path / "set", 3, size=24)
    quantize(intake, StaticQuantConfig(per_channel=False), out=tmp_path / "base", calibration_set=cset)

    def agreement(ref, got):
        a = np.concatenate([next(iter(r.values())).ravel() for r in ref])
        b = np.concatenate([next(iter(g.values())).ravel() for g in got])
        return float(1 - np.abs(a - b).max() / np.abs(a).max())

    config = FallbackConfig.from_dict({"target": 0.999999, "prune": 0, "latency": {"threads": [1], "repeats": 3, "warmup": 0},
                                       "recovery": {"bias_correction": True, "adaround": True, "adaround_iterations": 20, "images": 2}})
    r = precision_fallback(intake, config, reference_sets=[cset], out=tmp_path / "fb", base=tmp_path / "base", calibration_set=cset,
                           metric=agreement)
    assert r.met and len(r.kept) == 3 and r.metric_after == pytest.approx(1.0, abs=1e-6)
    q = onnx.load(str(tmp_path / "fb" / "model_int8.onnx"))
    assert {i for n in q.graph.node for i in n.input} >= {"w1", "b1", "w2"}  # the intake's own parameters


def test_equalization_of_a_chain_of_three_convs():
    """Conv1 -> Relu -> Conv2 -> Relu -> Conv3: the second pair reads Conv2's weights as the first pair left them
    (a KeyError on the PP-OCR direction classifier before)."""
    inits = [_c("w1", RNG.normal(0, 0.5, (4, 3, 3, 3))), _c("w2", RNG.normal(0, 0.5, (4, 4, 3, 3))), _c("w3", RNG.normal(0, 0.5, (2, 4, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h1"], name="c1", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h1"], ["r1"], name="a1"),
             helper.make_node("Conv", ["r1", "w2"], ["h2"], name="c2", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h2"], ["r2"], name="a2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="c3")]
    m = _model(nodes, inits, [1, 2, 8, 8])
    x = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    ref = _run(m, x)
    assert equalize_pairs(m) == [("c1", "c2"), ("c2", "c3")]
    onnx.checker.check_model(m)
    names = [i.name for i in m.graph.initializer]
    assert len(names) == len(set(names)) == 3  # c2's weights rewritten twice under fresh names, the stale ones pruned
    np.testing.assert_allclose(_run(m, x), ref, rtol=1e-4, atol=1e-5)


def test_a_measured_step_that_lowers_the_metric_is_undone():
    """Recovery keeps a step only if the all-8-bit model scores no lower after it (a trial on rapidocr's recognizer
    kept an equalization that took it from 0.625 to 0.125); the last step is scored by the search itself."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize.recovery.apply import apply_recovery
    from quantkit.quantize.recovery.config import RecoveryConfig

    m = affine_hardswish_model()
    before = m.SerializeToString()
    rec = CalibrationRecord(fingerprint="f" * 64, model_digest="m" * 64, quantized_model_digest="q" * 64, calibration_set=None, config={},
                            config_hash="c" * 64, opset_before=13, opset_after=13, versions={}, tensors=(), calibrated_ranges={"ha": (-6.0, 1.5)})
    scores = iter([0.1, None])  # after fold_affine: lower than 0.9; equalization is the last step
    images = [RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    out = apply_recovery(m, rec, StaticQuantConfig(), RecoveryConfig(fold_affine=True, equalization=True, images=2), images=images,
                         input_name="x", measure=lambda *a: next(scores), metric_before=0.9)
    assert [(s.name, s.metric_before, s.metric_after) for s in out.steps] == [("fold_affine", 0.9, 0.1), ("equalization", 0.9, None)]
    assert out.steps[0].detail["reverted"] is True and "reverted" not in out.steps[1].detail
    assert [n.op_type for n in out.model.graph.node] == [n.op_type for n in onnx.load_from_string(before).graph.node]  # fold undone
    assert out.exact is out.model
    assert m.SerializeToString() == before  # the input model is never changed

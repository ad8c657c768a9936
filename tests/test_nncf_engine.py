"""NNCF as a second quantization engine (``quantize.engine: nncf``, issue 32): its record reads the scales of NNCF's own
Q/DQ nodes, bind accepts it, the same inputs give the same bytes, its int8 activation pairs are rewritten as uint8
on the same grid (OpenVINO miscomputes int8 pairs after a Concat), accuracy control writes the fallback's three
files, and what NNCF cannot honour is refused in one line. Tests that run NNCF are skipped only when it is not
installed (the ``test`` extra installs it)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.artifacts import CalibrationRecord
from quantkit.errors import ConfigError, MissingExtraError, UnsupportedOptionError
from quantkit.quantize import StaticQuantConfig, quantize
from test_quantize_fixtures import make_set, write_model_intake

needs_nncf = pytest.mark.skipif(importlib.util.find_spec("nncf") is None,
                                reason="nncf is not installed (pip install 'quantkit[nncf]', part of the test extra)")
SIZE = 16
NNCF = {"engine": "nncf", "placement": "nncf"}


def concat_map_model(size: int = SIZE) -> onnx.ModelProto:
    """``x -> conv_a, conv_b (signed outputs) -> Concat -> conv_c -> Relu -> 1x1 Conv (unnamed) -> Sigmoid -> y [1, 1, S, S]``:
    the DB head's shape (a Concat of signed maps into a Conv, a probability map out); one node left unnamed."""
    rng = np.random.default_rng(3)

    def w(name: str, shape: tuple[int, ...], s: float = 0.4) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    inits = [w("wa", (4, 3, 3, 3)), w("ba", (4,), 0.1), w("wb", (4, 3, 3, 3)), w("wc", (4, 8, 3, 3), 0.3), w("wd", (1, 4, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], name="concat", axis=1),
             helper.make_node("Conv", ["cat", "wc"], ["c"], name="conv_c", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wd"], ["d"], pads=[0, 0, 0, 0]),
             helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "concat_map", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("nncf")
    return {"intake": write_model_intake(concat_map_model(), root / "intake", SIZE), "set": make_set(root / "set", n=6, size=48),
            "root": root}


@pytest.fixture(scope="module")
def quantized(env: dict) -> dict:
    """NNCF's file with the default config (uint8 rewrite) and with NNCF's own int8 activations."""
    if importlib.util.find_spec("nncf") is None:
        pytest.skip("nncf is not installed (pip install 'quantkit[nncf]', part of the test extra)")
    out = {}
    for label, extra in (("u8", {}), ("s8", {"activation_type": "int8"})):
        out[label] = env["root"] / label
        out[f"{label}_record"] = quantize(env["intake"], StaticQuantConfig(**NNCF, **extra), out=out[label], calibration_set=env["set"])
    return out


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


@needs_nncf
def test_record_scales_are_the_qdq_scales_of_nncfs_file(env, quantized):
    import nncf

    rec: CalibrationRecord = quantized["u8_record"]
    q = onnx.load(str(quantized["u8"] / "model_int8.onnx"))
    fp = onnx.load(str(env["intake"] / "model.onnx"))
    inits, fp_weights = _inits(q), {i.name for i in fp.graph.initializer}
    consumers = {x: n for n in q.graph.node for x in n.input}
    fp_by_name = {n.name: n for n in fp.graph.node if n.name}
    seen = set()
    for n in q.graph.node:
        if n.op_type == "QuantizeLinear":  # an activation: its row is named by the float tensor it reads
            name = n.input[0]
        elif n.op_type == "DequantizeLinear" and n.input[0] in inits:  # a weight stored as int8
            user = consumers[n.output[0]]
            k = list(user.input).index(n.output[0])
            name = fp_by_name[user.name].input[k] if user.name in fp_by_name else None
            if name is None:  # the unnamed 1x1 Conv: NNCF kept the name quantkit gave it, <op_type>_<index>
                assert user.name == "Conv_5"
                name = "wd"
            assert name in fp_weights
        else:
            continue
        row = rec.tensor(name)
        assert row.scale == tuple(float(v) for v in inits[n.input[1]].astype(np.float32).ravel())
        assert row.zero_point == tuple(int(v) for v in inits[n.input[2]].ravel())
        assert row.calibrator == ("weights" if name in fp_weights else "nncf")
        seen.add(name)
    assert seen == {t.name for t in rec.tensors} and {"wa", "wb", "wc", "wd", "x", "a", "b"} <= seen
    assert rec.config["engine"] == "nncf" and rec.versions["nncf"] == nncf.__version__
    assert rec.calibration["nncf"]["preset"] == "mixed" and rec.calibration["nncf"]["subset_size"] == 6
    assert CalibrationRecord.load(quantized["u8"]) == rec


@needs_nncf
def test_int8_activation_pairs_become_uint8_on_the_same_grid(env, quantized):
    """NNCF writes signed activations as int8; the default config rewrites each per-tensor pair as uint8, zero point
    + 128: the file computes the same values (QDQ simulation), and the Concat-of-int8 pattern OpenVINO gets wrong is gone."""
    from quantkit.patterns import patterns_in
    from quantkit.runtimes import make_runtime

    u8, s8 = (onnx.load(str(quantized[k] / "model_int8.onnx")) for k in ("u8", "s8"))
    rewritten = quantized["u8_record"].calibration["activations_to_uint8"]
    assert {"a", "b"} <= set(rewritten)  # the Concat's inputs: signed
    for t in rewritten:
        a, b = quantized["s8_record"].tensor(t), quantized["u8_record"].tensor(t)
        assert (a.dtype, b.dtype) == ("int8", "uint8") and a.scale == b.scale and b.zero_point == (a.zero_point[0] + 128,)
    assert "concat_int8_conv" in dict(patterns_in(s8)) and "concat_int8_conv" not in dict(patterns_in(u8))
    x = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)}
    outs = []
    for m in (u8, s8):
        with make_runtime("onnxruntime", m.SerializeToString(), graph_optimization_level="disable") as r:
            outs.append(r.infer(x)["y"])
    np.testing.assert_array_equal(outs[0], outs[1])


@needs_nncf
def test_same_inputs_same_bytes(env, quantized, tmp_path):
    again = tmp_path / "again"
    quantize(env["intake"], StaticQuantConfig(**NNCF), out=again, calibration_set=env["set"])
    for f in ("model_int8.onnx", "record.json"):
        assert (again / f).read_bytes() == (quantized["u8"] / f).read_bytes(), f


@needs_nncf
def test_bind_accepts_nncfs_record(env, quantized, tmp_path):
    from quantkit.tasks import make_adapter
    from quantkit.thresholds import ThresholdsConfig, bind

    res = bind(quantized["u8"], env["intake"], env["set"], make_adapter("db_text"), ThresholdsConfig(min_agreement=0.0), tmp_path / "t.json")
    assert res.threshold_set.binding.record_fingerprint == quantized["u8_record"].fingerprint
    assert (tmp_path / "t.json").is_file()


@needs_nncf
def test_cli_json_is_the_only_stdout(env, run_cli, tmp_path):
    """NNCF prints progress bars and log lines; they go to stderr, so --json stays parseable."""
    code, out, _ = run_cli(["quantize", env["intake"], "--engine", "nncf", "--calibration-set", env["set"], "--out", tmp_path / "q", "--json"])
    assert code == 0
    assert json.loads(out)["calibration"]["engine"] == "nncf"


@needs_nncf
def test_accuracy_control_writes_the_fallbacks_three_files(env, tmp_path):
    """NNCF's quantize_with_accuracy_control at target 1.0 (max drop 0): what it returned to float is listed, and the
    record is read from the file written beside it."""
    from quantkit.artifacts.fallback import FallbackResult
    from quantkit.quantize.fallback import FallbackConfig
    from quantkit.quantize.fallback.accuracy_control import SEARCH, nncf_accuracy_control

    out = tmp_path / "ac"
    r = nncf_accuracy_control(env["intake"], FallbackConfig(target=1.0, timings=False), StaticQuantConfig(**NNCF),
                              reference_sets=[env["set"]], calibration_set=env["set"], out=out)
    assert FallbackResult.load(out) == r and r.search == SEARCH and len(r.rounds) == 2
    rec = CalibrationRecord.load(out)
    assert r.record_fingerprint == rec.fingerprint and rec.calibration["fallback"]["promoted"] == len(r.kept)
    q = onnx.load(str(out / "model_int8.onnx"))
    dq = {n.output[0] for n in q.graph.node if n.op_type == "DequantizeLinear"}
    for k in r.kept:  # nodes NNCF reverted read no dequantized tensor
        node = next(n for n in q.graph.node if n.name == k.name)
        assert not dq & set(node.input)
    assert r.kept and r.met and r.metric_after == 1.0 > r.metric_before  # the all-8-bit model agrees below 1.0 on this model


@pytest.mark.parametrize("fields, word", [
    ({"method": "entropy"}, "method"), ({"per_channel": False}, "placement"), ({"tensor_overrides": {"x": {"rmin": 0.0}}}, "tensor_overrides"),
    ({"calibration_graph": "optimized"}, "calibration_graph"), ({"activation_type": "uint16"}, "activation_type"),
    ({"symmetric_weights": False}, "placement"), ({"placement": "openvino"}, "placement"), ({"op_types_to_quantize": ["Conv"]}, "op_types_to_quantize"),
])
def test_what_nncf_cannot_honour_is_refused_in_one_line(fields, word):
    with pytest.raises(UnsupportedOptionError) as e:
        StaticQuantConfig.from_dict({**NNCF, **fields}, where="params.yaml:quantize")
    msg = str(e.value)  # placement: nncf names what its recipe needs (per-channel, symmetric weights) first
    assert "\n" not in msg and msg.startswith(f"params.yaml:quantize.{word}: ") and ("engine" in msg or "placement: nncf" in msg)


def test_nncf_placement_needs_nncf_engine():
    with pytest.raises(UnsupportedOptionError, match=r"placement: nncf is NNCF's own placement; set engine: nncf"):
        StaticQuantConfig(placement="nncf")
    with pytest.raises(ConfigError, match="applied by engine nncf"):
        from quantkit.quantize.placement import NNCF, plan_placement

        plan_placement(NNCF, concat_map_model(), ["Conv"], [])


def test_a_missing_nncf_names_the_extra(env, monkeypatch, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "nncf", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'quantkit\[nncf\]'"):
        quantize(env["intake"], StaticQuantConfig(**NNCF), out=tmp_path / "q", calibration_set=env["set"])
    assert not (tmp_path / "q").exists()


@needs_nncf
def test_nncfs_record_is_refused_where_ort_ranges_are_needed(env, quantized, tmp_path):
    """NNCF keeps no calibrated ranges: replaying its record, reusing its ranges or starting quantkit's fallback from it
    is refused naming the way that works."""
    from quantkit.quantize import replay
    from quantkit.quantize.fallback import FallbackConfig, precision_fallback

    with pytest.raises(ConfigError, match="written by engine nncf"):
        replay(quantized["u8"], env["intake"], out=tmp_path / "r")
    with pytest.raises(ConfigError, match="quantkit fallback --engine nncf"):
        precision_fallback(env["intake"], FallbackConfig(), reference_sets=[env["set"]], out=tmp_path / "f", base=quantized["u8"])

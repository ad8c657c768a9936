"""A depthwise Conv's input whose channels one per-tensor 8-bit scale flattens (issue 37, a cause of ORT's placement losing
to NNCF's per-channel activations on PicoDet and the PP-OCR detector): the cause shown on a small model, and the finding
``quantkit compare`` prints for it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.artifacts.record import TensorScale
from quantkit.quantize.depthwise import depthwise_inputs, finding_lines, narrow_channels
from test_quantize_fixtures import make_set, write_model_intake

C = 8
SIZE = 16


def _model(dead: bool = False) -> onnx.ModelProto:
    """x [1, 3, H, W] -> 1x1 Conv to 8 channels whose gains span 1000x (channel c: 10**(c * 3 / 7)) -> Relu -> depthwise
    3x3 Conv (group 8) -> y. ``dead``: channel 0's gain is 0 (a constant channel)."""
    gains = np.array([10 ** (-3 + 3 * c / (C - 1)) for c in range(C)], np.float32)
    if dead:
        gains[0] = 0.0
    w1 = np.ones((C, 3, 1, 1), np.float32) * gains[:, None, None, None]
    w2 = np.random.default_rng(0).normal(size=(C, 1, 3, 3)).astype(np.float32) / gains.clip(1e-3)[:, None, None, None]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="pointwise"), helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="depthwise", group=C, pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, SIZE, SIZE])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


class _Record:
    def __init__(self, *tensors: TensorScale) -> None:
        self.tensors = tensors


def _inputs(n: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(0, 1, (1, 3, SIZE, SIZE)).astype(np.float32) for _ in range(n)]


def _per_tensor(hi: float) -> TensorScale:
    return TensorScale("r", "activation", "uint8", None, (hi / 255,), (0,), 0.0, hi, "minmax")


def _fake_quant(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x / scale), 0, 255) * scale


def _run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {m.graph.input[0].name: x.astype(np.float32)})[0]


def _depthwise_only(m: onnx.ModelProto) -> onnx.ModelProto:
    """The depthwise Conv of :func:`_model` alone: r [1, 8, H, W] -> y."""
    g = helper.make_graph([helper.make_node("Conv", ["r", "w2"], ["y"], group=C, pads=[1, 1, 1, 1])], "dw_only",
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, C, SIZE, SIZE])], list(m.graph.output),
                          [i for i in m.graph.initializer if i.name == "w2"])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _sqnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10((a ** 2).sum() / ((a - b) ** 2).sum()))


def test_the_cause_one_scale_loses_the_narrow_channels_a_per_channel_scale_keeps():
    m = _model()
    x = _inputs(1)[0]
    gains = np.array([10 ** (-3 + 3 * c / (C - 1)) for c in range(C)])
    r = np.maximum(0, x[0].sum(0)[None, None] * gains[None, :, None, None])  # the depthwise input, per channel
    y = _run(m, x)
    assert np.allclose(_run(_depthwise_only(m), r), y, rtol=1e-4, atol=1e-5)
    hi = r.reshape(C, -1).max(1)
    per_tensor = _run(_depthwise_only(m), _fake_quant(r, np.full((1, C, 1, 1), hi.max() / 255)))
    per_channel = _run(_depthwise_only(m), _fake_quant(r, (hi / 255)[None, :, None, None]))
    narrowest = slice(0, 3)  # channels 0-2 span under 16 steps of the widest channel's grid
    assert _sqnr(y[:, narrowest], per_tensor[:, narrowest]) < 10
    assert _sqnr(y[:, narrowest], per_channel[:, narrowest]) > 35


def test_depthwise_inputs_names_the_depthwise_conv_only():
    assert depthwise_inputs(_model()) == {"r": "depthwise"}


def test_narrow_channels_under_one_scale_are_found_and_counted():
    xs = _inputs()
    r_hi = max(float(np.maximum(0, x.sum(1)).max()) for x in xs)  # channel 7's gain is 1: its range is the widest
    found = narrow_channels(_model(), _Record(_per_tensor(r_hi)), xs)
    assert len(found) == 1
    hit = found[0]
    assert (hit.conv, hit.tensor, hit.channels, hit.live) == ("depthwise", "r", C, C)
    # channel c's values are 10**(-3 + 3c/7) x relu(sum of x): its span in steps of the one scale r_hi / 255
    s = np.stack([np.maximum(0, x.sum(1)) for x in xs])
    span = (s.max() - s.min()) * np.array([10 ** (-3 + 3 * c / (C - 1)) for c in range(C)])
    expected = tuple(c for c in range(C) if span[c] / (r_hi / 255) < 16)
    assert hit.narrow == expected and len(expected) == 5  # gains 0.001 .. 0.05 of the widest
    assert np.allclose(hit.levels, span / (r_hi / 255), rtol=1e-4)
    lines = finding_lines(found)
    assert lines[0].startswith("NARROW CHANNELS: depthwise Conv 'depthwise' input 'r': 5 of 8 channels")
    assert "NNCF" in lines[-1] and "quantkit fallback" in lines[-1]


def test_a_per_channel_scale_on_the_input_is_not_a_finding():
    xs = _inputs()
    his = np.array([max(float(np.maximum(0, x.sum(1)).max()) for x in xs) * 10 ** (-3 + 3 * c / 7) for c in range(C)])
    per_channel = TensorScale("r", "activation", "uint8", 1, tuple(float(h / 255) for h in his), (0,) * C, 0.0, float(his.max()), "minmax")
    assert narrow_channels(_model(), _Record(per_channel), xs) == []


def test_a_constant_channel_is_not_narrow_and_an_unquantized_input_is_not_read():
    xs = _inputs()
    r_hi = max(float(np.maximum(0, x.sum(1)).max()) for x in xs)
    hit = narrow_channels(_model(dead=True), _Record(_per_tensor(r_hi)), xs)[0]
    assert hit.live == C - 1 and 0 not in hit.narrow
    assert narrow_channels(_model(), _Record(), xs) == []


def test_compare_cli_prints_the_finding(tmp_path, run_cli):
    from quantkit.quantize import StaticQuantConfig, quantize

    intake = write_model_intake(_model(), tmp_path / "intake", SIZE)
    cset = make_set(tmp_path / "set", 3, size=24)
    quantize(intake, StaticQuantConfig(per_channel=True), out=tmp_path / "q", calibration_set=cset)
    code, out, _ = run_cli(["compare", intake, tmp_path / "q", "--set", cset, "--no-runtimes"])
    assert code == 0
    assert "NARROW CHANNELS: depthwise Conv 'depthwise' input 'r'" in out and "1 depthwise input flattened by one scale" in out
    code, out, _ = run_cli(["compare", intake, tmp_path / "q", "--set", cset, "--no-runtimes", "--json"])
    import json

    assert any(f.startswith("NARROW CHANNELS") for f in json.loads(out)["findings"])

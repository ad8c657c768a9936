"""A depthwise Conv's input whose channels one per-tensor 8-bit scale flattens (issue 37, a cause of ORT's placement losing
to NNCF's per-channel activations on PicoDet and the PP-OCR detector): the cause shown on a small model, and the finding
``quantkit compare`` prints for it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.artifacts.record import TensorScale
from quantkit.quantize.depthwise import depthwise_inputs, finding_lines, narrow_channels
from test_nncf_engine import needs_nncf
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


# --- the fix in our openvino placement: the depthwise input per channel ------------------------------------------------


def test_openvino_placement_quantizes_the_depthwise_input_per_channel_from_the_records_means(tmp_path):
    import onnxruntime as ort

    from quantkit.artifacts import CalibrationRecord
    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.reuse import quantize_with_ranges

    intake = write_model_intake(_model(), tmp_path / "intake", SIZE)
    cset = make_set(tmp_path / "set", 4, size=24)
    quantize(intake, StaticQuantConfig(per_channel=True), out=tmp_path / "ort", calibration_set=cset)
    rec = CalibrationRecord.load(tmp_path / "ort")
    got = rec.calibration["depthwise_ranges"]["r"]
    # NNCF's estimator, computed here independently: the mean over images of each image's per-channel min and max of r
    note = ExportNote.load(intake / "export_note.json")
    m = _model()
    m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rs = [sess.run(["r"], {"x": x})[0][0].reshape(C, -1) for _, x in CalibrationSetReader(CalibrationSet.load(cset), note.preprocessing).iter_batches()]
    assert np.allclose(got["lo"], np.mean([r.min(1) for r in rs], 0), rtol=1e-5, atol=1e-7)
    assert np.allclose(got["hi"], np.mean([r.max(1) for r in rs], 0), rtol=1e-5)
    assert [t.axis for t in rec.tensors if t.name == "r"] == [None]  # ORT's placement: one scale (QLinearConv takes one)

    quantize_with_ranges(tmp_path / "ort", intake, StaticQuantConfig(per_channel=True, placement="openvino"), out=tmp_path / "ov")
    ov = CalibrationRecord.load(tmp_path / "ov")
    r = next(t for t in ov.tensors if t.name == "r")
    assert r.axis == 1 and len(r.scale) == C and ov.calibration["depthwise_ranges"] == rec.calibration["depthwise_ranges"]
    assert np.allclose(r.representable()[1], np.maximum(got["hi"], 0), rtol=1e-2)  # each channel on its own grid
    qm = onnx.load(str(tmp_path / "ov" / "model_int8.onnx"))
    pair = [n for n in qm.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] == "r_scale"]
    assert len(pair) == 2 and all(helper.get_attribute_value(next(a for a in n.attribute if a.name == "axis")) == 1 for n in pair)
    xs = [x for _, x in CalibrationSetReader(CalibrationSet.load(cset), note.preprocessing).iter_batches()]
    assert narrow_channels(_model(), ov, xs) == [] and narrow_channels(_model(), rec, xs)  # the finding is gone where it was



def test_a_pair_another_op_also_reads_keeps_one_scale():
    from quantkit.quantize.depthwise import per_channel_inputs

    m = helper.make_model(helper.make_graph(
        [helper.make_node("QuantizeLinear", ["r", "r_scale", "r_zero_point"], ["rq"]),
         helper.make_node("DequantizeLinear", ["rq", "r_scale", "r_zero_point"], ["rd"]),
         helper.make_node("Conv", ["rd", "w2"], ["y"], name="depthwise", group=C), helper.make_node("Relu", ["rd"], ["z"], name="other")],
        "shared", [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, C, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0.1, np.float32), "r_scale"), numpy_helper.from_array(np.array(0, np.uint8), "r_zero_point"),
         numpy_helper.from_array(np.ones((C, 1, 1, 1), np.float32), "w2")]), opset_imports=[helper.make_opsetid("", 13)])
    ranges = {"r": (np.zeros(C), np.arange(1, C + 1, dtype=float))}
    assert per_channel_inputs(m, {"r": "depthwise"}, ranges, symmetric=False) == []
    m.graph.node.pop()  # the Relu gone: only the depthwise Conv reads the pair
    assert per_channel_inputs(m, {"r": "depthwise"}, ranges, symmetric=False) == ["r"]
    s = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "r_scale"))
    assert np.allclose(s, np.arange(1, C + 1) / 255)


def test_output_channels_keep_per_image_means_through_a_checkpoint():
    from quantkit.quantize.outputs import OutputChannels

    oc = OutputChannels({"t": (1,)})
    oc.fold("t", np.array([[[0.0, 1.0], [2.0, 4.0]]]))  # image 1: channel 0 in [0, 1], channel 1 in [2, 4]
    oc.fold("t", np.array([[[-1.0, 3.0], [2.0, 2.0]]]))  # image 2: [-1, 3], [2, 2]
    back = OutputChannels.from_arrays(oc.to_arrays())
    for st in (oc, back):
        (g,), (m,) = st.ranges(), st.mean_ranges()
        assert g.lo == (-1.0, 2.0) and g.hi == (3.0, 4.0) and m.lo == (-0.5, 2.0) and m.hi == (2.0, 3.0)


@needs_nncf
def test_nncf_ranges_in_our_openvino_placement_keep_their_per_channel_depthwise_pairs(tmp_path):
    """``nncf:openvino`` collapsed NNCF's per-channel depthwise pairs into one scale (PicoDet 0.669 against NNCF's 0.969)."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.reuse import quantize_with_ranges

    intake = write_model_intake(_model(), tmp_path / "intake", SIZE)
    cset = make_set(tmp_path / "set", 4, size=24)
    quantize(intake, StaticQuantConfig(per_channel=True, engine="nncf", placement="nncf"), out=tmp_path / "nncf", calibration_set=cset)
    own = next(t for t in CalibrationRecord.load(tmp_path / "nncf").tensors if t.name == "r")
    assert own.axis == 1 and len(own.scale) == C  # NNCF's own file: per channel
    quantize_with_ranges(tmp_path / "nncf", intake, StaticQuantConfig(per_channel=True, engine="ort", placement="openvino"), out=tmp_path / "ov")
    r = next(t for t in CalibrationRecord.load(tmp_path / "ov").tensors if t.name == "r")
    assert r.axis == 1 and np.allclose(r.representable()[1], own.representable()[1], rtol=1e-3)

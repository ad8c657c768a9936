"""Localisation names the node whose output codes differ from the QDQ simulation, before its consumer: a Conv ->
linear Resize -> Conv model where the "runtime" moves the Resize's output by one code on a share of its elements (the
consumer Conv amplifies that into several steps), and where it moves only a handful of them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.runtimes import available_runtimes, make_runtime
from quantkit.runtimes.divergence import MAX_CODE_SHARE, compare_tensor
from quantkit.runtimes.localize import RuntimeReference, StoredReference, dq_scales, local_model, localize, quantized_tensors


def _qdq(nodes: list, inits: list, x: str, scale: float, name: str) -> str:
    inits += [numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s"), numpy_helper.from_array(np.array(128, np.uint8), f"{name}_z")]
    nodes += [helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"], name=f"{name}_q"),
              helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"], name=f"{name}_dq")]
    return f"{name}_dq"


def _weight(nodes: list, inits: list, w: np.ndarray, name: str) -> str:
    s = (np.abs(w).max(axis=(1, 2, 3)) / 127).astype(np.float32)
    inits += [numpy_helper.from_array(np.clip(np.round(w / s[:, None, None, None]), -127, 127).astype(np.int8), f"{name}_q"),
              numpy_helper.from_array(s, f"{name}_s"), numpy_helper.from_array(np.zeros(len(s), np.int8), f"{name}_z")]
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"], name=f"{name}_dq", axis=0))
    return f"{name}_dq"


def conv_resize_conv(coord: str = "asymmetric") -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x [1,3,16,16] -> QDQ -> Conv -> QDQ (0.04) -> Resize linear 2x -> QDQ (0.04) -> Conv -> QDQ (0.02): tensors
    ``in_dq``, ``c_dq``, ``r_dq`` (the Resize's), ``y_dq`` (the output)."""
    rng = np.random.default_rng(0)
    nodes: list = []
    inits: list = []
    x = _qdq(nodes, inits, "x", 0.03, "in")
    nodes.append(helper.make_node("Conv", [x, _weight(nodes, inits, rng.normal(0, 0.3, (4, 3, 3, 3)), "w1")], ["c"], name="conv1", pads=[1, 1, 1, 1]))
    c = _qdq(nodes, inits, "c", 0.04, "c")
    inits += [numpy_helper.from_array(np.zeros(0, np.float32), "roi"), numpy_helper.from_array(np.zeros(0, np.float32), "scales"),
              numpy_helper.from_array(np.array([1, 4, 32, 32], np.int64), "sizes")]
    nodes.append(helper.make_node("Resize", [c, "roi", "scales", "sizes"], ["r"], name="resize", mode="linear", coordinate_transformation_mode=coord))
    r = _qdq(nodes, inits, "r", 0.04, "r")
    nodes.append(helper.make_node("Conv", [r, _weight(nodes, inits, rng.normal(0, 0.15, (4, 4, 3, 3)), "w2")], ["y"], name="conv2", pads=[1, 1, 1, 1]))
    y = _qdq(nodes, inits, "y", 0.02, "y")
    g = helper.make_graph(nodes, "conv_resize_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 4, 32, 32])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def moving_runtime(feed: dict[str, np.ndarray], moves: dict[str, tuple[str, np.ndarray, float]]):
    """A fake target: ONNX Runtime's simulation, except that in every cut or local model holding the node ``node`` of
    ``moves`` (``{node: (its output's DequantizeLinear, mask, codes)}``) that DequantizeLinear's output moves by
    ``codes`` steps where ``mask`` is set: the node computes those codes differently."""
    def run(model, outputs, extra=None):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        steps = dq_scales(m)
        names = {n.name for n in m.graph.node}
        moved = {dq: (mask, codes) for node, (dq, mask, codes) in moves.items() if node in names}
        nodes, renamed = [], {}
        for n in m.graph.node:
            nodes.append(n)
            if n.name in moved:
                mask, codes = moved[n.name]
                out = n.output[0]
                renamed[out] = f"{out}_moved"
                m.graph.initializer.append(numpy_helper.from_array((mask * codes * steps[out]).astype(np.float32), f"{out}_delta"))
                nodes.append(helper.make_node("Add", [out, f"{out}_delta"], [f"{out}_moved"], name=f"{n.name}_moved"))
        for n in nodes:
            if not n.name.endswith("_moved"):
                n.input[:] = [renamed.get(i, i) for i in n.input]
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        del m.graph.output[:]
        m.graph.output.extend(helper.make_tensor_value_info(renamed.get(o, o), TensorProto.FLOAT, None) for o in outputs)
        inputs = {i.name for i in m.graph.input}
        with make_runtime("onnxruntime", m, graph_optimization_level="disable", name="moving") as rt:
            got = rt.infer({k: v for k, v in {**feed, **(extra or {})}.items() if k in inputs}, [renamed.get(o, o) for o in outputs])
        return {o: got[renamed.get(o, o)] for o in outputs}
    return run


def _mask(share: float, seed: int = 1, shape: tuple[int, ...] = (1, 4, 32, 32)) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) < share


def _localize(model, feed, target, **kw):
    steps = dq_scales(model)
    return localize(model, feed, target, kw.pop("reference", RuntimeReference(model, feed, graph_optimization_level="disable")),
                    tolerance=dict(steps), max_mismatch=0.01, **kw)


def test_a_resize_whose_codes_move_by_one_is_named_not_the_conv_after_it():
    model, feed = conv_resize_conv()
    div = _localize(model, feed, moving_runtime(feed, {"resize": ("r_dq", _mask(0.2), 1.0)}))
    assert div is not None and div.confirmed and div.alone
    assert (div.tensor, div.node, div.op_type) == ("r_dq", "resize", "Resize")
    # within one step everywhere: by the tolerance alone the Resize agrees, and its consumer was blamed
    assert 0.15 < div.at.code_share < 0.25 and div.at.mismatch == 0 and div.at.max_steps <= 1.001
    assert div.outputs[0].diverged and div.outputs[0].mismatch > 0.01 and div.outputs[0].max_steps > 1.5  # conv2 amplifies it
    assert div.others == () and "'r_dq' from Resize 'resize', on its own" in div.describe()
    assert div.to_dict()["alone"] and div.to_dict()["at"]["code_share"] == div.at.code_share


def test_a_handful_of_one_code_differences_is_not_blamed():
    """Five elements of the Resize off by one code (0.12%, below MAX_CODE_SHARE) while conv2 itself is 3 steps off on 5% of
    its output: conv2 is named, and the Resize is not listed among the nodes that differ on their own."""
    model, feed = conv_resize_conv()
    few = np.zeros((1, 4, 32, 32), bool)
    few.flat[[3, 400, 1000, 2222, 4000]] = True
    div = _localize(model, feed, moving_runtime(feed, {"resize": ("r_dq", few, 1.0), "conv2": ("y_dq", _mask(0.05, seed=2), 3.0)}))
    assert div is not None and div.confirmed and div.alone
    assert (div.tensor, div.node) == ("y_dq", "conv2")
    r = next(i for i in div.inputs if i.tensor == "r_dq")
    assert not r.diverged and 0 < r.code_share < MAX_CODE_SHARE  # the Resize on its own: five codes differ, below the share
    assert all(o.tensor != "r_dq" for o in div.others)
    ctx = moving_runtime(feed, {"resize": ("r_dq", few, 1.0)})(model, ["r_dq"])["r_dq"]
    ref = RuntimeReference(model, feed, graph_optimization_level="disable").values(["r_dq"])["r_dq"][0]
    c = compare_tensor("r_dq", ctx, ref, None, 0.04, 0.01, step=0.04, max_code_share=MAX_CODE_SHARE)
    assert c.code_share == r.code_share and not c.diverged  # the same in the model up to it


def test_without_whole_reference_tensors_the_cuts_name_the_resize_too():
    """A stored reference (a bundle's golden activations) and no simulation to feed nodes alone: bisection over cuts, by
    the same rule (codes that differ count), still names the Resize and not its consumer."""
    model, feed = conv_resize_conv()
    ref = RuntimeReference(model, feed, graph_optimization_level="disable")
    cands = quantized_tensors(model)
    stored = StoredReference({t: (ref.values([t])[t][0], None) for t in cands})
    div = _localize(model, feed, moving_runtime(feed, {"resize": ("r_dq", _mask(0.2), 1.0)}), reference=stored)
    assert div is not None and not div.alone and div.context is None
    assert (div.tensor, div.node) == ("r_dq", "resize") and div.at.code_share > MAX_CODE_SHARE and div.at.mismatch == 0
    assert div.confirmed and "'r_dq' from Resize 'resize': in the model up to it 2" in div.describe() and "on its own" not in div.describe()


def test_a_simulation_that_differs_from_the_stored_reference_stops_the_nodes_on_their_own():
    """A bundle whose golden activations are not what the simulation here computes for its model file (here: conv1's
    codes moved in the stored values): nodes are judged on their own only before that tensor, and the describe says so."""
    model, feed = conv_resize_conv()
    sim = RuntimeReference(model, feed, graph_optimization_level="disable")
    stored = {t: (sim.values([t])[t][0].copy(), None) for t in quantized_tensors(model)}
    stored["c_dq"][0].flat[::3] += 0.04  # a third of conv1's codes moved by one in the "golden" data
    target = moving_runtime(feed, {"resize": ("r_dq", _mask(0.2), 1.0)})
    div = _localize(model, feed, target, reference=StoredReference(stored), simulation=sim)
    assert div is not None and div.simulation_differs == "c_dq" and not div.alone
    assert div.tensor == "c_dq" and "the simulation here differs from the reference at 'c_dq'" in div.describe()


def test_local_model_requantizes_the_simulation_codes():
    """conv2 on its own: its input is the Resize's QuantizeLinear input, fed the simulation's r_dq; ORT at level all
    (fused integer kernels) then gives the simulation's codes, and the model holds conv2's nodes only."""
    model, feed = conv_resize_conv()
    ref = RuntimeReference(model, feed, graph_optimization_level="disable")
    vals = {t: v for t, (v, _) in ref.values(["r_dq", "y_dq"]).items()}
    sub, inputs = local_model(model, "y_dq", ["r_dq"], vals)
    assert inputs == {"r": "r_dq"} and {n.name for n in sub.graph.node} == {"r_q", "r_dq", "w2_dq", "conv2", "y_q", "y_dq"}
    with make_runtime("onnxruntime", sub, graph_optimization_level="all", name="local") as rt:
        got = rt.infer({"r": vals["r_dq"]}, ["y_dq"])["y_dq"]
    c = compare_tensor("y_dq", got, vals["y_dq"], None, 0.02, 0.01, step=0.02, max_code_share=MAX_CODE_SHARE)
    assert c.code_share < 0.001 and not c.diverged


@pytest.mark.skipif("openvino" not in available_runtimes(), reason="openvino is not installed (pip install 'quantkit[openvino]')")
def test_compare_names_openvinos_linear_resize():
    """The issue's case on the real runtime: OpenVINO's 2x linear Resize (asymmetric) moves one code on ~6% of its elements
    (values on or near half a step), conv2 turns that into 1.3% of outputs beyond one step; compare names the Resize."""
    from quantkit.quantize.runtime_compare import compare_runtimes

    model, feed = conv_resize_conv()
    rc = compare_runtimes(model, model, [feed], runtimes=["openvino"])
    (label, div), = rc.parts
    if div is None:
        pytest.skip(f"{label} does not part from the simulation on this model here")
    assert (div.tensor, div.op_type) == ("r_dq", "Resize") and div.alone and div.at.code_share > MAX_CODE_SHARE
    assert div.at.max_steps <= 1.001

"""The bundle round trip on the real embedded PP-OCRv4 detector (small input, random calibration)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper
from test_bundle_fixtures import (
    make_ppocr_intake,
    make_quantized,
    make_text_set,
    make_thresholds,
    read_members,
    repack,
)

from quantkit.bundle import BundleConfig, VerifyConfig, build_bundle, verify_bundle
from quantkit.runtimes import available_runtimes


@pytest.mark.slow
def test_ppocr_bundle_verifies_localises_and_names_unsupported_op(tmp_path: Path) -> None:
    intake = make_ppocr_intake(tmp_path / "intake", size=96)
    site = make_text_set(tmp_path / "site")
    q = make_quantized(intake, tmp_path / "quantize" / "deployed", seed=1, images=site)
    ts = make_thresholds(q, tmp_path / "deployed.json")
    # 96 px and four calibration images: ORT's fused kernels move up to ~1.5% of output pixels by more than a step
    # (the demo at 640 px: 0.08-0.23%), so this bundle allows 5%
    res = build_bundle(q, ts, intake, site, tmp_path / "dist", BundleConfig(golden_count=2, max_mismatch=0.05, patterns=False))
    members = read_members(res.path)
    man = json.loads(members["manifest.json"])
    assert res.golden == 2 and res.activations > 200 and man["model"]["outputs"][0]["scale"]
    report = verify_bundle(res.path)
    assert report.ok, report.failures
    assert report.runs[0].precision.integer_share > 0.9
    if "openvino" in available_runtimes():
        # OpenVINO 2026.4's CPU plugin throws in MultiplyPartialTransformation on this model (a scalar-weight Mul of
        # the MobileOne block, which intake's ORT pre-processing folds away): reported as a refusal, named
        r = verify_bundle(res.path, VerifyConfig(runtimes=("openvino",)))
        assert r.ok or (r.failures[0].kind == "support" and "query_model" in r.failures[0].detail), r.failures

    # a runtime without Resize (the short profile form)
    (tmp_path / "p.json").write_text(json.dumps({"name": "no-resize", "ops": {op.split(":")[1]: [1, 99] for op in man["model"]["ops"]
                                                                               if not op.endswith(":Resize")}}))
    r = verify_bundle(res.path, VerifyConfig(target=str(tmp_path / "p.json")))
    assert [c.kind for c in r.failures] == ["profile"] and "Resize (unsupported_op)" in r.failures[0].detail

    # negate the weights of the 3rd Conv: layer-wise comparison names the first tensor they change
    m = onnx.load_from_string(members["model_int8.onnx"])
    conv = [n for n in m.graph.node if n.op_type == "Conv"][2]
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == conv.input[1])
    src = dq.input[0]  # an int8 weight, or the QuantizeLinear of a float weight
    q_node = next((n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.output[0] == src), None)
    weight = q_node.input[0] if q_node else src
    _negate(m, weight)
    members["model_int8.onnx"] = m.SerializeToString()
    r = verify_bundle(repack(members, tmp_path / "tampered", update_manifest=True))
    # the shipped model holds weights in Constant nodes quantized by a QuantizeLinear at run time, so the weight's
    # DequantizeLinear output is a candidate and the first to diverge; with initializer weights it is the Conv output
    assert not r.ok and r.divergence is not None and r.divergence.confirmed
    producer = {o: (n.name or o) for n in m.graph.node for o in n.output}  # an unnamed Constant is named by its output
    assert r.divergence.node in (conv.name, producer.get(weight, weight)), r.divergence
    assert any(c.kind == "output" and c.status == "fail" for c in r.checks)


def _negate(model: onnx.ModelProto, name: str) -> None:
    """Negate the constant tensor ``name`` (an initializer or a Constant node's value)."""
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(t), name))
            return
    node = next(n for n in model.graph.node if n.op_type == "Constant" and n.output[0] == name)
    attr = next(a for a in node.attribute if a.name == "value")
    attr.t.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(attr.t), attr.t.name))

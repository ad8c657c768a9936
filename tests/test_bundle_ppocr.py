"""The bundle round trip on the real embedded PP-OCRv4 detector (small input, random calibration)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from quantkit.bundle import VerifyConfig, build_bundle, verify_bundle
from test_bundle_fixtures import make_golden_set, make_ppocr_intake, make_quantized, make_thresholds, read_members, repack


@pytest.mark.slow
def test_ppocr_bundle_verifies_localises_and_names_unsupported_op(tmp_path: Path) -> None:
    intake = make_ppocr_intake(tmp_path / "intake", size=64)
    q = make_quantized(intake, tmp_path / "quantize" / "deployed", seed=1)
    ts = make_thresholds(q, tmp_path / "deployed.json")
    res = build_bundle(q, ts, intake, make_golden_set(tmp_path / "site", n=2), tmp_path / "dist")
    members = read_members(res.path)
    man = json.loads(members["manifest.json"])
    assert res.golden == 2 and res.activations > 200 and man["model"]["outputs"][0]["scale"]
    report = verify_bundle(res.path)
    assert report.ok, report.failures

    # a runtime without Resize (simple profile format)
    (tmp_path / "p.json").write_text(json.dumps({"name": "no-resize", "ops": {op.split(":")[1]: [1, 99] for op in man["model"]["ops"]
                                                                               if not op.endswith(":Resize")}}))
    r = verify_bundle(res.path, VerifyConfig(target=str(tmp_path / "p.json")))
    assert [c.kind for c in r.failures] == ["support"] and "Resize not supported" in r.failures[0].detail

    # negate the int8 weights of the 21st Conv: layer-wise comparison names that Conv's output
    m = onnx.load_from_string(members["model_int8.onnx"])
    conv = [n for n in m.graph.node if n.op_type == "Conv"][20]
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == conv.input[1])
    src = dq.input[0]  # an int8 initializer, or the output of a QuantizeLinear of a float initializer
    q_node = next((n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.output[0] == src), None)
    w = next(i for i in m.graph.initializer if i.name == (q_node.input[0] if q_node else src))
    w.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(w), w.name))
    members["model_int8.onnx"] = m.SerializeToString()
    r = verify_bundle(repack(members, tmp_path / "tampered", update_manifest=True))
    assert not r.ok and r.divergence is not None and r.divergence.tensor == conv.output[0]

"""The risky-pattern suite: every pattern on every installed runtime vs ONNX's reference evaluator; detection in
real graphs; the lookup the quantize engine uses; ``quantkit doctor``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from quantkit.cli.main import main
from quantkit.patterns import (
    PATTERNS,
    PatternMatrix,
    PatternResult,
    failing_patterns,
    get_pattern,
    patterns_in,
    run_pattern,
    runtime_variants,
)
from quantkit.patterns.suite import reference_output
from quantkit.runtimes import available_runtimes
from quantkit.runtimes.divergence import MAX_CODE_SHARE


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_pattern_runs_on_every_installed_runtime(pattern):
    variants = runtime_variants()
    assert {v.runtime for v in variants} == set(available_runtimes())
    case = pattern.build()
    ref = reference_output(case.model, case.feed)
    assert np.isfinite(ref).all() and ref.size > 0
    for v in variants:
        r = run_pattern(pattern, v, reference=ref)
        assert r.verdict in ("agree", "disagree", "refused") and r.version, r
        if v.label == "onnxruntime[disable]":  # the QDQ simulation is ONNX's semantics: it must agree
            assert r.verdict == "agree" and r.max_steps <= 1.001 and r.code_share == 0.0, r
        if r.verdict == "disagree":  # beyond the tolerance, or too many codes that differ from the simulation
            beyond = r.max_steps > 1.001 and 0 < r.mismatch <= 1 and "step" in r.detail
            codes = r.code_share > MAX_CODE_SHARE and "codes differ from the QDQ simulation" in r.detail
            assert beyond or codes, r
        if r.verdict == "refused":
            assert r.max_steps is None and r.detail


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_pattern_is_detected_in_its_own_model(pattern):
    found = dict(patterns_in(pattern.build().model))
    if pattern.name == "quantize_round_half":
        assert "activations_int8" in found  # a property of data, not of the graph
    else:
        assert pattern.name in found, found


def _result(pattern: str, variant: str, runtime: str, deployment: bool, verdict: str) -> PatternResult:
    return PatternResult(pattern, runtime, variant, deployment, "1.0", verdict, 0.0 if verdict == "agree" else 3.0, 0.0, "")


def test_failing_patterns_names_pattern_runtime_and_nodes():
    """What the quantize engine calls: a model using a pattern that its target runtime gets wrong is reported
    with the nodes; patterns the target gets right, and non-deployment variants, are not."""
    m = PatternMatrix({}, {"openvino": "1", "onnxruntime": "1"}, 1.0, (
        _result("activations_uint16", "openvino[f32]", "openvino", True, "disagree"),
        _result("activations_uint16", "openvino[bf16]", "openvino", False, "disagree"),
        _result("activations_uint16", "onnxruntime[all]", "onnxruntime", True, "agree"),
        _result("per_channel_conv_axis0", "openvino[f32]", "openvino", True, "agree"),
    ))
    model = get_pattern("activations_uint16").build().model
    (res, nodes), = failing_patterns(model, m, ["openvino"])
    assert (res.pattern, res.variant) == ("activations_uint16", "openvino[f32]") and nodes == ["in_q", "h_q", "r_q", "y_q"]
    assert failing_patterns(model, m, ["onnxruntime"]) == []
    assert m.verdict("activations_uint16", "openvino[bf16]").deployment is False
    assert PatternMatrix.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_doctor_prints_the_matrix_for_this_machine(capsys):
    assert main(["doctor", "--runtime", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu ") and "isa " in out and "onnxruntime[all]" in out and "onnxruntime[disable]" in out
    assert all(p.name in out for p in PATTERNS)
    assert main(["doctor", "--runtime", "onnxruntime", "--json"]) == 0
    m = PatternMatrix.from_dict(json.loads(capsys.readouterr().out))
    assert m.versions["onnxruntime"] and len(m.results) == 2 * len(PATTERNS)


LINEAR_COORDINATES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric", "tf_crop_and_resize")


def test_linear_resize_is_a_2x_pattern_for_every_coordinate_transform():
    """Every coordinate_transformation_mode ONNX defines for linear Resize is a pattern, upsampling 2x (where
    interpolated values fall on half a step), and ONNX Runtime's fused kernel keeps every code of its simulation."""
    on_ort = next(v for v in runtime_variants(["onnxruntime"]) if v.deployment)
    for coord in LINEAR_COORDINATES:
        p = get_pattern(f"resize_linear_{coord}")
        case = p.build()
        assert p.family == "resize" and reference_output(case.model, case.feed).shape == (1, 3, 16, 16)
        r = run_pattern(p, on_ort)
        assert r.verdict == "agree" and r.code_share == 0.0 and r.cell == "ok", r


@pytest.mark.skipif("openvino" not in available_runtimes(), reason="openvino is not installed (pip install 'quantkit[openvino]')")
def test_openvino_linear_resize_is_reported_where_its_codes_differ():
    """OpenVINO rounds a 2x linear Resize's values that fall on or near half a step differently from the simulation:
    within one step of the reference everywhere (so a tolerance of one step alone calls it ok), but the pattern is
    judged by the share of codes that differ. It refuses the coordinate transforms it does not implement."""
    on_ov = next(v for v in runtime_variants(["openvino"]) if v.deployment)
    results = {c: run_pattern(get_pattern(f"resize_linear_{c}"), on_ov) for c in LINEAR_COORDINATES}
    asym = results["asymmetric"]
    assert asym.verdict == "disagree" and asym.max_steps <= 1.001 and asym.mismatch == 0.0, asym
    assert asym.code_share > 5 * MAX_CODE_SHARE and asym.cell == f"DIFF {100 * asym.code_share:.1f}%"
    assert "codes differ from the QDQ simulation" in asym.detail
    assert results["align_corners"].verdict == "agree"  # 2x with align_corners puts no value on half a step
    assert {results[c].verdict for c in ("half_pixel_symmetric", "tf_crop_and_resize")} == {"refused"}


def test_doctor_lists_the_patterns_a_model_uses(tmp_path, capsys):
    """``doctor --quantized``: the patterns of a QDQ model (where, and each runtime's cell); a float model has none."""
    import onnx

    q = tmp_path / "q.onnx"
    onnx.save(get_pattern("resize_linear_asymmetric").build().model, q)
    assert main(["doctor", "--runtime", "onnxruntime", "--quantized", str(q)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("resize_linear_asymmetric ") and " at " in x)
    assert "onnxruntime[all] ok" in line and line.endswith("at resize")
    assert main(["doctor", "--runtime", "onnxruntime", "--quantized", str(q), "--json"]) == 0
    used = json.loads(capsys.readouterr().out)["model"]["patterns"]
    assert {"pattern": "resize_linear_asymmetric", "nodes": ["resize"], "verdicts": {"onnxruntime[all]": "agree", "onnxruntime[disable]": "agree"}} in used
    f = tmp_path / "float.onnx"
    m = get_pattern("resize_linear_asymmetric").build().model
    del m.graph.node[:]
    m.graph.node.extend([onnx.helper.make_node("Relu", ["x"], ["resize_out"])])
    m.graph.output[0].name = "resize_out"
    onnx.save(m, f)
    assert main(["doctor", "--runtime", "onnxruntime", "--quantized", str(f)]) == 0
    assert "uses none of the suite's quantized patterns" in capsys.readouterr().out


def test_a_matrix_from_before_codes_were_judged_still_loads():
    """A bundle built by an older quantkit records a matrix without ``code_share`` / ``max_code_share``."""
    old = {"machine": {}, "versions": {"openvino": "1"}, "tolerance_steps": 1.0, "results": [
        {"pattern": "resize_linear_asymmetric", "runtime": "openvino", "variant": "openvino[f32]", "deployment": True, "version": "1",
         "verdict": "agree", "max_steps": 1.0, "mismatch": 0.0, "detail": ""}]}
    m = PatternMatrix.from_dict(old)
    assert m.max_code_share is None and m.results[0].code_share is None and m.results[0].cell == "ok"
    new = PatternMatrix.from_dict({**m.to_dict(), "results": [{**m.results[0].to_dict(), "verdict": "disagree", "code_share": 0.2, "later": 1}]})
    assert new.results[0].cell == "DIFF 20.0%" and PatternMatrix.from_dict(new.to_dict()) == new

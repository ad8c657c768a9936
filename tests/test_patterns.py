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
            assert r.verdict == "agree" and r.max_steps <= 1.001, r
        if r.verdict == "disagree":
            assert r.max_steps > 1.0 and 0 < r.mismatch <= 1 and "step" in r.detail
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

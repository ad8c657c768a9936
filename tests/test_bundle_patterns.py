"""Every risky pattern, bundled and verified on every installed runtime: where the runtime is more than the tolerance
off ONNX's reference evaluator on the bundle's golden inputs, verify fails on that runtime and names the first diverging
tensor; where it agrees, or only a share of its codes differ from the simulation's by one (a pattern's second criterion,
which a model's outputs are not judged by), verify passes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_bundle_fixtures import make_pattern_pipeline

from quantkit.bundle import BundleConfig, VerifyConfig, build_bundle, verify_bundle
from quantkit.bundle.deployment import likely_causes
from quantkit.patterns import PATTERNS, run_pattern, runtime_variants
from quantkit.runtimes.localize import quantized_tensors


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_pattern_bundle_verifies_exactly_where_the_runtime_agrees(pattern, tmp_path: Path) -> None:
    case = pattern.build()
    pipe = make_pattern_pipeline(tmp_path, case.model)
    # max_mismatch 0: the suite's criterion (every element within one step of the reference)
    res = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist",
                       BundleConfig(golden_count=2, max_mismatch=0.0, patterns=False, activation_max_elements=512))
    report = verify_bundle(res.path, VerifyConfig(runtimes=("all",), latency_repeats=0))
    inputs = _golden_inputs(res.path)
    for v in (v for v in runtime_variants() if v.deployment):
        results = [run_pattern(pattern, v, feed={"x": x}) for x in inputs]
        verdicts = {r.verdict for r in results}
        beyond = any(r.verdict == "disagree" and r.max_steps > 1.001 for r in results)
        failed = [c for c in report.checks if c.runtime == v.runtime and c.status == "fail"]
        run = next(r for r in report.runs if r.runtime == v.runtime)
        if "refused" in verdicts:
            assert failed and failed[0].kind in ("support", "runtime"), (v.label, failed)
        elif not beyond:  # agrees, or only its codes differ from the simulation's by one: the outputs are within the tolerance
            assert not failed and run.ok, (v.label, failed)
        else:  # beyond the tolerance on at least one golden input: fails, and localisation names the first diverging tensor
            assert any(c.kind == "output" for c in failed), (v.label, failed)
            assert run.divergence is not None and run.divergence.tensor in quantized_tensors(case.model), (v.label, report.checks)
            assert run.divergence.confirmed and any(c.kind == "layer" and run.divergence.tensor in c.detail for c in failed)


def _golden_inputs(bundle: Path) -> list[np.ndarray]:
    import io
    import tarfile

    with tarfile.open(bundle) as tar:
        return [np.load(io.BytesIO(tar.extractfile(m).read()), allow_pickle=False) for m in tar.getmembers() if m.name.endswith("/input.npy")]


@pytest.mark.parametrize("disagrees_here", [True, False])
def test_verify_runs_the_models_patterns_on_this_machine_and_names_the_fix(disagrees_here, tmp_path: Path, monkeypatch) -> None:
    """The bundle lists the risky patterns its model uses; verify runs each on the target runtime here (not only on the
    building machine) and, where the runtime gets one wrong here, warns with the nodes, this CPU and the fix. The
    runtime's verdict is forced both ways so both branches run on any CPU (u8s8 saturates on AVX2 without VNNI only)."""
    import dataclasses

    import quantkit.patterns as patterns
    from quantkit.patterns import get_pattern

    case = get_pattern("saturation_u8s8").build()
    pipe = make_pattern_pipeline(tmp_path, case.model)
    res = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist",
                       BundleConfig(golden_count=2, patterns=True, activation_max_elements=0))
    real = patterns.run_pattern
    calls = []

    def forced(pattern, variant, *a, **k):
        calls.append(pattern.name)
        r = real(pattern, variant, *a, **k)
        if pattern.name != "saturation_u8s8":  # the model's other patterns (per-channel, uint8 activations) cannot diverge here
            return dataclasses.replace(r, verdict="agree", max_steps=0.0, mismatch=0.0, detail="")
        if disagrees_here:
            return dataclasses.replace(r, verdict="disagree", max_steps=82.0, mismatch=1.0, detail="100.0% of outputs more than 1 step(s) off, worst 82.0")
        return dataclasses.replace(r, verdict="agree", max_steps=0.0, mismatch=0.0, detail="")

    monkeypatch.setattr(patterns, "run_pattern", forced)
    report = verify_bundle(res.path, VerifyConfig(runtimes=("onnxruntime",), latency_repeats=0, localize=False))
    rows = [c for c in report.checks if c.kind == "patterns" and c.runtime == "onnxruntime"]
    here = [c for c in rows if "saturation_u8s8 disagree here on" in c.detail]
    assert "saturation_u8s8" in calls  # the pattern was run here, on this machine's runtime
    if disagrees_here:
        assert len(here) == 1 and here[0].status == "warn", rows
        assert "used at" in here[0].detail
        isa = __import__("quantkit.runtimes.precision", fromlist=["cpu_isa"]).cpu_isa()
        no_vnni_x86 = isa["machine"] == "x86_64" and not {"avx512_vnni", "avx_vnni"} & set(isa["flags"])
        # the VNNI explanation and its fix only where they apply (x86 without VNNI)
        assert ("reduce_range: true" in here[0].detail and "weight_type: uint8" in here[0].detail) == no_vnni_x86
        causes = likely_causes(report, "onnxruntime")
        assert len(causes) == 1 and causes[0].startswith("[likely cause] saturation_u8s8 disagree here on")
    else:
        assert not here and all("agrees here" in c.detail for c in rows), rows
        assert likely_causes(report, "onnxruntime") == ()


def test_a_pattern_that_cannot_run_here_is_a_skipped_row_not_a_traceback(tmp_path: Path, monkeypatch) -> None:
    import quantkit.patterns as patterns
    from quantkit.patterns import get_pattern

    case = get_pattern("saturation_u8s8").build()
    pipe = make_pattern_pipeline(tmp_path, case.model)
    res = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist",
                       BundleConfig(golden_count=2, patterns=True, activation_max_elements=0))

    def broken(pattern, variant, *a, **k):  # e.g. an older onnx whose reference evaluator lacks a kernel
        raise NotImplementedError("no reference kernel for QuantizeLinear(21)")

    monkeypatch.setattr(patterns, "run_pattern", broken)
    report = verify_bundle(res.path, VerifyConfig(runtimes=("onnxruntime",), latency_repeats=0, localize=False))
    skipped = [c.detail for c in report.checks if c.kind == "patterns" and c.status == "skip"]
    assert any("saturation_u8s8 not run here: NotImplementedError" in d for d in skipped), skipped
    assert report.runs and report.runs[0].runtime == "onnxruntime"  # verification went on past the patterns

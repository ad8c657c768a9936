"""The main job's verify stage: the deployed bundle on each target runtime, agreement with FP32 per site set, one artifact."""

from __future__ import annotations

import json

import pytest
from test_bundle_fixtures import make_pipeline
from test_quantize_fixtures import make_set

from quantkit.bundle import BundleConfig, build_bundle
from quantkit.bundle.deployment import DeploymentVerification, DeploymentVerifyConfig, verify_deployment
from quantkit.cli.main import main
from quantkit.errors import ConfigError
from quantkit.runtimes import available_runtimes


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    pipe = make_pipeline(root)
    res = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], root / "dist", BundleConfig(patterns=False, golden_count=2))
    sites = [make_set(root / "site-a", 3, size=40, name="site-a"), make_set(root / "site-b", 2, size=40, name="site-b", seed=1)]
    return res.path, pipe["intake"], sites


def test_every_target_runtime_is_recorded_with_site_agreement(deployed, tmp_path, monkeypatch):
    bundle, intake, sites = deployed
    cfg = DeploymentVerifyConfig(runtimes=("onnxruntime", "openvino"), max_images=0)
    result = verify_deployment(bundle, intake, sites, cfg)
    by = {r.runtime: r for r in result.runtimes}
    assert by["onnxruntime"].installed and by["onnxruntime"].verified
    ort = by["onnxruntime"]
    assert ort.deployable is True and ort.divergence == ""  # the report's answer per runtime
    assert result.verdict is not None and result.verdict.deployable == all(r.deployable for r in result.runtimes if r.installed)
    assert ort.label == "onnxruntime[all]" and ort.integer_share == 1.0
    assert [(s.site_set, s.images) for s in ort.sites] == [("site-a", 3), ("site-b", 2)]
    assert all(0 <= s.value <= 1 and s.metric == "box_f1" and s.identical_images <= s.images for s in ort.sites)
    assert "latency" not in json.dumps(result.to_dict())  # machine-dependent: never in the stage's output
    assert by["openvino"].installed == ("openvino" in available_runtimes())
    result.save(tmp_path / "deployed.json")
    assert DeploymentVerification.load(tmp_path / "deployed.json") == result and result.ok


def test_verify_stage_cli_writes_the_artifact(deployed, tmp_path, capsys):
    bundle, intake, sites = deployed
    params = tmp_path / "params.yaml"
    params.write_text("verify:\n  runtimes: [onnxruntime]\n  max_images: 2\n  threads: 1\n  fail: true\n")
    out = tmp_path / "work" / "verify" / "deployed.json"
    args = ["verify", str(bundle), "--fp32", str(intake), "--site-set", str(sites[0]), "--params", str(params), "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "onnxruntime[all]" in text and "verified" in text and "site-a box_f1" in text
    data = json.loads(out.read_text())
    assert data["runtimes"][0]["options"]["intra_op_num_threads"] == "1" and data["runtimes"][0]["sites"][0]["images"] == 2
    assert main(["verify", str(bundle), "--out", str(out)]) == 2
    assert "--fp32" in capsys.readouterr().err


def test_all_runtimes_expand_and_unknown_names_are_refused(deployed, tmp_path):
    bundle, intake, sites = deployed
    result = verify_deployment(bundle, intake, sites[:1], DeploymentVerifyConfig(runtimes=("all",), max_images=1))
    assert [r.runtime for r in result.runtimes] == list(available_runtimes())
    assert all(r.installed and r.sites for r in result.runtimes)
    with pytest.raises(ConfigError, match="'openvno' is not registered; use one of onnxruntime, openvino"):  # a typo, or tensorrt
        verify_deployment(bundle, intake, sites[:1], DeploymentVerifyConfig(runtimes=("openvno",), max_images=1))


def test_an_fp32_model_other_than_the_bundles_is_one_line_exit_2(deployed, tmp_path, capsys):
    bundle, intake, sites = deployed
    from test_quantize_fixtures import make_intake

    other = make_intake(tmp_path / "other", size=24)
    out = tmp_path / "v.json"
    args = ["verify", str(bundle), "--fp32", str(other), "--site-set", str(sites[0]), "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "not the FP32 model this bundle was quantized from" in err and "Traceback" not in err and not out.exists()

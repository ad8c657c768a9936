"""quantkit.bundle.verify / archive and ``quantkit verify``: a good bundle passes, each fault is named."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_quantize_fixtures import make_set
from test_bundle_fixtures import (
    load_npy,
    make_pipeline,
    npy,
    raw_tar,
    read_members,
    repack,
)

from quantkit.bundle import (
    BundleConfig,
    VerifyConfig,
    build_bundle,
    safe_extract,
    verify_bundle,
)
from quantkit.cli.main import main
from quantkit.errors import ConfigError, InputFileError, VerificationError
from quantkit.profiles import load_profile
from quantkit.runtimes import available_runtimes

needs_openvino = pytest.mark.skipif("openvino" not in available_runtimes(), reason="openvino is not installed (pip install 'quantkit[openvino]')")


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pipeline(tmp_path_factory.mktemp("pipe"))


@pytest.fixture(scope="module")
def bundle(pipe: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path_factory.mktemp("d") / "dist",
                        BundleConfig(patterns=False)).path


def _failed(report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in report.failures:
        out.setdefault(c.kind, []).append(f"{c.name}: {c.detail}")
    return out


def test_good_bundle_verifies(bundle: Path, capsys) -> None:
    report = verify_bundle(bundle)
    assert report.ok and report.error() is None
    kinds = {c.kind for c in report.checks if c.status == "pass"}
    assert {"archive", "digest", "binding", "runtime", "support", "output", "decision", "precision", "latency"} <= kinds
    assert sum(c.kind == "output" and c.status == "pass" for c in report.checks) == 4
    (run,) = report.runs
    assert run.runtime == "onnxruntime" and run.ok and run.decisions == run.decisions_agree == 4
    assert run.precision.integer_share == 1.0 and run.latency_ms > 0 and run.info.label == "onnxruntime[all]"
    # the CLI accepts the archive, its folder or bundle.json; prints the table; exit 0
    for target in (bundle, bundle.parent, bundle.parent / "bundle.json"):
        assert main(["verify", str(target)]) == 0
        out = capsys.readouterr().out
        assert "VERIFIED" in out and "FAIL" not in out
    assert main(["verify", str(bundle), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_swapped_model_file_is_named(bundle: Path, pipe, tmp_path: Path, capsys) -> None:
    members = read_members(bundle)
    members["model_int8.onnx"] = (pipe["other"] / "model_int8.onnx").read_bytes()
    # without touching the manifest: the digest check names the member and nothing is run
    plain = repack(members, tmp_path / "a", update_manifest=False)
    r = verify_bundle(plain)
    assert [c.name for c in r.failures] == ["model_int8.onnx"] and r.failures[0].kind == "digest"
    assert any(c.kind == "output" and c.status == "skip" for c in r.checks)
    # an "honest" rebuild with the wrong model: the binding names it and goldens differ
    honest = repack(members, tmp_path / "b", update_manifest=True)
    r = verify_bundle(honest)
    f = _failed(r)
    assert any("model_int8.onnx" in s and "swapped" in s for s in f["binding"])
    assert "output" in f and r.divergence is not None and r.divergence.confirmed
    assert main(["verify", str(honest)]) == 4
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and len(captured.err.strip().splitlines()) == 1 and "model_int8.onnx" in captured.err


def test_thresholds_from_another_calibration_are_named(bundle: Path, pipe, tmp_path: Path) -> None:
    members = read_members(bundle)
    members["thresholds.json"] = pipe["other_thresholds"].read_bytes()
    r = verify_bundle(repack(members, tmp_path, update_manifest=True))
    f = _failed(r)
    assert any(s.startswith("thresholds.json") and "another calibration" in s for s in f["binding"])
    assert all(c.status == "skip" for c in r.checks if c.kind == "decision")  # unbound thresholds are not used
    assert "was derived for calibration 'seed2'" in " ".join(f["binding"])  # ThresholdSet.check_binding's own words
    assert isinstance(r.error(), VerificationError) and r.error().exit_code == 4


def test_changed_golden_output_is_named(bundle: Path, tmp_path: Path) -> None:
    members = read_members(bundle)
    name = "golden/0002/int8/000.npy"
    arr = load_npy(members[name]).copy()
    arr[0, 0, 4:12, 4:12] += 0.05  # 64 of 1024 pixels, ~13 steps: beyond the 1% allowed
    members[name] = npy(arr)
    r = verify_bundle(repack(members, tmp_path / "a", update_manifest=False))
    assert [(c.kind, c.name) for c in r.failures] == [("digest", name)]
    r = verify_bundle(repack(members, tmp_path / "b", update_manifest=True))
    assert [(c.kind, c.name) for c in r.failures][0] == ("output", "0002 prob") and "6.25% of elements beyond" in r.failures[0].detail
    # the model is fine: every activation agrees, so the named tensor is the output itself
    assert r.divergence is not None and r.divergence.tensor == "prob" and not any(i.diverged for i in r.divergence.inputs)


def test_one_changed_pixel_is_within_the_allowed_share(bundle: Path, tmp_path: Path) -> None:
    members = read_members(bundle)
    name = "golden/0002/int8/000.npy"
    arr = load_npy(members[name]).copy()
    arr[0, 0, 5, 7] += 0.05
    members[name] = npy(arr)
    r = verify_bundle(repack(members, tmp_path, update_manifest=True))
    row = next(c for c in r.checks if c.name == "0002 prob")
    assert r.ok and row.status == "pass" and "0.10% of elements beyond" in row.detail
    r = verify_bundle(repack(members, tmp_path / "strict", update_manifest=True), VerifyConfig(max_mismatch=0.0))
    assert [(c.kind, c.name) for c in r.failures][0] == ("output", "0002 prob")


def test_layerwise_localisation_names_first_diverging_tensor(bundle: Path, tmp_path: Path) -> None:
    """Corrupting conv2's int8 weights leaves conv1's output intact; the cut models name conv2's output first."""
    members = read_members(bundle)
    model = onnx.load_from_string(members["model_int8.onnx"])
    w = next(i for i in model.graph.initializer if i.name == "w2_quantized")
    w.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(w), w.name))
    members["model_int8.onnx"] = model.SerializeToString()
    r = verify_bundle(repack(members, tmp_path, update_manifest=True))
    d = r.divergence
    assert d is not None and (d.tensor, d.node, d.op_type) == ("logits_DequantizeLinear_Output", "conv2", "Conv") and d.confirmed
    assert [i.tensor for i in d.inputs] == ["r_DequantizeLinear_Output"] and not d.inputs[0].diverged
    layer = next(c for c in r.checks if c.kind == "layer")
    assert layer.status == "fail" and "'logits_DequantizeLinear_Output'" in layer.detail and "Conv 'conv2'" in layer.detail
    assert "conv2" in str(r.error())


@needs_openvino
def test_bundle_verifies_on_openvino_and_all(bundle: Path, capsys) -> None:
    r = verify_bundle(bundle, VerifyConfig(runtimes=("all",)))
    assert r.ok, r.failures
    runs = {run.runtime: run for run in r.runs}
    assert set(runs) == {"onnxruntime", "openvino"}
    ov = runs["openvino"]
    assert ov.info.inference_precision == "f32" and dict(ov.info.options)["INFERENCE_PRECISION_HINT"] == "f32"
    assert ov.precision.integer_share == 1.0 and ov.decisions_agree == 4
    assert main(["verify", str(bundle), "--runtime", "openvino"]) == 0
    out = capsys.readouterr().out
    assert "openvino[CPU f32]" in out and "machine-dependent" in out and "VERIFIED" in out


@needs_openvino
def test_localisation_on_openvino_uses_cut_models(bundle: Path, tmp_path: Path) -> None:
    members = read_members(bundle)
    model = onnx.load_from_string(members["model_int8.onnx"])
    w = next(i for i in model.graph.initializer if i.name == "w2_quantized")
    w.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(w), w.name))
    members["model_int8.onnx"] = model.SerializeToString()
    r = verify_bundle(repack(members, tmp_path, update_manifest=True), VerifyConfig(runtimes=("openvino",)))
    assert r.divergence is not None and r.divergence.node == "conv2" and r.divergence.cuts >= 2


def test_runtime_missing_an_operator_via_profile(bundle: Path, tmp_path: Path, capsys) -> None:
    """The short profile form is migrated into the one profile format and checked like the packaged ones."""
    full = {"name": "board-ok", "ops": {"Conv": [11, 21], "QuantizeLinear": [13, 18], "DequantizeLinear": [13, 18], "Sigmoid": [13, 21]}}
    (tmp_path / "ok.json").write_text(json.dumps(full))
    assert verify_bundle(bundle, VerifyConfig(target=str(tmp_path / "ok.json"))).ok
    lacking = {"name": "board-x", "ops": {k: v for k, v in full["ops"].items() if k != "Sigmoid"}}
    (tmp_path / "x.json").write_text(json.dumps(lacking))
    r = verify_bundle(bundle, VerifyConfig(target=str(tmp_path / "x.json")))
    assert [(c.kind, c.name) for c in r.failures] == [("profile", "target x")]
    assert "Sigmoid (unsupported_op)" in r.failures[0].detail and "hand-written" in r.failures[0].detail
    assert main(["verify", str(bundle), "--target", str(tmp_path / "x.json")]) == 5
    assert "Sigmoid" in capsys.readouterr().err
    old = {"name": "old", "ops": full["ops"], "opset": {"ai.onnx": 12}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "opset ai.onnx 13 > 12" in verify_bundle(bundle, VerifyConfig(target=str(tmp_path / "old.json"))).failures[0].detail


def test_target_in_quantkit_profiles_format(bundle: Path, tmp_path: Path, capsys) -> None:
    ops = {"Conv": {"opsets": [11, None]}, "QuantizeLinear": {}, "DequantizeLinear": {}, "Sigmoid": {"opsets": [6, None]}}
    (tmp_path / "ok.json").write_text(json.dumps({"schema_version": 1, "name": "ok", "ops": ops}))
    r = verify_bundle(bundle, VerifyConfig(target=str(tmp_path / "ok.json")))
    assert r.ok and any(c.kind == "profile" and c.name == "target ok" and c.status == "pass" for c in r.checks)
    del ops["Sigmoid"]
    (tmp_path / "nosig.json").write_text(json.dumps({"schema_version": 1, "name": "nosig", "ops": ops}))
    r = verify_bundle(bundle, VerifyConfig(target=str(tmp_path / "nosig.json")))
    assert [(c.kind, c.name) for c in r.failures] == [("profile", "target nosig")] and "Sigmoid (unsupported_op)" in r.failures[0].detail
    assert r.error().exit_code == 5
    assert main(["verify", str(bundle), "--target", "no-such-board"]) == 2
    assert "unknown target" in capsys.readouterr().err


def test_malformed_profile_and_missing_bundle_are_user_errors(bundle: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"ops": {"Conv": "all"}}))
    with pytest.raises(ConfigError, match="ops.Conv"):
        load_profile(tmp_path / "bad.json")
    with pytest.raises(InputFileError, match="not found"):
        verify_bundle(tmp_path / "nope.tar")
    assert main(["verify", str(tmp_path / "nope.tar")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="not registered"):
        verify_bundle(bundle, VerifyConfig(runtimes=("tensorrt-x",)))


def test_unavailable_provider_fails(bundle: Path) -> None:
    r = verify_bundle(bundle, VerifyConfig(providers=("NoSuchExecutionProvider",)))
    assert [(c.kind, c.name) for c in r.failures] == [("runtime", "onnxruntime session")]


def test_truncated_archive_is_detected(bundle: Path, tmp_path: Path, capsys) -> None:
    cut = tmp_path / bundle.name
    cut.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])
    r = verify_bundle(cut)
    assert r.failures[0].kind == "archive" and "truncated" in r.failures[0].detail
    assert main(["verify", str(cut)]) == 4
    # renamed (not content-addressed): per-member checks still catch it
    renamed = tmp_path / "copy.tar"
    renamed.write_bytes(bundle.read_bytes()[:-20000])
    r = verify_bundle(renamed)
    assert not r.ok and r.checks[0].status == "warn"
    capsys.readouterr()


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    i = tarfile.TarInfo(name)
    i.type = kind
    i.linkname = link
    return i


MANIFEST = json.dumps({"format": "quantkit-bundle", "members": {"a.txt": {"sha256": "0" * 64, "size": 1}}}).encode()


@pytest.mark.parametrize("entry, why", [
    ((_info("../evil.txt"), b"x"), "escapes"),
    ((_info("/tmp/evil.txt"), b"x"), "absolute"),
    ((_info("sub/../../evil.txt"), b"x"), "escapes"),
    ((_info("link", tarfile.SYMTYPE, "/etc/passwd"), None), "symlink"),
    ((_info("hard", tarfile.LNKTYPE, "manifest.json"), None), "hardlink"),
    ((_info("dev", tarfile.CHRTYPE), None), "device"),
    ((_info("fifo", tarfile.FIFOTYPE), None), "FIFO"),
    ((_info("extra.txt"), b"x"), "not listed"),
    ((_info("manifest.json"), MANIFEST), "twice"),
])
def test_unsafe_archives_are_rejected_before_writing(tmp_path: Path, entry, why: str) -> None:
    bad = raw_tar(tmp_path / "bad.tar", [(_info("manifest.json"), MANIFEST), (_info("a.txt"), b"a"), entry])
    dest = tmp_path / "x" / "out"
    with pytest.raises(VerificationError, match=why):
        safe_extract(bad, dest)
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()
    assert list(dest.iterdir()) == []  # nothing was written


def test_path_escape_bundle_fails_verification(tmp_path: Path, capsys) -> None:
    bad = raw_tar(tmp_path / "bundle.tar", [(_info("manifest.json"), MANIFEST), (_info("a.txt"), b"a"), (_info("../escape.txt"), b"x")])
    r = verify_bundle(bad)
    assert r.failures[0].kind == "archive" and "escape.txt" in r.failures[0].detail
    assert main(["verify", str(bad)]) == 4
    assert "escape.txt" in capsys.readouterr().err
    assert not (tmp_path / "escape.txt").exists() and not any(p.name == "escape.txt" for p in Path(os.sep, "tmp").iterdir())


def test_pickled_array_is_never_loaded(bundle: Path, tmp_path: Path) -> None:
    members = read_members(bundle)
    import io
    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    members["golden/0000/int8/000.npy"] = buf.getvalue()
    r = verify_bundle(repack(members, tmp_path, update_manifest=True))
    assert ("output", "0000 prob") in [(c.kind, c.name) for c in r.failures]
    assert "missing" in next(c.detail for c in r.failures if c.name == "0000 prob")


def test_decision_level_mismatch_is_named(bundle: Path, tmp_path: Path) -> None:
    """A golden decision with one detection more than the target's: F1 < 1 fails the decision row (outputs still pass)."""
    members = read_members(bundle)
    man = json.loads(members["manifest.json"])
    dec = man["golden"]["samples"][1]["decision_int8"]
    assert dec["polygons"], "the fixture detector finds something"
    dec["polygons"].append([[0, 0], [3, 0], [3, 3], [0, 3]])
    dec["scores"].append(0.9)
    dec["labels"].append(0)
    members["manifest.json"] = json.dumps(man).encode()
    r = verify_bundle(repack(members, tmp_path, update_manifest=False))
    assert [(c.kind, c.name) for c in r.failures] == [("decision", "0001")]
    assert f"({len(dec['polygons'])} golden items, {len(dec['polygons']) - 1} on the target)" in r.failures[0].detail


def test_decision_agreement_ignores_small_coordinate_and_score_moves() -> None:
    from quantkit.artifacts import ThresholdSet
    from quantkit.bundle.decisions import agreement

    ts = ThresholdSet(adapter="box_detector", values={"score_thresh": 0.25, "iou_thresh": 0.45})  # the task decides what agrees
    golden = {"polygons": [[[10, 10], [50, 10], [50, 30], [10, 30]]], "scores": [0.80], "labels": [0]}
    moved = {"polygons": [[[11, 10], [50, 11], [52, 30], [10, 31]]], "scores": [0.78], "labels": [0]}
    a = agreement(ts, golden, moved)
    assert (a.metric, a.value, a.golden, a.target) == ("box_f1", 1.0, 1, 1)
    relabelled = {**moved, "labels": [1]}
    assert agreement(ts, golden, relabelled).value == 0.0
    assert agreement(ts, golden, {"polygons": [], "scores": [], "labels": []}).value == 0.0
    assert agreement(ts, {"polygons": [], "scores": [], "labels": []}, {"polygons": [], "scores": [], "labels": []}).value == 1.0
    texts = ThresholdSet(adapter="classifier", values={"cls_thresh": 0.5})
    assert agreement(texts, {"polygons": [], "scores": [0.9], "labels": [1], "top": [1, ""]},
                     {"polygons": [], "scores": [0.6], "labels": [1], "top": [1, ""]}).metric == "top1"


def test_runtime_version_difference_warns_or_fails(bundle: Path, tmp_path: Path, capsys) -> None:
    members = read_members(bundle)
    man = json.loads(members["manifest.json"])
    man["runtime"]["onnxruntime"] = "1.0.0"
    members["manifest.json"] = json.dumps(man).encode()
    other = repack(members, tmp_path, update_manifest=False)
    r = verify_bundle(other)
    row = next(c for c in r.checks if c.kind == "runtime" and c.name == "onnxruntime")
    assert r.ok and row.status == "warn" and "1.0.0" in row.detail
    assert main(["verify", str(other), "--require-same-runtime"]) == 4
    assert "onnxruntime" in capsys.readouterr().err


def test_verify_config_roundtrip_and_params_section() -> None:
    from quantkit.config import load_params

    cfg = VerifyConfig(providers=("CPUExecutionProvider",), tolerance_steps=2.0, runtimes=("all",), max_mismatch=0.0)
    assert VerifyConfig.from_dict(cfg.to_dict()) == cfg
    params = Path(__file__).resolve().parents[1] / "params.yaml"
    assert VerifyConfig.from_dict(load_params(params, "bundle.verify")).providers == ("CPUExecutionProvider",)
    with pytest.raises(ConfigError, match="providers"):
        VerifyConfig(providers=())
    with pytest.raises(ConfigError, match="max_mismatch"):
        VerifyConfig(max_mismatch=1.5)
    assert set(VerifyConfig(runtimes=("all",)).resolved_runtimes()) == set(available_runtimes())


def test_verify_imports_without_dvc_matplotlib_or_scikit_image(bundle: Path) -> None:
    """What a device installs for verification (docs/deploy.md) suffices: the verify path never imports DVC,
    matplotlib, scikit-image, pandas or scipy, and runs end to end with them blocked."""
    import subprocess

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dvc', 'matplotlib', 'skimage', 'pandas', 'scipy'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import quantkit.bundle.verify as v\n"
        "from quantkit.cli.main import main\n"
        f"sys.exit(main(['verify', {str(bundle)!r}]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "VERIFIED" in res.stdout


def test_corrupt_model_member_is_named_and_not_run(bundle: Path, tmp_path: Path) -> None:
    members = read_members(bundle)
    members["model_int8.onnx"] = b"\x08\x07not a protobuf model" * 10
    r = verify_bundle(repack(members, tmp_path, update_manifest=True))
    assert ("runtime", "model_int8.onnx") in [(c.kind, c.name) for c in r.failures]
    assert not any(c.kind == "output" for c in r.checks)


def test_junk_archive_fails_with_a_one_line_detail(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    r = verify_bundle(junk)
    (fail,) = r.failures
    assert fail.kind == "archive" and "\n" not in fail.detail and "not a tar, tar.gz, tar.bz2 or tar.xz file" in fail.detail
    assert main(["verify", str(junk)]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "junk.tar" in err


def test_member_of_another_size_detail_is_not_cut(bundle: Path, tmp_path: Path) -> None:
    members = read_members(bundle)
    name = next(n for n in sorted(members) if n != "manifest.json" and n != "model_int8.onnx")
    members[name] = members[name] + b"extra"
    r = verify_bundle(repack(members, tmp_path, update_manifest=False))
    (detail,) = [c.detail for c in r.failures if c.kind == "digest" and c.name == name]
    assert detail.startswith("not extracted: size ") and f"!= manifest {len(members[name]) - 5} B" in detail


def test_bad_threshold_set_json_names_the_file_once(tmp_path: Path) -> None:
    from quantkit.artifacts import ThresholdSet

    bad = tmp_path / "thc_list.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputFileError) as ei:
        ThresholdSet.load(bad)
    assert str(ei.value).count("thc_list.json") == 1 and "must be a JSON object" in str(ei.value)


def test_verify_says_plainly_whether_to_deploy(bundle: Path, tmp_path: Path, capsys) -> None:
    """Numbers that differ from the simulation while every decision agrees with FP32 within the bound interval are a
    warning beside "FAILED (n checks)", not a refusal; a swapped model is a refusal."""
    good = verify_bundle(bundle)
    assert good.deployable and good.answer().startswith("Deploy: YES. Every check passed (")
    run = good.runs[0]
    assert run.fp32_agreement is not None and run.fp32_bound is not None and run.fp32_agreement >= run.fp32_bound
    members = read_members(bundle)
    name = "golden/0002/int8/000.npy"
    arr = load_npy(members[name]).copy()
    arr[0, 0, 4:12, 4:12] += 0.05  # the stored simulation output differs; the decisions do not
    members[name] = npy(arr)
    numbers = repack(members, tmp_path / "numbers", update_manifest=True)
    r = verify_bundle(numbers)
    assert not r.ok and r.deployable and all(c.kind in ("output", "layer") for c in r.failures)
    assert "Warning:" in r.answer() and "first diverging tensor 'prob'" in r.answer()
    assert main(["verify", str(numbers)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].startswith("FAILED (") and out[-1].startswith("Deploy: YES. The decisions agree with FP32 within the bound interval")
    honest = read_members(bundle)
    model = onnx.load_from_string(honest["model_int8.onnx"])
    w = next(i for i in model.graph.initializer if i.name == "w2_quantized")
    w.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(w), w.name))
    honest["model_int8.onnx"] = model.SerializeToString()
    swapped = repack(honest, tmp_path / "swapped", update_manifest=True)
    r = verify_bundle(swapped)
    assert not r.deployable and r.answer().startswith("Deploy: NO. ")
    assert main(["verify", str(swapped)]) == 4
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Deploy: NO. ")


def _numbers_bundle(bundle: Path, tmp_path: Path) -> Path:
    """The bundle with one stored simulation output moved: numbers differ, decisions do not (deployable, with a warning)."""
    members = read_members(bundle)
    name = "golden/0002/int8/000.npy"
    arr = load_npy(members[name]).copy()
    arr[0, 0, 4:12, 4:12] += 0.05
    members[name] = npy(arr)
    return repack(members, tmp_path / "numbers", update_manifest=True)


def test_one_verdict_from_library_cli_and_stage(bundle: Path, pipe, tmp_path: Path, capsys) -> None:
    """Issue 39: the same bundle was 'Deploy: YES ... Warning' from the CLI, ok=False / an error() from the library, and
    exit 4 from the verify stage (verify.fail: true). Now one Verdict: the library returns it, the CLI prints it and exits
    by it, and the stage stores it and exits by it."""
    numbers = _numbers_bundle(bundle, tmp_path)
    r = verify_bundle(numbers)
    v = r.verdict
    assert v.deployable and not v.reasons and v.warnings and all(w.startswith("onnxruntime [output]") or "[layer]" in w for w in v.warnings)
    assert "deployable=True" in repr(r) and r.error() is None and r.to_dict()["verdict"]["deployable"] is True
    assert main(["verify", str(numbers)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == v.answer
    site = make_set(tmp_path / "site", 1, size=40, name="site")
    params = tmp_path / "params.yaml"
    params.write_text("verify:\n  runtimes: [onnxruntime]\n  max_images: 1\n  fail: true\n")
    out = tmp_path / "verify.json"
    stage = ["verify", str(numbers), "--runtime", "onnxruntime", "--fp32", str(pipe["intake"]), "--site-set", str(site),
             "--params", str(params), "--out", str(out)]
    assert main(stage) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == v.answer
    from quantkit.artifacts.verification import DeploymentVerification

    assert DeploymentVerification.load(out).verdict == v


def test_not_deployable_is_one_exit_code_from_cli_and_stage(bundle: Path, pipe, tmp_path: Path, capsys) -> None:
    members = read_members(bundle)
    model = onnx.load_from_string(members["model_int8.onnx"])
    w = next(i for i in model.graph.initializer if i.name == "w2_quantized")
    w.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(w), w.name))
    members["model_int8.onnx"] = model.SerializeToString()
    swapped = repack(members, tmp_path / "swapped", update_manifest=True)
    v = verify_bundle(swapped).verdict
    assert not v.deployable and v.reasons and v.answer == f"Deploy: NO. {v.reasons[0]}."
    assert main(["verify", str(swapped)]) == 4
    capsys.readouterr()
    site = make_set(tmp_path / "site", 1, size=40, name="site")
    params = tmp_path / "params.yaml"
    params.write_text("verify:\n  runtimes: [onnxruntime]\n  max_images: 1\n  fail: true\n")
    out = tmp_path / "verify.json"
    stage = ["verify", str(swapped), "--runtime", "onnxruntime", "--fp32", str(pipe["intake"]), "--site-set", str(site),
             "--params", str(params), "--out", str(out)]
    assert main(stage) == 4
    assert "not deployable" in capsys.readouterr().err
    params.write_text("verify:\n  runtimes: [onnxruntime]\n  max_images: 1\n  fail: false\n")
    out.unlink()
    assert main(stage) == 0  # params verify.fail: false lets dvc repro finish; it says what the exit would be
    assert "exit 4 with params verify.fail: true" in capsys.readouterr().err


def test_unknown_runtime_is_exit_2_naming_the_known_ones(bundle: Path, pipe, tmp_path: Path, capsys) -> None:
    """Issue 39: 'verify --runtime openvinoo' exited 0 and wrote verified: false."""
    out = tmp_path / "verify.json"
    site = make_set(tmp_path / "site", 1, size=40, name="site")
    for args in (["verify", str(bundle), "--runtime", "openvinoo"],
                 ["verify", str(bundle), "--runtime", "openvinoo", "--fp32", str(pipe["intake"]), "--site-set", str(site),
                  "--out", str(out)]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "'openvinoo'" in err and "onnxruntime, openvino" in err, err
        assert not out.exists()

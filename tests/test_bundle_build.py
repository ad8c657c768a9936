"""quantkit.bundle.build and ``quantkit bundle``: contents, determinism, refusal of unbound inputs."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from test_bundle_fixtures import load_npy, make_pipeline, read_members

from quantkit.bundle import BundleConfig, build_bundle, verify_bundle
from quantkit.bundle.manifest import BundleManifest, subsample_indices
from quantkit.cli.main import main
from quantkit.config import load_params
from quantkit.errors import (
    BindingMismatchError,
    CalibrationSetError,
    ConfigError,
    InputFileError,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pipeline(tmp_path_factory.mktemp("pipe"))


@pytest.fixture(scope="module")
def built(pipe: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("dist") / "dist"
    return build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], out)


def _args(pipe: dict[str, Path], out: Path, thresholds: Path | None = None) -> list[str]:
    return ["bundle", str(pipe["deployed"]), "--thresholds", str(thresholds or pipe["thresholds"]), "--fp32", str(pipe["intake"]),
            "--golden", str(pipe["golden"]), "--out", str(out)]


def test_bundle_is_content_addressed_with_pointer(built) -> None:
    data = built.path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert built.path.name == f"quantkit-bundle-{digest[:16]}.tar" and built.sha256 == digest and built.size == len(data)
    pointer = json.loads((built.path.parent / "bundle.json").read_text())
    assert pointer["bundle"] == built.path.name and pointer["sha256"] == digest
    assert pointer["record_fingerprint"] == built.record_fingerprint
    assert sorted(p.name for p in built.path.parent.iterdir()) == sorted([built.path.name, "bundle.json", ".quantkit-output"])


def test_members_headers_and_manifest_digests(built, pipe) -> None:
    with tarfile.open(built.path) as tar:
        infos = tar.getmembers()
    names = [m.name for m in infos]
    assert names[0] == "manifest.json" and names[1:] == sorted(names[1:])
    assert all(m.isreg() and m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.mode == 0o644 for m in infos)
    members = read_members(built.path)
    man = json.loads(members["manifest.json"])
    for req in ("model_int8.onnx", "record.json", "thresholds.json", "export_note.json", "golden/0000/image.png", "golden/0000/input.npy",
                "golden/0000/fp32/000.npy", "golden/0000/int8/000.npy", "golden/0000/act/0000.npy"):
        assert req in members
    assert set(man["members"]) == set(members) - {"manifest.json"}
    for n, e in man["members"].items():
        assert e == {"sha256": hashlib.sha256(members[n]).hexdigest(), "size": len(members[n])}
    # copied artifacts are byte-identical to their sources
    assert members["model_int8.onnx"] == (pipe["deployed"] / "model_int8.onnx").read_bytes()
    assert members["thresholds.json"] == pipe["thresholds"].read_bytes()
    assert members["golden/0000/image.png"] == (pipe["golden"] / "images/0000.png").read_bytes()
    rec = json.loads(members["record.json"])
    assert man["record"]["fingerprint"] == rec["fingerprint"]
    assert man["thresholds"]["fingerprint"] == json.loads(members["thresholds.json"])["fingerprint"]
    assert man["runtime"]["onnxruntime"] and man["runtime"]["providers"] == ["CPUExecutionProvider"] and "openvino" in man["runtime"]
    assert man["model"]["opset"] == {"ai.onnx": 13} and "ai.onnx:Sigmoid" in man["model"]["ops"]
    assert man["adapter"]["name"] == "db_text"
    # tolerance: one step of the output's scale in the record
    out_scale = next(t["scale"][0] for t in rec["tensors"] if t["name"] == "prob")
    assert man["model"]["outputs"][0]["atol"] == pytest.approx(out_scale)
    # activations: the INT8 model's quantized activations (DequantizeLinear outputs) in topological order, sampled
    acts = man["activations"]
    assert [(a["name"], a["source"]) for a in acts] == [("x_DequantizeLinear_Output", "x"), ("r_DequantizeLinear_Output", "r"),
                                                         ("logits_DequantizeLinear_Output", "logits")]
    s0 = man["golden"]["samples"][0]
    assert len(man["golden"]["samples"]) == 4 and s0["source"] == "images/0000.png"
    act = load_npy(members[s0["activations"][1]])
    assert act.dtype == np.float32 and act.size == len(subsample_indices(int(np.prod(acts[1]["shape"])), 2048))
    # golden INT8 values are the QDQ simulation's, and the manifest says so; the building machine's pattern matrix is kept
    assert man["golden_runtime"]["options"]["graph_optimization_level"] == "disable" and man["golden_runtime"]["name"] == "onnxruntime"
    assert man["patterns"]["matrix"]["results"] and ["saturation_u8s8", ["conv1", "conv2"]] in man["patterns"]["used"]
    assert man["tolerance"]["max_mismatch"] == 0.01 and BundleManifest.from_dict(man).to_dict() == man
    x = load_npy(members["golden/0000/input.npy"])
    assert x.dtype == np.float32 and x.shape == (1, 3, 32, 32)
    q, f = load_npy(members["golden/0000/int8/000.npy"]), load_npy(members["golden/0000/fp32/000.npy"])
    assert q.shape == f.shape == (1, 1, 32, 32) and 0 < np.abs(q - f).max() < 0.2


def test_building_twice_gives_identical_bytes(pipe, built, tmp_path: Path) -> None:
    again = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist")  # pattern matrix included
    assert again.path.name == built.path.name and again.path.read_bytes() == built.path.read_bytes()
    # rebuilding into the same folder replaces it with the same content
    third = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist")
    assert third.sha256 == built.sha256 and len(list((tmp_path / "dist").iterdir())) == 3


def test_gzip_bundle_is_deterministic(pipe, tmp_path: Path) -> None:
    cfg = BundleConfig(compress=True, golden_count=1, activation_max_elements=0, patterns=False)
    a = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "a", cfg)
    b = build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "b", cfg)
    assert a.path.name.endswith(".tar.gz") and a.path.read_bytes() == b.path.read_bytes()
    assert a.path.read_bytes()[4:8] == b"\0\0\0\0"  # gzip header mtime
    with gzip.open(a.path) as g:
        assert g.read(512)[:13] == b"manifest.json"
    assert a.activations == 0 and a.golden == 1
    report = verify_bundle(a.path)
    assert report.ok and sum(c.kind == "output" for c in report.checks) == 1


def test_refuses_thresholds_from_another_calibration(pipe, tmp_path: Path, capsys) -> None:
    with pytest.raises(BindingMismatchError, match="other.json"):
        build_bundle(pipe["deployed"], pipe["other_thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist")
    assert not (tmp_path / "dist").exists()
    assert main(_args(pipe, tmp_path / "dist", pipe["other_thresholds"])) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "quantkit bundle: error:" in err and "quantkit bind" in err
    assert not (tmp_path / "dist").exists()


def test_refuses_model_that_is_not_the_records(pipe, tmp_path: Path) -> None:
    q = tmp_path / "deployed"
    shutil.copytree(pipe["deployed"], q)
    shutil.copy(pipe["other"] / "model_int8.onnx", q / "model_int8.onnx")
    with pytest.raises(BindingMismatchError, match="model_int8.onnx"):
        build_bundle(q, pipe["thresholds"], pipe["intake"], pipe["golden"], tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


def test_bad_inputs_give_one_line_errors_and_no_output(pipe, tmp_path: Path, capsys) -> None:
    out = tmp_path / "dist"
    assert main(_args(pipe, out, tmp_path / "missing.json")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.json" in err and "not found" in err and not out.exists()
    # empty golden set
    empty = tmp_path / "empty"
    (empty / "images").mkdir(parents=True)
    (empty / "manifest.json").write_text(json.dumps({"set_id": "x", "images": []}))
    with pytest.raises(CalibrationSetError, match="no images"):
        build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], empty, out)
    # a golden image that no longer matches its manifest digest
    bad = tmp_path / "bad"
    shutil.copytree(pipe["golden"], bad)
    (bad / "images" / "0001.png").write_bytes(b"not the image")
    with pytest.raises(CalibrationSetError, match="0001.png"):
        build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], bad, out)
    assert not out.exists()


def test_out_folder_with_foreign_files_is_left_alone(pipe, tmp_path: Path) -> None:
    out = tmp_path / "dist"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(InputFileError, match="notes.txt"):
        build_bundle(pipe["deployed"], pipe["thresholds"], pipe["intake"], pipe["golden"], out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_config_roundtrip_validation_and_params_section() -> None:
    cfg = BundleConfig(golden_count=2, tolerance_steps=2.0)
    assert BundleConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="golden_count"):
        BundleConfig(golden_count=0)
    with pytest.raises(ConfigError, match="unknown option"):
        BundleConfig.from_dict({"golden": 3})
    section = dict(load_params(REPO / "params.yaml", "bundle"))
    section.pop("verify", None)
    assert BundleConfig.from_dict(section).golden_count == 4


def test_cli_bundle_json_and_golden_count(pipe, tmp_path: Path, capsys) -> None:
    assert main(_args(pipe, tmp_path / "dist") + ["--golden-count", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["golden"] == 2 and Path(res["path"]).is_file() and res["adapter"] == "db_text"

"""``quantize.engine: nncf`` through params.yaml down to the per-runtime files (issue 37): the ``place`` stage's command
(``--ranges-from`` the deployed record, ``--model``, ``--target``) gives OpenVINO NNCF's own file and ONNX Runtime ORT's
placement on NNCF's ranges; each refusal names one key; ``compare`` reads NNCF's Q/DQ pairs; NNCF's passes report
progress."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
import yaml
from test_nncf_engine import NNCF, env, needs_nncf, quantized  # noqa: F401  (module fixtures)

from quantkit.artifacts import CalibrationRecord
from quantkit.errors import ConfigError
from quantkit.quantize import StaticQuantConfig, quantize_with_ranges
from quantkit.quantize.placement import target_engine

TARGETS = {"onnxruntime": {"placement": "ort"}, "openvino": {"placement": "openvino"}}


def _params(tmp_path, top: dict, model_quantize: dict | None = None) -> str:
    m: dict = {"file": "m.onnx", "task": {"adapter": "db_text"}}
    if model_quantize is not None:
        m["quantize"] = model_quantize
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"quantize": top, "models": {"m": m}, "targets": TARGETS}))
    return str(p)


def test_each_target_message_names_one_key_and_no_circle():
    """engine ort + a target placement only NNCF applies names quantize.engine; engine nncf accepts every placement."""
    with pytest.raises(ConfigError) as e:
        target_engine("ort", "openvino", "nncf")
    assert "set quantize.engine: nncf" in str(e.value) and "\n" not in str(e.value) and "placement:" not in str(e.value).split(";")[1]
    assert target_engine("nncf", "openvino", "openvino") == ("nncf", "nncf")
    assert target_engine("nncf", "openvino", "nncf") == ("nncf", "nncf")
    assert target_engine("nncf", "onnxruntime", "ort") == ("ort", "ort")
    assert target_engine("nncf", "onnxruntime", "ort-float-decode") == ("ort", "ort-float-decode")
    assert target_engine("ort", "openvino", "openvino") == ("ort", "openvino")


def test_engine_nncf_alone_is_a_quantize_section(tmp_path):
    """models.M.quantize: {engine: nncf} (no placement key) builds NNCF's config; --target builds each runtime's."""
    import argparse

    from quantkit.cli.quantize import build_config

    params = _params(tmp_path, {}, {"engine": "nncf"})
    base = dict(params=params, section="quantize", model="m", dynamic=False, method=None, chunk_size=None, max_images=None,
                placement=None, engine=None, target=None)
    assert (build_config(argparse.Namespace(**base)).engine, build_config(argparse.Namespace(**base)).placement) == ("nncf", "nncf")
    ort = build_config(argparse.Namespace(**{**base, "target": "onnxruntime"}))
    ov = build_config(argparse.Namespace(**{**base, "target": "openvino"}))
    assert (ort.engine, ort.placement) == ("ort", "ort") and (ov.engine, ov.placement) == ("nncf", "nncf")
    top = build_config(argparse.Namespace(**{**base, "params": _params(tmp_path, {"engine": "nncf"}), "model": None}))
    assert (top.engine, top.placement) == ("nncf", "nncf")


@needs_nncf
def test_openvino_gets_nncfs_own_file(env, quantized, tmp_path):  # noqa: F811
    rec = quantize_with_ranges(quantized["u8"], env["intake"], StaticQuantConfig(**NNCF), out=tmp_path / "ov")
    assert (tmp_path / "ov" / "model_int8.onnx").read_bytes() == (quantized["u8"] / "model_int8.onnx").read_bytes()
    assert rec.fingerprint == quantized["u8_record"].fingerprint and rec.calibration["ranges_from"] == rec.fingerprint
    assert CalibrationRecord.load(tmp_path / "ov").calibration["ranges_from"] == rec.fingerprint


@needs_nncf
def test_onnxruntime_gets_ort_placement_on_nncfs_ranges(env, quantized, tmp_path):  # noqa: F811
    """NNCF's file has Q/DQ on Conv inputs only; ORT's placement quantizes the Conv outputs too (what ORT fuses into
    integer kernels), with NNCF's ranges on the tensors NNCF quantized and the rest calibrated on the record's set."""
    from quantkit.quantize.reuse import engine_ranges

    nrec = quantized["u8_record"]
    rec = quantize_with_ranges(quantized["u8"], env["intake"], StaticQuantConfig(), out=tmp_path / "ort")
    assert rec.config["engine"] == "ort" and rec.calibration["ranges_from"] == nrec.fingerprint
    assert rec.calibration["ranges_engine"] == "nncf" and rec.calibration["fixed_ranges"]
    nncf_q = {t.name for t in nrec.tensors if t.role == "activation"}
    ort_q = {t.name for t in rec.tensors if t.role == "activation"}
    assert nncf_q <= ort_q and ort_q - nncf_q, (nncf_q, ort_q)
    for name, (lo, hi) in engine_ranges(nrec).items():  # every NNCF range kept (ORT's grid from it: within one step)
        if name in rec.calibration["fixed_ranges"]:
            got = rec.calibrated_ranges[name]
            assert np.isclose(got[0], lo, atol=1e-6) and np.isclose(got[1], hi, atol=1e-6)
    m = onnx.load(str(tmp_path / "ort" / "model_int8.onnx"))
    assert sum(n.op_type == "QuantizeLinear" for n in m.graph.node) > sum(
        n.op_type == "QuantizeLinear" for n in onnx.load(str(quantized["u8"] / "model_int8.onnx")).graph.node)


@needs_nncf
def test_place_stage_command_with_model_quantize_engine_nncf(env, quantized, run_cli, tmp_path):  # noqa: F811
    """The dvc.yaml place command, models.m.quantize: {engine: nncf}: both targets written, no message."""
    params = _params(tmp_path, {}, {"engine": "nncf"})
    for runtime in TARGETS:
        code, _, err = run_cli(["quantize", env["intake"], "--ranges-from", quantized["u8"], "--params", params, "--model", "m",
                                  "--target", runtime, "--out", tmp_path / runtime, "--json"])
        assert code == 0, err
    assert CalibrationRecord.load(tmp_path / "openvino").config["engine"] == "nncf"
    assert CalibrationRecord.load(tmp_path / "onnxruntime").config["engine"] == "ort"


@needs_nncf
def test_an_ort_record_under_engine_nncf_names_the_stage_to_rerun(env, tmp_path):  # noqa: F811
    from quantkit.quantize import quantize

    ort = quantize(env["intake"], StaticQuantConfig(), out=tmp_path / "ort", calibration_set=env["set"])
    assert ort.config["engine"] == "ort"
    with pytest.raises(ConfigError, match="written by engine ort but quantize.engine is nncf; quantize the deployed model again"):
        quantize_with_ranges(tmp_path / "ort", env["intake"], StaticQuantConfig(**NNCF), out=tmp_path / "x")


@needs_nncf
def test_compare_reads_nncfs_pairs(env, quantized):  # noqa: F811
    """compare on NNCF's record found nothing ('are the FP32 model and record from the same intake?'): NNCF's Q/DQ
    tensors are not named as ORT names them. The pairs are found by the graph now."""
    from quantkit.calibset import CalibrationSet, CalibrationSetReader
    from quantkit.note import ExportNote
    from quantkit.quantize.compare import compare_layers

    note = ExportNote.load(env["intake"] / "export_note.json")
    reader = CalibrationSetReader(CalibrationSet.load(env["set"]), note.preprocessing, batch_size=1)
    df = compare_layers(env["intake"] / "model.onnx", quantized["u8"] / "model_int8.onnx", quantized["u8_record"], reader.iter_batches())
    acts = {t.name for t in quantized["u8_record"].tensors if t.role == "activation"}
    assert acts & set(df["tensor"]) and df["sqnr_db"].notna().all()


@needs_nncf
def test_nncf_passes_log_progress(env, tmp_path, caplog, monkeypatch):  # noqa: F811
    """Off a terminal each pass NNCF makes over the images is a quantkit.progress line (every ~30 s; here at once)."""
    from quantkit import progress
    from quantkit.quantize import quantize

    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    with caplog.at_level(logging.INFO, logger="quantkit.progress"):
        quantize(env["intake"], StaticQuantConfig(**NNCF), out=tmp_path / "q", calibration_set=env["set"])
    assert any(r.getMessage().startswith("nncf: pass 1 over the calibration images") for r in caplog.records), caplog.text


@needs_nncf
@pytest.mark.parametrize("label", ["nncf", "ort"])
def test_bind_bundle_verify_accept_both_target_files(env, quantized, tmp_path, label):  # noqa: F811
    """NNCF's own file (OpenVINO's) and ORT's placement on NNCF's ranges (ONNX Runtime's) go through bind, bundle and
    verify like an ORT record: no check refuses a record by its engine."""
    from quantkit.bundle.build import build_bundle
    from quantkit.bundle.verify import verify_bundle
    from quantkit.tasks import make_adapter
    from quantkit.thresholds import ThresholdsConfig, bind

    cfg = StaticQuantConfig(**NNCF) if label == "nncf" else StaticQuantConfig()
    q = tmp_path / "q"
    rec = quantize_with_ranges(quantized["u8"], env["intake"], cfg, out=q)
    bind(q, env["intake"], env["set"], make_adapter("db_text"), ThresholdsConfig(min_agreement=0.0), tmp_path / "t.json")
    res = build_bundle(q, tmp_path / "t.json", env["intake"], env["set"], tmp_path / "dist")
    report = verify_bundle(tmp_path / "dist")
    assert res.record_fingerprint == rec.fingerprint
    assert report.runs and not report.verdict.reasons, (report.verdict.answer, report.failures)

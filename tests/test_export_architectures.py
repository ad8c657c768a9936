"""``quantkit export`` on real architectures (MobileNetV3-Small, an SSDlite detector with post-processing in the
graph), through ``intake`` and ``quantize``; and the two refusals: an operator that cannot be exported, and a
graph that computes differently from PyTorch (bilinear upsampling at opset 10)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import yaml
from test_quantize_fixtures import make_set

from quantkit._io import sha256_file
from quantkit.cli.main import main
from quantkit.note import ExportNote

MODELS = Path(__file__).resolve().parent / "export_models.py"
CLS_PRE = {"resize_policy": "stretch", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
DET_PRE = {"resize_policy": "letterbox", "pad_value": 114}
DET = {"input_size": [128, 128], "opset": 13, "output_names": ["boxes", "scores"], "factory_kwargs": {"num_classes": 3, "size": [128, 128], "fpn": True},
       "preprocessing": DET_PRE}
EXPORT = {
    "classifier": {"input_size": [96, 96], "opset": 13, "output_names": ["logits"], "factory_kwargs": {"num_classes": 10}, "preprocessing": CLS_PRE},
    "detector": DET,
    "detector_opset10": {**DET, "opset": 10},
    "detector_align": {**DET, "factory_kwargs": {"num_classes": 3, "size": [128, 128], "align": True}},
}
# random weights respond to nothing, so the intake's text-probe note check has no signal to read: off
INTAKE = {"classifier": {"input_size": [96, 96], "note_check": "off", "preprocessing": CLS_PRE},
          "detector": {"input_size": [128, 128], "note_check": "off", "preprocessing": DET_PRE}}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    (root / "export.yaml").write_text(yaml.safe_dump(EXPORT))
    for name, section in INTAKE.items():
        (root / f"intake-{name}.yaml").write_text(yaml.safe_dump({"intake": section}))
    return root, make_set(root / "calib", 4, size=128, name="calib")


def _export(root: Path, factory: str, section: str, out: Path, capsys) -> tuple[int, str, str]:
    rc = main(["export", f"{MODELS}:{factory}", "--params", str(root / "export.yaml"), "--section", section, "--out", str(out)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _check_archive(out: Path, section: str, factory: str) -> ExportNote:
    """The note archives the command, call, exporter, versions, and the sample and framework outputs (hashes match the files)."""
    note = ExportNote.load(out / "export_note.json")
    assert note == ExportNote.from_model(onnx.load(str(out / "model.onnx")))
    prov, rec = note.provenance, note.provenance.export
    assert rec is not None and prov.framework == "PyTorch" and prov.framework_version == torch.__version__
    assert {"torch", "onnx", "onnxruntime", "numpy", "python", "quantkit"} <= set(prov.runtime_versions)
    assert prov.runtime_versions["torch"] == torch.__version__ and prov.runtime_versions["onnx"] == onnx.__version__
    assert prov.export_command.startswith(f"quantkit export {MODELS}:{factory} ") and f"--section {section}" in prov.export_command
    assert rec.exporter.startswith("torch.onnx.export") and "dynamo=False" in rec.call and f"opset_version={rec.opset}" in rec.call
    assert rec.module == f"{MODELS}:{factory}" and rec.module_sha256 == sha256_file(MODELS) and len(rec.weights_sha256) == 64
    for arr in (rec.sample_input, *rec.framework_outputs):
        assert sha256_file(out / arr.file) == arr.sha256
        a = np.load(out / arr.file, allow_pickle=False)
        assert a.shape == arr.shape and str(a.dtype) == arr.dtype
    x = np.load(out / rec.sample_input.file)
    assert prov.sample_input_digest == hashlib.sha256(x.tobytes()).hexdigest()
    return note


def _ort(out: Path) -> dict[str, np.ndarray]:
    """ONNX Runtime's outputs on the archived sample input."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": np.load(out / "sample" / "input.npy")})))


def _intake_and_quantize(root: Path, calib: Path, exported: Path, tmp_path: Path, kind: str, capsys) -> onnx.ModelProto:
    assert main(["intake", str(exported / "model.onnx"), "--params", str(root / f"intake-{kind}.yaml"), "--out", str(tmp_path / "intake")]) == 0, \
        capsys.readouterr().err
    assert main(["quantize", str(tmp_path / "intake"), "--calibration-set", str(calib), "--out", str(tmp_path / "q")]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return onnx.load(str(tmp_path / "q" / "model_int8.onnx"))


def test_mobilenet_v3_exports_intakes_and_quantizes(env, tmp_path, capsys):
    root, calib = env
    rc, out, err = _export(root, "mobilenet_v3_small", "classifier", tmp_path / "exp", capsys)
    assert rc == 0, err
    assert "logits" in out and "opset 13" in out and "DIFFERS" not in out
    rec = _check_archive(tmp_path / "exp", "classifier", "mobilenet_v3_small").provenance.export
    assert rec.factory_kwargs == {"num_classes": 10} and [(o.name, o.shape) for o in rec.framework_outputs] == [("logits", (1, 10))]
    np.testing.assert_allclose(_ort(tmp_path / "exp")["logits"], np.load(tmp_path / "exp" / "sample" / "output_0.npy"), rtol=1e-3, atol=1e-4)
    saved = json.loads((tmp_path / "exp" / "export.json").read_text())
    ops = {o["op_type"] for o in saved["inspection"]["ops"]}
    assert saved["passed"] and saved["samples"] == 2 and {"Conv", "HardSigmoid", "Mul", "GlobalAveragePool", "Gemm"} <= ops
    assert "BatchNormalization" not in ops  # folded into the convolutions by the eval-mode export
    q = _intake_and_quantize(root, calib, tmp_path / "exp", tmp_path, "classifier", capsys)
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) > 20 and [o.name for o in q.graph.output] == ["logits"]
    # the export folder is itself an intake folder: quantize takes it directly, and the INT8 model carries the archive
    assert main(["quantize", str(tmp_path / "exp"), "--calibration-set", str(calib), "--out", str(tmp_path / "q2")]) == 0, capsys.readouterr().err
    q2 = onnx.load(str(tmp_path / "q2" / "model_int8.onnx"))
    assert ExportNote.from_model(q2).provenance.export == rec


def test_ssdlite_detector_with_postprocessing_exports_intakes_and_quantizes(env, tmp_path, capsys):
    root, calib = env
    rc, out, err = _export(root, "ssdlite", "detector", tmp_path / "exp", capsys)
    assert rc == 0, err
    rec = _check_archive(tmp_path / "exp", "detector", "ssdlite").provenance.export
    n = 3 * (8 * 8 + 4 * 4 + 2 * 2)  # anchors per cell x cells at strides 16, 32, 64 of 128 px
    assert [(o.name, o.shape) for o in rec.framework_outputs] == [("boxes", (1, n, 4)), ("scores", (1, n, 4))]
    boxes, scores = (np.load(tmp_path / "exp" / a.file) for a in rec.framework_outputs)
    assert boxes.min() >= 0 and boxes.max() <= 128 and np.allclose(scores.sum(-1), 1, atol=1e-5)  # decoded pixels, softmax
    got = _ort(tmp_path / "exp")
    np.testing.assert_allclose(got["boxes"], boxes, rtol=1e-3, atol=1e-4)
    ops = {o["op_type"] for o in json.loads((tmp_path / "exp" / "export.json").read_text())["inspection"]["ops"]}
    assert {"Resize", "Exp", "Softmax", "Concat", "Min"} <= ops  # FPN upsampling, box decoding, scores, clamping in the graph
    q = _intake_and_quantize(root, calib, tmp_path / "exp", tmp_path, "detector", capsys)
    assert [o.name for o in q.graph.output] == ["boxes", "scores"]


def test_operator_that_cannot_be_exported_names_the_submodule_and_writes_nothing(env, tmp_path, capsys):
    root, _ = env
    rc, out, err = _export(root, "ssdlite", "detector_align", tmp_path / "exp", capsys)
    assert rc == 2 and out == ""
    assert "submodule align (FeatureAlign)" in err and "aten::grid_sampler" in err and "opset version 13" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_graph_that_computes_differently_is_refused_naming_the_first_diverging_submodule(env, tmp_path, capsys):
    root, _ = env
    rc, out, err = _export(root, "ssdlite", "detector_opset10", tmp_path / "exp", capsys)
    assert rc == 2 and out == ""
    line = [ln for ln in err.splitlines() if ln.startswith("quantkit export: error:")]
    assert len(line) == 1 and "Traceback" not in err, err
    assert "ONNX Runtime differs from PyTorch on output 'boxes'" in line[0]
    assert "first diverging submodule neck.up (Upsample)" in line[0] and "'/neck/up/Resize_output_0'" in line[0]
    assert "onnx:Resize for ONNX opset version 10" in line[0]  # the exporter's own warning, kept in the one line
    assert list(tmp_path.iterdir()) == []

"""PyTorch export with the note (optional: skipped without torch)."""

from __future__ import annotations

import json

import onnx
import pytest

from quantkit.errors import ModelError
from quantkit.intake import IntakeConfig, intake
from quantkit.note import ExportNote

torch = pytest.importorskip("torch")

from quantkit.intake.export import TorchExportConfig, export_torch


class Bessel(torch.nn.Module):
    def forward(self, x):
        return torch.special.i0(x)  # aten::i0 has no ONNX symbolic


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Hardsigmoid(), torch.nn.Conv2d(8, 1, 1), torch.nn.Sigmoid())


def test_export_writes_note_and_matches_torch(tmp_path):
    cfg = TorchExportConfig.from_dict({"input_size": [32, 48], "opset": 13, "output_names": ["prob"]})
    r = export_torch(_net(), cfg, tmp_path / "exp")
    assert r.passed and r.outputs[0].name == "prob" and r.outputs[0].max_abs_diff < 1e-5 and r.samples == 2
    m = onnx.load(tmp_path / "exp" / "model.onnx")
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 32, 48]
    note = ExportNote.from_model(m)
    assert note == ExportNote.load(tmp_path / "exp" / "export_note.json")
    assert note.provenance.framework == "PyTorch" and note.provenance.framework_version == torch.__version__
    assert "opset_version=13" in note.provenance.export_command and note.provenance.runtime_versions["torch"] == torch.__version__
    rec = json.loads((tmp_path / "exp" / "export.json").read_text())
    assert rec["passed"] and rec["validation"]["ok"] and {o["op_type"] for o in rec["inspection"]["ops"]} >= {"Conv", "HardSigmoid"}
    # the exported folder is an intake input like any other model
    res = intake(tmp_path / "exp" / "model.onnx", IntakeConfig.from_dict({"input_size": [32, 48], "note_check": "off"}), tmp_path / "intake")
    assert res.conversion.method == "none" and res.numeric.passed


def test_unsupported_operator_names_the_submodule(tmp_path, capfd):
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), torch.nn.Sequential(torch.nn.ReLU(), Bessel()))
    with pytest.raises(ModelError) as e:
        export_torch(net, TorchExportConfig.from_dict({"input_size": [16, 16]}), tmp_path / "exp")
    msg = str(e.value)
    assert "submodule 1.1 (Bessel)" in msg and "aten::i0" in msg and "\n" not in msg
    assert not (tmp_path / "exp").exists()
    assert "Torch IR graph" not in capfd.readouterr().out  # the exporter's stdout dump is routed to the log

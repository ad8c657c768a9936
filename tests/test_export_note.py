"""The export note's ``provenance.export`` record: notes written before it existed load and keep their bytes."""

from __future__ import annotations

import json

import pytest

from quantkit._io import canonical_json
from quantkit.errors import ConfigError
from quantkit.note import ArchivedArray, ExportNote, FrameworkExport, Provenance

# what `quantkit intake` wrote before provenance.export existed (main at c8c5bf4)
OLD = {
    "preprocessing": {"color_order": "RGB", "dtype": "float32", "input_name": "x", "input_size": [640, 640], "layout": "NCHW",
                      "mean": [0.5, 0.5, 0.5], "pad_value": 0, "resize_policy": "letterbox", "scale": 0.00392156862745098,
                      "schema_version": 1, "std": [0.5, 0.5, 0.5]},
    "provenance": {"export_command": "", "framework": "PaddlePaddle (paddle2onnx)", "framework_version": "", "opset": 13,
                   "runtime_versions": {"numpy": "2.4.6", "onnx": "1.23.2", "onnxruntime": "1.32.0", "python": "3.11.7", "quantkit": "0.1.0"},
                   "sample_input_digest": "ab" * 32, "schema_version": 1, "source": "models/ppocr_det.onnx", "source_digest": "cd" * 32},
    "schema_version": 1,
}


def test_old_note_loads_and_saves_the_same_bytes(tmp_path):
    (tmp_path / "old.json").write_text(canonical_json(OLD))
    note = ExportNote.load(tmp_path / "old.json")
    assert note.provenance.export is None
    note.save(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    # saved again: the old content, plus only the fields added since (at their defaults), and no export record
    added = {"preprocessing": {"channels", "batch_axis"}, "provenance": {"named_nodes"}}
    assert {k: {f: v for f, v in again[k].items() if f not in added.get(k, set())} if isinstance(v, dict) else v
            for k, v in again.items()} == OLD
    assert "export" not in again["provenance"]


def _record() -> FrameworkExport:
    arr = ArchivedArray("x", "sample/input.npy", "ef" * 32, (1, 3, 8, 8), "float32")
    return FrameworkExport(module="pkg.models:build", module_sha256="01" * 32, weights_sha256="02" * 32, factory_kwargs={"size": [8, 8], "fpn": True},
                           exporter="torch.onnx.export (TorchScript exporter, dynamo=False)", call="torch.onnx.export(...)", opset=17,
                           sample_input=arr, framework_outputs=(ArchivedArray("y", "sample/output_0.npy", "12" * 32, (1, 2), "float32"),))


def test_note_with_export_record_round_trips(tmp_path):
    from onnx import TensorProto, helper

    note = ExportNote(provenance=Provenance(framework="PyTorch", export=_record()))
    note.save(tmp_path / "n.json")
    back = ExportNote.load(tmp_path / "n.json")
    assert back == note and back.provenance.export.framework_outputs[0].shape == (1, 2)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g)
    note.embed(m)
    assert ExportNote.from_model(m) == note


def test_malformed_export_record_names_the_field(tmp_path):
    data = ExportNote(provenance=Provenance(export=_record())).to_dict()
    data["provenance"]["export"]["sample_input"]["shape"] = "1x3x8x8"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"bad.json.*provenance.export.sample_input.shape: expected a list"):
        ExportNote.load(tmp_path / "bad.json")

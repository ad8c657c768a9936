"""``quantkit export``'s MODULE forms, the archive it writes, and every bad input: one line, exit 2, nothing written."""

from __future__ import annotations

import json
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
import yaml

from quantkit._io import sha256_file
from quantkit.cli.main import main
from quantkit.export import TorchExportConfig, export_torch, load_source

FACTORIES = textwrap.dedent('''
    import torch

    class Small(torch.nn.Module):
        def __init__(self, channels=4, as_tuple=False):
            super().__init__()
            self.as_tuple = as_tuple
            self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(channels)
            self.act = torch.nn.Hardswish()
            self.head = torch.nn.Conv2d(channels, 2, 1)

        def forward(self, x):
            y = self.head(self.act(self.bn(self.conv(x))))
            out = {"prob": torch.sigmoid(y), "mean": y.mean((2, 3))}
            return tuple(out.values()) if self.as_tuple else out

    def small(channels=4, as_tuple=False):
        return Small(channels, as_tuple)

    def broken():
        raise ValueError("checkpoint 'best.pt' not found")

    def not_a_module():
        return {"weights": 1}

    def gray():
        return torch.nn.Conv2d(1, 2, 3)

    NOT_CALLABLE = 3
''')


@pytest.fixture()
def env(tmp_path, monkeypatch):
    (tmp_path / "mymodels_src.py").write_text(FACTORIES)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "export": {"input_size": [16, 16], "opset": 13, "output_names": ["prob", "mean"]},
        "export_kw": {"input_size": [16, 16], "opset": 13, "factory_kwargs": {"channels": 6}},
        "export_badkw": {"input_size": [16, 16], "factory_kwargs": {"chanels": 6}},
        "export_names": {"input_size": [16, 16], "output_names": ["only_one"]},
        "export_plain": {"input_size": [16, 16], "opset": 13},
        "export_images": {"input_size": [16, 16], "sample_images": ["photo.png"], "random_samples": 0, "preprocessing": {"resize_policy": "stretch"}},
        "export_noimage": {"input_size": [16, 16], "sample_images": ["missing.png"]},
    }))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mymodels_src", raising=False)
    return tmp_path


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["export", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_package_module_factory_from_the_working_folder(env, capsys):
    rc, out, err = _run(["mymodels_src:small", "--out", "exp"], capsys)
    assert rc == 0, err
    assert "prob" in out and "mean" in out and "torch 2.13" in out
    note = json.loads((env / "exp" / "export_note.json").read_text())["provenance"]
    rec = note["export"]
    assert rec["module"] == "mymodels_src:small" and rec["module_sha256"] == sha256_file(env / "mymodels_src.py")
    assert note["export_command"] == "quantkit export mymodels_src:small --params params.yaml --section export --out exp"
    assert rec["call"].startswith("model = small(); model.eval(); torch.onnx.export(model, ")
    assert "output_names=['prob', 'mean']" in rec["call"] and "opset_version=13" in rec["call"]
    assert rec["call"].endswith("  # small from mymodels_src, called after torch.manual_seed(0)")
    assert [o["name"] for o in rec["framework_outputs"]] == ["prob", "mean"] and rec["framework_outputs"][1]["shape"] == [1, 2]
    assert sorted(p.name for p in (env / "exp" / "sample").iterdir()) == ["input.npy", "output_0.npy", "output_1.npy"]


def test_factory_kwargs_and_seeded_weights_give_the_same_bytes_twice(env, capsys):
    assert _run(["mymodels_src.py:small", "--section", "export_kw", "--out", "a"], capsys)[0] == 0
    first = (env / "a" / "model.onnx").read_bytes()
    assert _run(["mymodels_src.py:small", "--section", "export_kw", "--out", "a"], capsys)[0] == 0  # replaces its own output
    assert (env / "a" / "model.onnx").read_bytes() == first
    rec = json.loads((env / "a" / "export_note.json").read_text())["provenance"]["export"]
    assert rec["factory_kwargs"] == {"channels": 6} and "small(channels=6)" in rec["call"]
    assert np.load(env / "a" / "sample" / "output_0.npy").shape == (1, 2, 16, 16)


def test_torchscript_and_torch_export_files(env, capsys):
    src = load_source("mymodels_src.py:small", {"as_tuple": True}, seed=0)  # a traced dict output cannot be exported
    x = torch.zeros(1, 3, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(src.module, (x,), strict=False).save(str(env / "m.pt"))
        torch.export.save(torch.export.export(src.module, (x,)), str(env / "m.pt2"))
    digests = set()
    for name, kind in (("m.pt", "torchscript"), ("m.pt2", "torch.export")):
        rc, out, err = _run([name, "--section", "export_plain", "--out", f"out-{kind}"], capsys)
        assert rc == 0, err
        saved = json.loads((env / f"out-{kind}" / "export.json").read_text())
        rec = saved["export_note"]["provenance"]["export"]
        assert saved["kind"] == kind and saved["passed"] and rec["module_sha256"] == sha256_file(env / name)
        digests.add(rec["weights_sha256"])
    r = export_torch(src.module, TorchExportConfig.from_dict({"input_size": [16, 16]}), env / "obj")
    assert r.kind == "module" and digests == {r.record.weights_sha256}  # the same weights, whichever form they came in


@pytest.mark.parametrize("module, section, msg", [
    ("nosuchpkg.models:build", "export", "nosuchpkg.models:build: no module named 'nosuchpkg'; run from the folder that holds it"),
    ("mymodels_src", "export", "expected 'package.module:factory'"),
    ("mymodels_src:sm-all", "export", "expected 'package.module:factory'"),
    ("mymodels_src.py", "export", "a Python file needs the factory's name"),
    ("mymodels_src:missing", "export", "mymodels_src has no attribute 'missing'"),
    ("mymodels_src:NOT_CALLABLE", "export", "NOT_CALLABLE is a int, not a callable factory"),
    ("mymodels_src:broken", "export", "the factory raised ValueError: checkpoint 'best.pt' not found"),
    ("mymodels_src:not_a_module", "export", "the factory returned a dict, not a torch.nn.Module"),
    ("mymodels_src:small", "export_badkw", "the factory raised TypeError: small() got an unexpected keyword argument 'chanels'"),
    ("mymodels_src:small", "export_names", "export.output_names lists 1 names but mymodels_src:small returns 2 tensors"),
    ("mymodels_src:small", "nope", "section 'nope' is missing"),
    ("mymodels_src:gray", "export", "running the model on a [1, 3, 16, 16] float32 input raised RuntimeError: "),
    ("missing.py:small", "export", "missing.py not found"),
    ("mymodels_src:small", "export_noimage", "missing.png"),
    ("weights.pt", "export", "not a TorchScript (torch.jit.save) archive"),
    ("weights.pt2", "export", "not a torch.export (torch.export.save) archive"),
    ("gone/model.pt", "export", "gone/model.pt: file not found"),
])
def test_bad_module_is_one_line_exit_2_and_writes_nothing(env, capsys, module, section, msg):
    (env / "weights.pt").write_bytes(b"not a zip archive")
    (env / "weights.pt2").write_bytes(b"not a zip archive")
    before = sorted(p.name for p in env.iterdir())
    rc, out, err = _run([module, "--section", section, "--out", "exp"], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("quantkit export: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert msg in err
    assert sorted(p.name for p in env.iterdir()) == before  # no output folder, no temporary folder


def test_factory_kwargs_for_a_saved_model_are_refused(env, capsys):
    src = load_source("mymodels_src.py:small", {"as_tuple": True}, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(src.module, (torch.zeros(1, 3, 16, 16),), strict=False).save(str(env / "m.pt"))
    rc, _, err = _run(["m.pt", "--section", "export_kw", "--out", "exp"], capsys)
    assert rc == 2 and "export.factory_kwargs apply to a factory, not to a saved model" in err and not (env / "exp").exists()


def test_without_torch_the_command_says_how_to_install_it(env, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    rc, _, err = _run(["mymodels_src:small", "--out", "exp"], capsys)
    assert rc == 2 and "pip install 'quantkit[export]' (torch==2.13.0)" in err and not (env / "exp").exists()


def test_output_folder_not_written_by_quantkit_is_not_replaced(env, capsys):
    (env / "mine").mkdir()
    (env / "mine" / "notes.txt").write_text("keep")
    rc, _, err = _run(["mymodels_src:small", "--out", "mine"], capsys)
    assert rc == 2 and "holds files quantkit did not write" in err and (env / "mine" / "notes.txt").read_text() == "keep"


def test_config_is_strict():
    from quantkit.errors import ConfigError

    for bad, msg in (({"opset": 21}, "export.opset: 21 must be in 7..20"), ({"optset": 13}, "unknown option 'optset'"),
                     ({"output_names": ["a", "a"]}, "must be distinct"), ({"output_names": ["x"]}, "is the input's name"),
                     ({"input_size": [8, 8], "preprocessing": {"input_size": [4, 4]}}, "set only export.input_size")):
        with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            TorchExportConfig.from_dict(bad)
    cfg = TorchExportConfig.from_dict({"input_size": [32, 48], "factory_kwargs": {"size": [32, 48]}})
    assert TorchExportConfig.from_dict(cfg.to_dict()) == cfg and cfg.preprocessing.input_size == (32, 48)


def test_sample_images_come_first_and_are_archived(env, capsys):
    from PIL import Image

    from quantkit.note import Preprocessing

    rgb = np.random.default_rng(1).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(env / "photo.png")
    rc, out, err = _run(["mymodels_src:small", "--section", "export_images", "--out", "exp"], capsys)
    assert rc == 0, err
    expected = Preprocessing(input_size=(16, 16), resize_policy="stretch").apply(rgb)[0]
    np.testing.assert_array_equal(np.load(env / "exp" / "sample" / "input.npy"), expected)
    assert json.loads((env / "exp" / "export.json").read_text())["samples"] == 2  # the image and the text probe

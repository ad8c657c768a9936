"""The main job's models come from params.yaml `models` alone (issue #30): the model list, where each file comes from,
and the commands that read them (report, measure, verify) without naming a model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from quantkit.cli.main import main
from quantkit.paramsfile import pipeline_models
from quantkit.demo.synth import DemoConfig
from quantkit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_model_names_in_file_order_and_source_defaults_to_file(tmp_path):
    p = _params(tmp_path, {"models": {"zeta": {"file": "models/z.onnx"}, "alpha": {"source": "demo", "file": "models/demo/ppocr_det.onnx"}}})
    assert pipeline_models(p) == ["zeta", "alpha"]


@pytest.mark.parametrize("entry, match", [
    ({"intake": {}}, r"models\.m\.file is missing"),
    ({"file": "m.onnx", "source": "hub"}, r"models\.m\.source: 'hub' is not one of demo, file"),
])
def test_a_malformed_model_entry_is_named(tmp_path, entry, match):
    with pytest.raises(ConfigError, match=match):
        pipeline_models(_params(tmp_path, {"models": {"m": entry}}))


def test_empty_models_says_how_to_add_one(tmp_path):
    with pytest.raises(ConfigError, match="quantkit models add"):
        pipeline_models(_params(tmp_path, {"models": {}}))


def test_demo_models_are_named_packaged_models():
    assert DemoConfig.from_dict({"models": ["ppocr_det"]}).models == ("ppocr_det",)
    with pytest.raises(ConfigError, match="demo.models: yolo not a demo model"):
        DemoConfig.from_dict({"models": ["yolo"]})


def test_the_repositorys_pipeline_names_no_model():
    """dvc.yaml iterates over params' models; only the demo_model stage writes a model file, under models/demo/."""
    text = (ROOT / "dvc.yaml").read_text()
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for name in params["models"]:
        assert name not in text, f"dvc.yaml names the model {name!r}"
    stages = yaml.safe_load(text)["stages"]
    writers = {k: v for k, v in stages.items() if any(".onnx" in str(o) for o in v.get("do", v).get("outs", []))}
    assert list(writers) == ["demo_model"] and writers["demo_model"]["do"]["outs"] == ["models/demo/${item}.onnx"]
    for name, entry in params["models"].items():
        assert entry["source"] == "demo" and entry["file"] == f"models/demo/{name}.onnx" and name in params["demo"]["models"]


def test_report_and_measure_without_models_or_params_say_what_to_pass(tmp_path, capsys):
    for cmd in ("report", "measure"):
        assert main([cmd, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--work-dir WORK_DIR" in err[0] and "--params params.yaml" in err[0]


def test_report_reads_each_params_model_from_the_work_folder(tmp_path, capsys):
    p = _params(tmp_path, {"models": {"mine": {"file": "models/mine.onnx"}}})
    assert main(["report", "--params", str(p), "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'work' / 'mine'}: model work folder not found" in err


def test_verify_takes_the_models_own_site_sets(tmp_path, capsys):
    p = _params(tmp_path, {"models": {"m": {"file": "m.onnx"}}})
    assert main(["verify", str(tmp_path / "dist"), "--out", str(tmp_path / "v.json"), "--fp32", str(tmp_path),
                 "--params", str(p), "--model", "m"]) == 2
    assert "models.m.sets is missing" in capsys.readouterr().err


def test_report_and_measure_take_a_params_model_as_model(tmp_path, capsys):
    """``--model`` is a model of params.yaml everywhere; a work folder goes with --work-dir."""
    p = _params(tmp_path, {"models": {"mine": {"file": "models/mine.onnx"}}})
    for cmd in ("report", "measure"):
        assert main([cmd, "--params", str(p), "--model", "work/models/mine", "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert "--model work/models/mine: not a model under 'models'" in err and "--work-dir" in err
        assert main([cmd, "--params", str(p), "--model", "mine", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "out")]) == 2
        assert f"{tmp_path / 'w' / 'mine'}" in capsys.readouterr().err


def test_models_add_offers_every_resize_policy():
    import typing

    from quantkit.cli.models import RESIZE_POLICIES
    from quantkit.note import ResizePolicy

    assert RESIZE_POLICIES == typing.get_args(ResizePolicy)


@pytest.mark.parametrize("entry, match", [
    ({"source": "demo", "file": "models/mine.onnx"}, r"models\.m\.source is demo, but models/mine\.onnx is not a demo model's file"),
    ({"source": "file", "file": "models/demo/ppocr_det.onnx"}, r"models\.m\.file models/demo/ppocr_det\.onnx is written by the demo_model stage"),
])
def test_intake_refuses_a_source_that_disagrees_with_the_file(tmp_path, monkeypatch, capsys, entry, match):
    import re

    monkeypatch.chdir(tmp_path)
    _params(tmp_path, {"demo": {"models": ["ppocr_det"]}, "models": {"m": entry}})
    model = Path(entry["file"])
    model.parent.mkdir(parents=True)
    model.write_bytes(b"not read: the source check comes first")
    assert main(["intake", entry["file"], "--params", "params.yaml", "--model", "m", "--out", "work/m/intake"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(match, err[0]) and not (tmp_path / "work").exists()


def test_models_add_refuses_a_path_the_new_models_own_stages_write(tmp_path, monkeypatch, capsys):
    """dist/<name>/<runtime>/ is bundle@<name>-<runtime>'s output: a file there would be deleted by the entry's own stages."""
    from test_readme_own_model import yolov8_like

    import onnx

    monkeypatch.chdir(tmp_path)
    for name in ("params.yaml", "dvc.yaml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "dist" / "foo" / "openvino").mkdir(parents=True)
    onnx.save(yolov8_like(), tmp_path / "dist" / "foo" / "openvino" / "m.onnx")
    before = (tmp_path / "params.yaml").read_bytes()
    assert main(["models", "add", "foo", "dist/foo/openvino/m.onnx", "--params", "params.yaml", "--yes", "--share-sets-of", "ppocr_det"]) == 2
    assert "written by the DVC stage bundle@foo-openvino" in capsys.readouterr().err
    assert (tmp_path / "params.yaml").read_bytes() == before

"""``quantkit models add``: a user's model declared in params.yaml from the model itself (issue #30, item 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models import concat_head_model, const_model, tiny_map_model

from quantkit.cli.main import main
from quantkit.config import config_from_params
from quantkit.intake import IntakeConfig
from quantkit.tasks import TaskConfig
from quantkit.tasks.guess import grid_cells, guess_adapter

PARAMS = """# my pipeline's params: this comment stays
quantize:
  method: minmax   # and this one
demo:
  models: [ppocr_det]
  sets:
    a:    {out: sets/a,    count: 4,  seed: 1}     # aligned columns stay aligned
    bb:   {out: sets/bb,   count: 16, seed: 2}
intake:
  note_check: off
  preprocessing: {input_name: x, color_order: RGB, layout: NCHW, scale: 0.00392156862745098,
                  mean: [0, 0, 0], std: [1, 1, 1]}   # a wrapped flow mapping
models:
  other:                  # the user's first model
    file: models/other.onnx
    task: {adapter: classifier}

# the next section's comment stays with it
candidate:
  images_per_set: 4
"""

DVC_YAML = """stages:
  demo_model:
    foreach: ${demo.models}
    do:
      cmd: quantkit demo model --name ${item} --out models/demo/${item}.onnx
      outs:
        - models/demo/${item}.onnx
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "params.yaml").write_text(PARAMS)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "models").mkdir()
    m = tiny_map_model(32)
    for d in m.graph.input[0].type.tensor_type.shape.dim[2:]:  # a model exported at a fixed size
        d.Clear()
        d.dim_value = 32
    onnx.save(m, tmp_path / "models" / "map.onnx")
    return tmp_path


def _add(repo: Path, *args: str) -> int:
    """``quantkit models add`` with the model's own sets (one registered photo each, made here, under repo/data/NAME/)."""
    from PIL import Image

    sets = []
    for kind in ("calibration", "reference", "site"):
        folder = repo / "data" / args[0] / kind / "a"
        if not (folder / "manifest.json").is_file():
            (folder / "images").mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((96, 128, 3), 120, np.uint8)).save(folder / "images" / "0.png")
            assert main(["calibset", "register", str(folder), "--name", "a", "--kind", kind]) == 0
        sets += [f"--{kind}-set", str(folder)]
    return main(["models", "add", *args, "--params", str(repo / "params.yaml"), *sets])


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("outputs, size, adapter, options", [
    ({"prob": [1, 1, 640, 640]}, (640, 640), "db_text", {}),
    ({"prob": [1, 1, 160, 160]}, (640, 640), "db_text", {}),                     # a map at 1/4 of the input
    ({"logits": [1, 1000]}, (224, 224), "classifier", {}),
    ({"logits": [1, 1000, 1, 1]}, (224, 224), "classifier", {}),
    ({"out0": [1, 84, 8400]}, (640, 640), "box_detector", {"layout": "channels"}),  # YOLOv8
    ({"out0": [1, 25200, 85]}, (640, 640), "box_detector", {"layout": "rows"}),     # YOLOv5: 3 anchors per cell
    ({"out0": [1, 3549, 6]}, (416, 416), "box_detector", {"layout": "rows"}),       # ddddocr's YOLOX
    ({"out0": [1, 256, 5]}, (16, 16), "box_detector", {"layout": "rows", "objectness": False}),
    ({"softmax": [1, 40, 6625]}, (48, 320), "ctc_text", {}),                     # PP-OCR recognizer
])
def test_the_adapter_is_guessed_from_the_output_shapes(outputs, size, adapter, options):
    g = guess_adapter(outputs, size)
    assert (g.adapter, g.options) == (adapter, options) and next(iter(outputs)) in g.reason


def test_no_guess_for_several_outputs_or_unknown_dims():
    assert guess_adapter({"boxes": [1, 100, 4], "scores": [1, 100]}, (640, 640)).adapter is None
    assert guess_adapter({"out": [1, None, 6]}, (640, 640)).adapter is None
    assert grid_cells((640, 640)) == 8400 and grid_cells((416, 416)) == 3549


def test_add_writes_the_entry_keeping_comments_and_intake_reads_it(repo, capsys):
    before = (repo / "params.yaml").read_text()
    assert _add(repo, "mymap", str(repo / "models" / "map.onnx"), "--yes", "--color-order", "BGR", "--scale", "1/255",
                "--mean", "0.485", "0.456", "0.406", "--std", "0.229", "0.224", "0.225", "--resize-policy", "stretch") == 0
    out = capsys.readouterr().out
    assert "adapter  db_text: output 'y' [1, 1, 32, 32] is a one-channel probability map" in out
    assert "defaults pad_value written with quantkit's defaults" in out
    text = (repo / "params.yaml").read_text()
    # every byte the user wrote is unchanged (comments, alignment, wrapped flow mappings); the entry follows 'other'
    head, tail = before.split("\n# the next section's comment")
    assert text.startswith(head + "  mymap:\n    source: file\n    file: models/map.onnx\n")
    assert text.endswith("\n# the next section's comment" + tail) and "input_size: [32, 32]" in text
    p = repo / "params.yaml"
    intake = config_from_params(IntakeConfig, p, "intake", model="mymap")
    pre = intake.preprocessing
    assert intake.input_size == (32, 32) and (pre.input_name, pre.layout, pre.color_order, pre.resize_policy) == ("x", "NCHW", "BGR", "stretch")
    assert pre.scale == pytest.approx(1 / 255) and pre.mean == (0.485, 0.456, 0.406) and pre.std == (0.229, 0.224, 0.225)
    assert config_from_params(TaskConfig, p, "task", model="mymap").adapter == "db_text"
    # the entry is one intake accepts as it is
    assert main(["intake", str(repo / "models" / "map.onnx"), "--params", str(p), "--model", "mymap", "--out", str(repo / "work" / "intake")]) == 0
    assert (repo / "work" / "intake" / "export_note.json").is_file()


def test_a_guess_on_a_non_interactive_stdin_needs_yes_or_adapter_and_leaves_params_alone(repo, capsys):
    before = (repo / "params.yaml").read_bytes()
    assert _add(repo, "mymap", str(repo / "models" / "map.onnx")) == 2
    err = _one_line_error(capsys)
    assert "the task adapter is a guess (db_text); confirm it with --yes, or pass --adapter db_text" in err
    assert (repo / "params.yaml").read_bytes() == before
    assert _add(repo, "mymap", str(repo / "models" / "map.onnx"), "--adapter", "segmentation") == 0  # given: no question
    assert config_from_params(TaskConfig, repo / "params.yaml", "task", model="mymap").adapter == "segmentation"


def test_a_file_dvc_yaml_writes_is_refused_and_left_alone(repo, capsys):
    demo = repo / "models" / "demo" / "ppocr_det.onnx"  # where the demo_model stage (foreach over params) writes
    demo.parent.mkdir()
    demo.write_bytes((repo / "models" / "map.onnx").read_bytes())
    before, model = (repo / "params.yaml").read_bytes(), demo.read_bytes()
    assert _add(repo, "mine", str(demo), "--yes") == 2
    err = _one_line_error(capsys)
    assert f"{demo}: is written by the DVC stage demo_model@ppocr_det (models/demo/ppocr_det.onnx in dvc.yaml)" in err
    assert "'dvc repro' would delete it" in err
    assert (repo / "params.yaml").read_bytes() == before and demo.read_bytes() == model


def test_an_existing_name_needs_force(repo, capsys):
    m = str(repo / "models" / "map.onnx")
    assert _add(repo, "mymap", m, "--yes") == 0
    once = (repo / "params.yaml").read_bytes()
    assert _add(repo, "mymap", m, "--adapter", "segmentation") == 2
    assert "models.mymap already exists; pick another name, or pass --force to replace it" in _one_line_error(capsys)
    assert (repo / "params.yaml").read_bytes() == once
    assert _add(repo, "mymap", m, "--adapter", "segmentation", "--force") == 0
    text = (repo / "params.yaml").read_text()
    assert text.count("mymap:") == 1 and "adapter: segmentation" in text and "adapter: db_text" not in text
    assert text.replace("adapter: segmentation", "adapter: db_text") == once.decode()  # replaced in place, nothing else moved


def test_a_params_file_without_models_gets_the_section(tmp_path, capsys):
    onnx.save(concat_head_model(16), tmp_path / "det.onnx")
    (tmp_path / "params.yaml").write_text("quantize: {method: minmax}  # kept")
    assert _add(tmp_path, "det", str(tmp_path / "det.onnx"), "--yes") == 0
    text = (tmp_path / "params.yaml").read_text()
    assert text.startswith("quantize: {method: minmax}  # kept\n\nmodels:\n  det:\n    source: file\n    file: det.onnx\n")
    assert "options: {layout: rows, objectness: false}" in text


@pytest.mark.parametrize("content, message", [
    (None, "model file not found"),
    (b"not a model at all", "not a readable ONNX protobuf"),
])
def test_a_missing_or_non_onnx_file_is_refused(repo, capsys, content, message):
    f = repo / "models" / "x.onnx"
    if content is not None:
        f.write_bytes(content)
    before = (repo / "params.yaml").read_bytes()
    assert _add(repo, "x", str(f), "--yes") == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"quantkit models: error: {f}: ") and message in err
    assert (repo / "params.yaml").read_bytes() == before


def test_a_dynamic_input_needs_input_size(repo, capsys):
    onnx.save(tiny_map_model(32), repo / "models" / "dyn.onnx")  # H and W symbolic
    assert _add(repo, "dyn", str(repo / "models" / "dyn.onnx"), "--yes") == 2
    assert "has a dynamic height or width; pass --input-size H W" in _one_line_error(capsys)
    assert _add(repo, "dyn", str(repo / "models" / "dyn.onnx"), "--yes", "--input-size", "64", "96") == 0
    assert config_from_params(IntakeConfig, repo / "params.yaml", "intake", model="dyn").input_size == (64, 96)


def test_a_detector_gets_its_layout_and_a_classifier_is_recognized(repo, capsys):
    onnx.save(concat_head_model(16), repo / "models" / "det.onnx")
    assert _add(repo, "det", str(repo / "models" / "det.onnx"), "--yes") == 0
    task = config_from_params(TaskConfig, repo / "params.yaml", "task", model="det")
    assert task.adapter == "box_detector" and task.options == {"layout": "rows", "objectness": False}
    import numpy as np

    onnx.save(const_model({"logits": np.zeros((1, 10), np.float32)}, (1, 3, 32, 32)), repo / "models" / "cls.onnx")
    assert _add(repo, "cls", str(repo / "models" / "cls.onnx"), "--yes") == 0
    assert config_from_params(TaskConfig, repo / "params.yaml", "task", model="cls").adapter == "classifier"


def test_model_source_is_checked(tmp_path):
    from quantkit.errors import ConfigError

    p = tmp_path / "params.yaml"
    p.write_text("models:\n  a: {source: demo, file: models/demo/a.onnx, task: {adapter: classifier}}\n"
                 "  b: {source: file, file: b.onnx, task: {adapter: classifier}}\n")
    assert config_from_params(TaskConfig, p, "task", model="b").adapter == "classifier"
    p.write_text("models:\n  a: {source: url, file: a.onnx, task: {adapter: classifier}}\n")
    with pytest.raises(ConfigError, match=r"models\.a\.source: 'url' is not one of demo, file"):
        config_from_params(TaskConfig, p, "task", model="a")


def test_a_flow_style_models_section_is_rewritten_round_trip(tmp_path, capsys):
    """``models: {}`` cannot take a block entry as text: the file is re-dumped by ruamel, comments kept."""
    onnx.save(concat_head_model(16), tmp_path / "det.onnx")
    (tmp_path / "params.yaml").write_text("# head comment\nmodels: {}   # none yet\nquantize:\n  method: minmax  # kept\n")
    assert _add(tmp_path, "det", str(tmp_path / "det.onnx"), "--yes") == 0
    text = (tmp_path / "params.yaml").read_text()
    assert "# head comment" in text and "# kept" in text
    assert config_from_params(TaskConfig, tmp_path / "params.yaml", "task", model="det").options == {"layout": "rows", "objectness": False}


@pytest.mark.parametrize("answer, code", [("y", 0), ("n", 2)])
def test_on_a_terminal_the_guess_is_asked(repo, capsys, monkeypatch, answer, code):
    import io
    import sys

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Tty(answer + "\n"))
    before = (repo / "params.yaml").read_bytes()
    assert _add(repo, "mymap", str(repo / "models" / "map.onnx")) == code
    out, err = capsys.readouterr()
    assert "use db_text for mymap? [y/N]" in out
    if code:
        assert "not confirmed; pass --adapter NAME" in err and (repo / "params.yaml").read_bytes() == before
    else:
        assert config_from_params(TaskConfig, repo / "params.yaml", "task", model="mymap").adapter == "db_text"

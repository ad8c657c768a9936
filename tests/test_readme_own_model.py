"""The README's "Your own model" section, run literally: its shell lines in a copy of the repository's params.yaml
and dvc.yaml with a YOLOv8-shaped model built here, and the entry it writes is the README's YAML block.

`dvc repro` itself is checked with a user's model by tests/test_pipeline_e2e.py (every stage, the report, the file
untouched); here its stages are listed for the new model by DVC, and the first two lines are run as written.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]


def section(text: str) -> str:
    return text.split("## Your own model", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def yolov8_like(classes: int = 2) -> onnx.ModelProto:
    """images [1,3,640,640] -> stride-8/16/32 Conv heads -> Reshape -> Concat -> output0 [1, 4+C, 8400] (YOLOv8's layout)."""
    c = 4 + classes
    rng = np.random.default_rng(0)
    nodes, inits, parts = [], [], []
    for s in (8, 16, 32):
        inits += [numpy_helper.from_array((rng.standard_normal((c, 3, s, s)) * 0.01).astype(np.float32), f"w{s}"),
                  numpy_helper.from_array(np.array([1, c, -1], np.int64), f"shape{s}")]
        nodes += [helper.make_node("Conv", ["images", f"w{s}"], [f"h{s}"], name=f"head{s}", strides=[s, s]),
                  helper.make_node("Reshape", [f"h{s}", f"shape{s}"], [f"r{s}"], name=f"flat{s}")]
        parts.append(f"r{s}")
    nodes.append(helper.make_node("Concat", parts, ["output0"], name="cat", axis=2))
    graph = helper.make_graph(nodes, "yolov8_like", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 640, 640])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, c, 8400])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def photos(root: Path) -> None:
    """The user's images, where the README's register lines expect them: data/my_yolo/<kind>/<set>/images/ (three
    scikit-image photos each, letterboxed by the model's preprocessing)."""
    from skimage import data

    from PIL import Image

    for folder in ("calibration/day", "reference/day", "site/line1"):
        images = root / "data" / "my_yolo" / folder / "images"
        images.mkdir(parents=True)
        for name in ("astronaut", "coffee", "chelsea"):
            Image.fromarray(getattr(data, name)()).save(images / f"{name}.jpg")


def test_readme_your_own_model_runs_as_written(tmp_path):
    text = section((ROOT / "README.md").read_text(encoding="utf-8"))
    commands = [line.split("#", 1)[0].strip() for block in blocks(text, "bash") for line in block.splitlines() if line.strip()]
    assert commands[0].startswith("cp path/to/my_yolo.onnx ") and commands[-1] == "dvc repro", commands
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "path" / "to").mkdir(parents=True)
    (tmp_path / "models").mkdir()
    onnx.save(yolov8_like(), tmp_path / "path" / "to" / "my_yolo.onnx")
    photos(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for cmd in commands[:-1]:
        run = subprocess.run(shlex.split(cmd), cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
        assert run.returncode == 0, f"{cmd}: {run.stderr}"
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert (tmp_path / "data/my_yolo/site/line1/manifest.json").is_file()
    documented = yaml.safe_load(blocks(text, "yaml")[0])["models"]["my_yolo"]
    assert params["models"]["my_yolo"] == documented
    before = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert {k: v for k, v in params.items() if k != "models"} == {k: v for k, v in before.items() if k != "models"}
    assert (tmp_path / "models" / "my_yolo.onnx").read_bytes() == (tmp_path / "path" / "to" / "my_yolo.onnx").read_bytes()

    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True, timeout=120)
    listed = subprocess.run(["dvc", "stage", "list", "--name-only"], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    stages = {line.split("@")[0] for line in listed.stdout.split() if "my_yolo" in line}
    assert stages >= {"intake", "quantize", "bind", "evaluate", "drift", "compose_candidate", "quantize_candidate", "fallback",
                      "bind_candidate", "bundle", "verify", "measure"}
    assert "report" in listed.stdout.split()  # reads every params model, my_yolo included

"""docs/adapters.md stays true: its example adapter (run from the page itself) passes docs/adapter_test_template.py
on a tiny PicoDet-style ONNX model built here, decodes by GFL's formula, and is found through the entry-point group."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import ConfigError, ModelError
from quantkit.note import ExportNote
from quantkit.tasks import make_adapter
from quantkit.tasks.registry import ADAPTERS, adapter_class

DOCS = Path(__file__).resolve().parents[1] / "docs"
STRIDES, REG_MAX, CLASSES, SIZE = (8, 16, 32, 64), 7, 3, 64
OPTIONS = {"score_outputs": [f"score_{s}" for s in STRIDES], "box_outputs": [f"dist_{s}" for s in STRIDES],
           "strides": list(STRIDES), "reg_max": REG_MAX, "score_thresh": 0.4, "iou_thresh": 0.5}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _example_source() -> str:
    """The ```python block after the page's ``<!-- example: gfl_adapter.py`` marker."""
    text = (DOCS / "adapters.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- example: gfl_adapter\.py[^>]*-->\n```python\n(.*?)\n```\n", text, re.S)
    assert m, "docs/adapters.md lost its example block marker"
    return m.group(1) + "\n"


template = _load(DOCS / "adapter_test_template.py", "quantkit_docs_adapter_template")
Case = template.Case
output_shapes = template.output_shapes
# the template's tests, collected here with this module's ``case`` fixture
test_registered_and_options_round_trip = template.test_registered_and_options_round_trip
test_declarations_are_consistent = template.test_declarations_are_consistent
test_check_outputs_accepts_the_model_and_refuses_a_wrong_layout = template.test_check_outputs_accepts_the_model_and_refuses_a_wrong_layout
test_decisions_have_the_documented_types = template.test_decisions_have_the_documented_types
test_agreement_with_itself_is_perfect_and_counts_add = template.test_agreement_with_itself_is_perfect_and_counts_add
test_primary_filter_commutes_with_decoding = template.test_primary_filter_commutes_with_decoding


def _tiny_picodet() -> onnx.ModelProto:
    """``image [1, 3, 64, 64]`` -> per stride s: AveragePool(s) -> 1x1 Conv -> ``score_s [1, K, 3]`` (Sigmoid) and
    ``dist_s [1, K, 32]`` (K = (64 / s)^2, cells row-major), seeded weights; the export note is embedded."""
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    bins = 4 * (REG_MAX + 1)
    for s in STRIDES:
        k = (SIZE // s) ** 2
        nodes.append(helper.make_node("AveragePool", ["image"], [f"p{s}"], kernel_shape=[s, s], strides=[s, s]))
        for kind, ch in (("score", CLASSES), ("dist", bins)):
            w = rng.normal(0, 3.0 if kind == "score" else 2.0, (ch, 3, 1, 1)).astype(np.float32)
            b = rng.normal(-1.0 if kind == "score" else 0.0, 1.0, ch).astype(np.float32)
            inits += [numpy_helper.from_array(w, f"w_{kind}{s}"), numpy_helper.from_array(b, f"b_{kind}{s}")]
            nodes.append(helper.make_node("Conv", [f"p{s}", f"w_{kind}{s}", f"b_{kind}{s}"], [f"c_{kind}{s}"]))
            inits.append(numpy_helper.from_array(np.array([1, ch, k], np.int64), f"shape_{kind}{s}"))
            nodes.append(helper.make_node("Reshape", [f"c_{kind}{s}", f"shape_{kind}{s}"], [f"r_{kind}{s}"]))
            last = f"{kind}_{s}" if kind == "dist" else f"t_{kind}{s}"
            nodes.append(helper.make_node("Transpose", [f"r_{kind}{s}"], [last], perm=[0, 2, 1]))
            if kind == "score":
                nodes.append(helper.make_node("Sigmoid", [last], [f"score_{s}"]))
            outs.append(helper.make_tensor_value_info(f"{kind}_{s}", TensorProto.FLOAT, [1, k, ch]))
    graph = helper.make_graph(nodes, "tiny_picodet", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    ExportNote.from_dict({"preprocessing": {"input_name": "image", "input_size": [SIZE, SIZE]}}).embed(model)
    return model


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The page's example module, imported from a file written from the page (registers ``gfl_head``)."""
    folder = tmp_path_factory.mktemp("example")
    (folder / "docs_gfl_adapter.py").write_text(_example_source(), encoding="utf-8")
    ADAPTERS.pop("gfl_head", None)
    module = _load(folder / "docs_gfl_adapter.py", "docs_gfl_adapter")
    yield module
    ADAPTERS.pop("gfl_head", None)
    sys.modules.pop("docs_gfl_adapter", None)


@pytest.fixture(scope="module")
def case(example: Any) -> Any:
    model = _tiny_picodet()
    rng = np.random.default_rng(1)
    feeds = [{"image": rng.uniform(-1, 1, (1, 3, SIZE, SIZE)).astype(np.float32)} for _ in range(3)]
    wrong = {**output_shapes(model), "dist_8": [1, 64, 30]}
    return Case("gfl_head", OPTIONS, model, feeds, wrong)


def _uniform_outputs(score_cell: tuple[int, int]) -> dict[str, np.ndarray]:
    """Zero logits (uniform distributions) everywhere; one stride-16 cell scores 0.9 for class 2."""
    out = {}
    for s in STRIDES:
        k = (SIZE // s) ** 2
        out[f"score_{s}"] = np.zeros((1, k, CLASSES), np.float32)
        out[f"dist_{s}"] = np.zeros((1, k, 4 * (REG_MAX + 1)), np.float32)
    row, col = score_cell
    out["score_16"][0, row * (SIZE // 16) + col, 2] = 0.9
    return out


def test_example_decodes_by_the_gfl_formula(example: Any) -> None:
    """Uniform bins: each side at the mean bin reg_max / 2 = 3.5 strides from the anchor ((col + 0.5) s, (row + 0.5) s)."""
    a = make_adapter("gfl_head", {**OPTIONS, "input_size": [SIZE, SIZE]})
    d = a.decide(_uniform_outputs((1, 2)))
    assert len(d) == 1 and d.labels.tolist() == [2] and d.scores.tolist() == [pytest.approx(0.9)]
    cx, cy, half = (2 + 0.5) * 16, (1 + 0.5) * 16, REG_MAX / 2 * 16
    np.testing.assert_allclose(d.polygons[0], [[cx - half, cy - half], [cx + half, cy - half], [cx + half, cy + half], [cx - half, cy + half]], atol=1e-4)
    d0 = make_adapter("gfl_head", {**OPTIONS, "input_size": [SIZE, SIZE], "cell_offset": 0.0}).decide(_uniform_outputs((1, 2)))
    np.testing.assert_allclose(d0.polygons[0] - d.polygons[0], -8.0, atol=1e-4)


def test_example_reads_the_input_size_from_the_note_and_refuses_bad_options(case: Any) -> None:
    a = make_adapter("gfl_head", OPTIONS)
    assert a.input_size == (0, 0) and a.with_model(case.model).input_size == (SIZE, SIZE)
    with pytest.raises(ModelError, match="input size is unknown"):
        a.decide(_uniform_outputs((0, 0)))
    with pytest.raises(ConfigError, match="one entry per stride"):
        make_adapter("gfl_head", {**OPTIONS, "strides": [8, 16]})
    with pytest.raises(ModelError, match=r"K = 16\).*check strides"):
        a.with_model(case.model).check_outputs({**output_shapes(case.model), "score_16": [1, 15, CLASSES]})
    assert math.isclose(a.primary_metric().value({"agree_f1_num": 2.0, "agree_f1_den": 4.0}), 0.5)


def test_example_is_found_through_the_entry_point_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's pyproject snippet: an installed distribution naming the class under ``quantkit.tasks``."""
    (tmp_path / "docs_ep_adapter.py").write_text(_example_source(), encoding="utf-8")
    dist = tmp_path / "docs_ep_adapter-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: docs-ep-adapter\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[quantkit.tasks]\ngfl_head = docs_ep_adapter:GflHeadAdapter\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = ADAPTERS.pop("gfl_head", None)
    try:
        cls = adapter_class("gfl_head")
        assert cls.__module__ == "docs_ep_adapter" and cls.name == "gfl_head"
    finally:
        ADAPTERS.pop("gfl_head", None)
        sys.modules.pop("docs_ep_adapter", None)
        if saved is not None:
            ADAPTERS["gfl_head"] = saved

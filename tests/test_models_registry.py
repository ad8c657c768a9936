"""Every model of the test registry is a valid ONNX model ONNX Runtime runs (so a failing test is never the fixture's)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import MODELS


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"const"}))
def test_registered_model_checks_and_runs(name: str, model) -> None:
    from quantkit.runner import OrtRunner

    m = model(name)
    onnx.checker.check_model(m)
    shape = [d.dim_value or 1 for d in m.graph.input[0].type.tensor_type.shape.dim]
    with OrtRunner(m.SerializeToString()) as r:
        out = r.infer({m.graph.input[0].name: np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)})
    assert set(out) == {o.name for o in m.graph.output}


def test_const_model_outputs_its_designed_tensors(model) -> None:
    from models import run

    want = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    assert np.array_equal(run(model("const", outputs={"y": want}))["y"], want)


def test_fixtures_build_a_set_and_run_the_cli(image_set, run_cli) -> None:
    s = image_set("calib", n=2, size=32)
    code, out, err = run_cli(["calibset", "show", s])
    assert code == 0 and "calib" in out and err == ""

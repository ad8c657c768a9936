"""Shared fixtures: the model registry (``tests/models.py``), registered image sets, tiny intake folders, and the
CLI run in process with its one-line error captured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: files that run longest (minutes), collected first: with ``-n 2 --dist loadfile`` (pyproject's addopts) each
#: goes to a worker at the start and the other worker runs the rest of the suite meanwhile
LONGEST_FIRST = ("test_pipeline_e2e.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture
def model() -> Callable[..., Any]:
    """``model("concat_head", size=16)``: a registered tiny ONNX model (see :data:`models.MODELS`)."""
    from models import build

    return build


@pytest.fixture
def image_set(tmp_path: Path) -> Callable[..., Path]:
    """``image_set("calib", n=8, size=64)``: a registered set of crops of scikit-image's photos under tmp_path."""
    from test_quantize_fixtures import make_set

    def make(name: str = "set", **kwargs: Any) -> Path:
        return make_set(tmp_path / name, name=name, **kwargs)

    return make


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``code, out, err = run_cli(["quantize", ...])``: the CLI in process; stdout and stderr as text."""
    from quantkit.cli.main import main

    def run(argv: list[str]) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        cap = capsys.readouterr()
        return code, cap.out, cap.err

    return run

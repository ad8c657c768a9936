"""docs/benchmarks.md is bench/make_benchmarks_doc.py's output for the committed bench/results and bench/history.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("make_benchmarks_doc", ROOT / "bench" / "make_benchmarks_doc.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmarks_doc_is_current() -> None:
    expected = _script().render()
    assert (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8") == expected, (
        "docs/benchmarks.md is not current: run python bench/make_benchmarks_doc.py")


def test_every_result_file_is_in_the_doc() -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    results = ROOT / "bench" / "results"
    for p in results.rglob("*"):
        if p.is_file():
            assert f"(../bench/results/{p.relative_to(results).as_posix()})" in doc, p.name


def test_history_marker_kept() -> None:
    assert "<!-- BENCH-ROWS -->" in (ROOT / "bench" / "history.md").read_text(encoding="utf-8")

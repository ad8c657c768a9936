"""The package's shape, checked from its source: what the report loads, who talks to ONNX Runtime's quantization
tools, import circles and layers (docs/ARCHITECTURE.md), module size, no pickle."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "quantkit"
ARCHITECTURE = PKG.parent / "docs" / "ARCHITECTURE.md"
MAX_LINES = 420  # "modules a reader can hold in their head (about 400 lines at most)"


@functools.lru_cache(maxsize=None)
def _modules(pkg: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(module: str, path: Path, *, top_level_only: bool, pkg: Path = PKG) -> set[str]:
    """Absolute names of the quantkit modules (and onnxruntime.quantization) ``module`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    base_pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    mods = _modules(pkg)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = base_pkg.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names}
            # "from pkg import submodule" loads the submodule (pkg is loading already); "from pkg import name" loads pkg
            names |= {n for n in subs if n in mods} or {base}
            if any(n not in mods for n in subs):
                names.add(base)
    return names


@functools.lru_cache(maxsize=None)
def module_graph(pkg: Path = PKG, *, top_level_only: bool = False) -> dict[str, set[str]]:
    """``module -> the package's modules it imports``; importing ``a.b.c`` runs ``a`` and ``a.b`` too, so an edge to it
    is an edge to each enclosing package (not to the importer's own)."""
    mods = _modules(pkg)
    graph = {m: {n for n in _imports(m, p, top_level_only=top_level_only, pkg=pkg) if n in mods and n != m} for m, p in mods.items()}
    for m in graph:
        extra = set()
        for n in graph[m]:
            parts = n.split(".")
            extra |= {".".join(parts[:i]) for i in range(2, len(parts))}
        graph[m] |= {e for e in extra if e in mods and e != m and not m.startswith(e + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def layers(text: str, root: str = "quantkit") -> dict[str, int]:
    """``module or package -> layer`` from the table under "## Layers" in docs/ARCHITECTURE.md
    (``| 3 artifacts | `artifacts` |``; ``__init__`` is the root package)."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    out = {}
    for row in re.findall(r"^\| *(\d+) [^|]*\|([^|]*)\|", section, flags=re.M):
        for name in re.findall(r"`([\w.]+)`", row[1]):
            out[root if name == "__init__" else f"{root}.{name}"] = int(row[0])
    return out


def layer_of(module: str, table: dict[str, int]) -> int | None:
    """The layer of ``module``: that of the longest table entry equal to it or enclosing it."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if (name := ".".join(parts[:i])) in table:
            return table[name]
    return None


def upward_imports(graph: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    """Every import from a module to one of a higher layer, as ``"a (layer) -> b (layer)"``."""
    return [f"{m} ({layer_of(m, table)}) -> {n} ({layer_of(n, table)})" for m in sorted(graph) for n in sorted(graph[m])
            if (layer_of(n, table) or 0) > (layer_of(m, table) or 0)]


def test_the_report_does_not_load_the_quantization_engine():
    code = "import quantkit.report, quantkit.artifacts, sys; print(sorted(m for m in sys.modules if m.startswith('quantkit.quantize.calibration.calibrate') or m == 'onnxruntime.quantization'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_only_one_module_imports_onnxruntime_quantization():
    users = sorted(m for m, p in _modules().items() if any(n.startswith("onnxruntime.quantization") for n in _imports(m, p, top_level_only=False)))
    assert len(users) == 1, users


def test_no_pickle_anywhere_in_the_package():
    users = sorted(m for m, p in _modules().items() if "pickle" in _imports(m, p, top_level_only=False))
    assert users == []


def test_no_import_circles_counting_imports_inside_functions():
    assert circles(module_graph()) == []


def test_every_module_has_a_layer_and_no_import_goes_up_one():
    table = layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert [m for m in _modules() if layer_of(m, table) is None] == []
    assert upward_imports(module_graph(), table) == []


def test_the_checker_finds_a_planted_circle_and_an_upward_import(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("from .base import X\n")
    (pkg / "low" / "base.py").write_text("X = 1\n\n\ndef f():\n    from ..high import Y  # a circle hidden in a function\n    return Y\n")
    (pkg / "high.py").write_text("from .low import X\n\nY = X\n")
    graph = module_graph(pkg)
    assert circles(graph) == [["toy.high", "toy.low", "toy.low.base"]]
    assert circles(module_graph(pkg, top_level_only=True)) == []
    table = layers("# toy\n\n## Layers\n| layer | modules |\n|---|---|\n| 2 top | `high` |\n| 1 bottom | `__init__`, `low` |\n", root="toy")
    assert upward_imports(graph, table) == ["toy.low.base (1) -> toy.high (2)"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    with pytest.raises(AssertionError):
        assert circles(graph) == []


def test_modules_stay_small():
    big = {m: n for m, p in _modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert big == {}

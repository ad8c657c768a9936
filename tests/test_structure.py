"""The package's shape, checked from its source: what the report loads, who talks to ONNX Runtime's quantization
tools, import cycles, module size, no pickle."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "quantkit"
MAX_LINES = 420  # "modules a reader can hold in their head (about 400 lines at most)"


@functools.lru_cache(maxsize=1)
def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(module: str, path: Path, *, top_level_only: bool) -> set[str]:
    """Absolute names of the quantkit modules (and onnxruntime.quantization) ``module`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names}
            mods = _modules()
            # "from pkg import submodule" loads the submodule (pkg is loading already); "from pkg import name" loads pkg
            names |= {n for n in subs if n in mods} or {base}
            if any(n not in mods for n in subs):
                names.add(base)
    return names


def test_the_report_does_not_load_the_quantization_engine():
    code = "import quantkit.report, quantkit.artifacts, sys; print(sorted(m for m in sys.modules if m.startswith('quantkit.quantize.calibrate') or m == 'onnxruntime.quantization'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_only_one_module_imports_onnxruntime_quantization():
    users = sorted(m for m, p in _modules().items() if any(n.startswith("onnxruntime.quantization") for n in _imports(m, p, top_level_only=False)))
    assert len(users) == 1, users


def test_no_pickle_anywhere_in_the_package():
    users = sorted(m for m, p in _modules().items() if "pickle" in _imports(m, p, top_level_only=False))
    assert users == []


def test_no_import_cycles_among_top_level_imports():
    mods = _modules()
    graph = {m: {n for n in _imports(m, p, top_level_only=True) if n in mods and n != m} for m, p in mods.items()}
    # importing a package runs its __init__: an edge to "a.b.c" is an edge to "a.b" and "a" too
    for m in graph:
        extra = set()
        for n in graph[m]:
            parts = n.split(".")
            extra |= {".".join(parts[:i]) for i in range(2, len(parts))}
        graph[m] |= {e for e in extra if e in mods and e != m and not m.startswith(e + ".")}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_modules_stay_small():
    big = {m: n for m, p in _modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert big == {}

"""Structure of the quantization engine (issue 13): one module talks to onnxruntime.quantization, no pickle,
reading a set or a record loads no ORT quantization code, modules a reader can hold in their head."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import quantkit

PKG = Path(quantkit.__file__).parent


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_one_module_imports_onnxruntime_quantization_and_none_imports_pickle():
    users, pickles = [], []
    for p in sorted(PKG.rglob("*.py")):
        mods = _imports(p)
        if any(m == "onnxruntime.quantization" or m.startswith("onnxruntime.quantization.") for m in mods):
            users.append(p.relative_to(PKG).as_posix())
        if "pickle" in mods or any(m.startswith("pickle.") for m in mods):
            pickles.append(p.relative_to(PKG).as_posix())
    # intake/prepare.py still calls quant_pre_process itself (the intake work owns it); quantize.adapter.pre_process
    # is the same call, ready for it to use: then this list is exactly ["quantize/ort_bridge.py"].
    assert [u for u in users if u != "intake/prepare.py"] == ["quantize/ort_bridge.py"]
    assert pickles == []


def _loaded_after(stmt: str) -> set[str]:
    code = f"import sys; {stmt}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_reading_sets_and_records_loads_no_quantization_engine():
    mods = _loaded_after("import quantkit.calibset.reader, quantkit.artifacts")
    assert not any(m.startswith("onnxruntime") for m in mods)
    mods = _loaded_after("import quantkit.report")
    assert not any(m.startswith("quantkit.quantize.calibration.calibrate") for m in mods)
    mods = _loaded_after("import quantkit.quantize.config")  # configs validate without the ORT adapter
    assert "quantkit.quantize.ort_bridge" not in mods and not any(m.startswith("onnxruntime") for m in mods)


def test_quantize_modules_stay_small():
    mine = ["ort_bridge", "calibration/calibrate", "calibration/checkpoint", "config", "engine", "engines", "calibration/fine_histogram",
            "calibration/histogram", "calibration/minmax", "outputs", "runtime_check", "scales", "calibration/tap", "aimet"]
    sizes = {m: len((PKG / "quantize" / f"{m}.py").read_text().splitlines()) for m in mine}
    assert max(sizes.values()) <= 400, sizes

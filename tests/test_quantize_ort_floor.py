"""The onnxruntime floor declared in pyproject.toml really runs the quantize path (issue 13, item 9).

Installs exactly the declared minimum onnxruntime into a throwaway virtual environment layered over this one
(everything else is shared: only onnxruntime differs) and runs ``tests/ort_floor_check.py`` there: static
MinMax / Percentile / Entropy / QOperator quantization, record replay, dynamic quantization and a pinned graph
output on tiny generated models. About 30 s; skipped, saying why, when the package index cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def declared_floor() -> str:
    """The ``X`` of ``onnxruntime>=X`` in pyproject.toml's dependencies."""
    m = re.search(r'"onnxruntime>=([0-9.]+)', (ROOT / "pyproject.toml").read_text())
    assert m, "pyproject.toml declares no onnxruntime floor"
    return m.group(1)


@pytest.mark.slow
def test_declared_onnxruntime_floor_runs_the_quantize_path(tmp_path):
    floor = declared_floor()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    # this environment's packages come after the throwaway one's own, so its onnxruntime wins
    (Path(site) / "zz_quantkit_base.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", f"onnxruntime=={floor}"],
                         capture_output=True, text=True, timeout=300)
    if pip.returncode != 0:
        last = ([ln for ln in pip.stderr.strip().splitlines() if "ignored" not in ln] or ["?"])[-1]
        pytest.skip(f"cannot install onnxruntime=={floor} from the package index (offline?): {last}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(py), str(ROOT / "tests" / "ort_floor_check.py")], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, (done.stderr.strip().splitlines() or ["?"])[-1]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert tuple(int(x) for x in got["onnxruntime"].split(".")[:2]) == tuple(int(x) for x in floor.split(".")[:2])
    assert got["passed"] == ["minmax", "percentile", "entropy", "qoperator", "replay", "dynamic", "output-pinned"]

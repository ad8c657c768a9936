"""notebooks/intake.ipynb runs top to bottom (the newcomer's intake exercise)."""

from __future__ import annotations

from pathlib import Path

import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks" / "intake.ipynb"


@pytest.mark.slow
def test_intake_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NB, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "SupportReport('npu-generic', supported=False, issues=10/672 nodes)" in text
    assert "relabel ConversionLog" in text and "NumericCheck(passed=False" in text
    assert "'layout': 'flagged'" in text and "'value_range': 'flagged'" in text

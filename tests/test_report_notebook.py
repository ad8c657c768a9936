"""notebooks/shift_review.ipynb runs top to bottom and shows tables and inline plots."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_shift_review_notebook_executes():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "shift_review.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3
    assert sum("<table" in o.get("data", {}).get("text/html", "") for o in outputs) >= 4  # pandas tables
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "deployed INT8 model" in text and "changed - brightness fell" in text

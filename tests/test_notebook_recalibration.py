"""notebooks/recalibration_loop.ipynb, the recalibration loop for a user's own camera (issue 38): committed with its
outputs, executed here, and its outputs must be what is committed (no machine paths, no timings; content hashes and
record fingerprints are compared too, since the same images and settings give the same bytes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks" / "recalibration_loop.ipynb"


def _texts(nb: dict) -> list[str]:
    """Each code cell's printed text, joined (a kernel may split one cell's stream into several outputs)."""
    return ["".join(t if isinstance(t := o.get("text", ""), str) else "".join(t) for o in cell.get("outputs", []))
            for cell in nb["cells"] if cell["cell_type"] == "code"]


@pytest.mark.slow
def test_the_recalibration_notebook_runs_and_prints_what_is_committed(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    committed = json.loads(NB.read_text())
    expected = _texts(committed)
    assert expected and not any("/tmp" in t or "/work/" in t or " s\n" in t for t in expected)  # no machine paths, no timings
    assert any("registered data/patches/calibration/candidate-" in t for t in expected)  # the loop ends in promote

    monkeypatch.setenv("QUANTKIT_NB_WORKDIR", str(tmp_path / "work"))
    nb = nbformat.read(NB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    got = _texts(json.loads(nbformat.writes(nb)))
    assert not any(o.output_type == "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert got == expected

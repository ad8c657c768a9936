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
    assert "SupportReport('npu-generic', supported=False, issues=10/672 nodes, hand-written)" in text
    assert "relabel ConversionLog" in text and "NumericCheck(passed=False" in text
    assert "'layout': 'flagged'" in text and "'value_range': 'flagged'" in text
    # the export cells ran (the test extra installs torch): exported, refused at opset 10 naming the upsampling, intaken
    assert "ExportResult(__main__.Net, opset=13, passed=True" in text and "torch.onnx.export(model, " in text
    assert "first diverging submodule up (Upsample)" in text and "written: False" in text
    assert "intake's source digest is the exported model's: True" in text

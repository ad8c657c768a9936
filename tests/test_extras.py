"""Optional extras (quantkit.extras): a missing package of the fleet or demo extra is one line naming the extra,
the core dependencies hold no demo or fleet package, and the test extra installs both."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from quantkit.errors import MissingExtraError
from quantkit.extras import EXTRAS, require

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")] + ["pyarrow"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: import raises ModuleNotFoundError
    with pytest.raises(MissingExtraError) as e:
        require("pyarrow.parquet", "fleet", "quantkit fleet")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == ("quantkit fleet needs pyarrow, which the core install leaves out; "
                   "install the extra: pip install 'quantkit[fleet]'")


def test_require_keeps_other_import_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module outside the extra failing to import is a bug (its traceback), not a missing extra."""
    monkeypatch.setitem(sys.modules, "numpy_not_an_extra", None)
    with pytest.raises(ModuleNotFoundError):
        require("numpy_not_an_extra", "fleet", "quantkit fleet")


def test_fleet_sketch_without_datasketches(monkeypatch: pytest.MonkeyPatch) -> None:
    from quantkit.fleet import summaries

    monkeypatch.setitem(sys.modules, "datasketches", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'quantkit\[fleet\]'"):
        summaries._kll(200)


def test_fleet_score_without_dask_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from quantkit.fleet import cluster

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingExtraError, match=r"quantkit fleet needs distributed, .*quantkit\[fleet\]"):
        cluster.start_client(1, None)


def test_demo_model_without_rapidocr(monkeypatch: pytest.MonkeyPatch) -> None:
    from quantkit.demo import packaged_model_path

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    with pytest.raises(MissingExtraError, match=r"demo model 'ppocr_det' needs rapidocr_onnxruntime, .*quantkit\[demo\]"):
        packaged_model_path("ppocr_det")


def test_core_dependencies_hold_no_extra_package() -> None:
    core = " ".join(_project()["dependencies"]).lower()
    for name in ("rapidocr", "ddddocr", "dask", "distributed", "pyarrow", "datasketches", "nncf"):
        assert name not in core, f"{name} is a core dependency; it belongs to an extra"


def test_extras_hold_their_modules_and_test_installs_them() -> None:
    extras = _project()["optional-dependencies"]
    demo = " ".join(extras["demo"]).replace("-", "_")
    fleet = " ".join(extras["fleet"])
    for module in EXTRAS["demo"]:
        assert module in demo
    for module in ("pyarrow", "datasketches", "dask"):  # distributed and fsspec come with dask[distributed]
        assert module in fleet
    assert "dask[distributed]" in fleet
    assert "quantkit[fleet]" in extras["demo"], "the demo's dvc repro runs the demo fleet"
    assert [r for r in extras["nncf"] if r.startswith(EXTRAS["nncf"][0])], "the nncf extra installs nncf"
    assert any(r.replace(" ", "").startswith("quantkit[") and all(x in r for x in ("demo", "fleet", "openvino", "nncf"))
               for r in extras["test"])

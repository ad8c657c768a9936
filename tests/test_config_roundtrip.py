"""Every config class round-trips (``from_dict(to_dict(x)) == x``), and every on-disk artifact loads, saves the same
bytes, and loads again equal."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import quantkit
from quantkit.artifacts import Artifact
from quantkit.config import Config


def _all_subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _all_subclasses(sub)
    return out


def _configs() -> list[type[Config]]:
    for m in pkgutil.walk_packages(quantkit.__path__, "quantkit."):
        importlib.import_module(m.name)
    out = []
    for cls in sorted(_all_subclasses(Config), key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        if not cls.__module__.startswith("quantkit.") or issubclass(cls, Artifact):
            continue
        try:
            cls()
        except TypeError:  # required fields: covered through the artifacts that hold them
            continue
        out.append(cls)
    return out


@pytest.mark.parametrize("cls", _configs(), ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_default_config_round_trips(cls: type[Config]) -> None:
    x = cls()
    assert cls.from_dict(x.to_dict()) == x
    assert cls.from_dict(x.to_dict()).config_hash() == x.config_hash()


def test_artifacts_load_save_the_same_bytes(tmp_path: Path) -> None:
    from quantkit.artifacts import CalibrationRecord, DriftResult, EvalSummary, ThresholdSet
    from quantkit.report.synthetic import write_inputs

    work = write_inputs(tmp_path, images_per_site=2)["work"]
    files = {CalibrationRecord: work / "quantize/deployed/record.json", ThresholdSet: work / "thresholds/deployed.json",
             EvalSummary: work / "eval/cam1-day/summary.json", DriftResult: work / "drift/cam1-day.json"}
    for cls, path in files.items():
        a = cls.load(path)
        again = a.save(tmp_path / f"again-{cls.__name__}.json")
        assert again.read_bytes() == path.read_bytes(), cls.__name__
        assert cls.load(again) == a
        assert cls.from_dict(a.to_dict()) == a

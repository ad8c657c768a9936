"""User task adapters: registered in code, or published through the ``quantkit.tasks`` entry-point group."""

from __future__ import annotations

import dataclasses
import logging
import textwrap
from typing import ClassVar

import numpy as np
import pytest

from quantkit.errors import ConfigError
from quantkit.tasks import ADAPTERS, MetricSpec, TaskAdapter, TaskConfig, ThresholdSpec, empty_decision, make_adapter, register_adapter

PLUGIN = '''
import dataclasses
from typing import ClassVar

import numpy as np

from quantkit.tasks import Decision, MetricSpec, TaskAdapter, ThresholdSpec


@dataclasses.dataclass(frozen=True, repr=False)
class PeakAdapter(TaskAdapter):
    """One item per image: the map's peak, kept when above ``peak``."""

    name: ClassVar[str] = "peak"
    THRESHOLDS: ClassVar[tuple] = (ThresholdSpec("peak", True, ">", "none"),)
    PRIMARY: ClassVar[str] = "peak"
    AGREEMENT: ClassVar[tuple] = (MetricSpec("same_peak", "same peak", "same", "images"),)
    peak: float = 0.5

    def _decide(self, outputs):
        a = self.select_output(outputs).reshape(-1)
        d = Decision(np.zeros((1, 0, 2), np.float32), a[[a.argmax()]].astype(np.float32), np.array([a.argmax()]))
        return d.select(self.keep(d.scores, self.peak))

    def agreement(self, ref, got):
        return {"same": float(ref.labels.tolist() == got.labels.tolist()), "images": 1.0}
'''


def _install_fake_distribution(root, entry_points: str) -> None:
    (root / "peak_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = root / "peak_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: peak-plugin\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")


def test_an_installed_distribution_publishes_an_adapter_through_the_entry_point(tmp_path, monkeypatch, caplog):
    _install_fake_distribution(tmp_path, """
        [quantkit.tasks]
        peak = peak_plugin:PeakAdapter
        broken = peak_plugin:DoesNotExist
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with caplog.at_level(logging.WARNING, logger="quantkit.tasks.base"):
            a = TaskConfig(adapter="peak", options={"peak": 0.3}).make()
        assert type(a).__name__ == "PeakAdapter" and a.thresholds() == {"peak": 0.3}
        out = {"y": np.array([[0.1, 0.4, 0.2]], np.float32)}
        assert a.decide(out).labels.tolist() == [1] and len(a.with_thresholds({"peak": 0.5}).decide(out)) == 0
        assert a.primary_metric().value(a.agreement(a.decide(out), a.decide(out))) == 1.0
        assert "broken" in caplog.text  # a broken plug-in is logged and skipped
        with pytest.raises(ConfigError, match="unknown option 'peek'"):
            make_adapter("peak", {"peek": 0.3})
    finally:
        ADAPTERS.pop("peak", None)


def test_register_adapter_in_code():
    @register_adapter
    @dataclasses.dataclass(frozen=True, repr=False)
    class Always(TaskAdapter):
        name: ClassVar[str] = "test_always"
        THRESHOLDS: ClassVar[tuple] = (ThresholdSpec("level", True),)
        PRIMARY: ClassVar[str] = "level"
        AGREEMENT: ClassVar[tuple] = (MetricSpec("n", "n", "a", "b"),)
        level: float = 0.5

        def _decide(self, outputs):
            return empty_decision()

    try:
        assert make_adapter("test_always", {"level": 0.7}).thresholds() == {"level": 0.7}
    finally:
        ADAPTERS.pop("test_always")
    with pytest.raises(ConfigError, match="not registered.*entry point group 'quantkit.tasks'"):
        make_adapter("test_always")


def test_an_adapter_without_agreement_metrics_is_refused():
    with pytest.raises(TypeError, match="AGREEMENT"):
        @register_adapter
        @dataclasses.dataclass(frozen=True, repr=False)
        class NoMetrics(TaskAdapter):
            name: ClassVar[str] = "test_no_metrics"

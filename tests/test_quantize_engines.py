"""Engines as plug-ins (issue 37): quantize() asks the registry for the config's engine; every built-in engine is
registered under its config's key; a registered engine is what runs; progress of work that is not our loop."""

from __future__ import annotations

import logging

import pytest
from test_nncf_engine import concat_map_model
from test_quantize_fixtures import make_set, write_model_intake

from quantkit.errors import UnsupportedOptionError
from quantkit.quantize import DynamicQuantConfig, StaticQuantConfig, quantize
from quantkit.quantize.engines import ENGINES, Engine, engine_for, engine_key


def test_each_config_finds_its_engine():
    for config, name in ((StaticQuantConfig(), "ort"), (DynamicQuantConfig(), "ort-dynamic"),
                         (StaticQuantConfig(engine="nncf", placement="nncf"), "nncf")):
        assert engine_key(config) == name and engine_for(config).name == name and ENGINES[name] is engine_for(config)
    with pytest.raises(TypeError, match="StaticQuantConfig or DynamicQuantConfig"):
        engine_for({"engine": "ort"})


def test_the_registered_engine_is_what_runs(tmp_path, monkeypatch):
    """No string switch: replacing the registry's ``ort`` entry replaces what quantize runs; its refusals come first."""
    intake = write_model_intake(concat_map_model(), tmp_path / "intake", 16)
    seen = []

    class Refusing(Engine):
        name = "ort"

        def check(self, config, calibration_set, checkpoint):
            seen.append(config)
            raise UnsupportedOptionError("refused by the plug-in")

        def write(self, job):  # pragma: no cover - check refuses first
            raise AssertionError

    monkeypatch.setitem(ENGINES, "ort", Refusing())
    with pytest.raises(UnsupportedOptionError, match="refused by the plug-in"):
        quantize(intake, StaticQuantConfig(), out=tmp_path / "q", calibration_set=make_set(tmp_path / "set", n=2, size=32))
    assert len(seen) == 1 and not (tmp_path / "q").exists()


def test_a_plug_in_engine_is_named_in_the_config_and_runs(tmp_path, monkeypatch):
    """``quantize.engine: mine`` reaches a registered plug-in engine (the config's engine is a name, not a closed list);
    an engine nobody registered is one line before any work."""
    from quantkit.errors import ConfigError

    intake = write_model_intake(concat_map_model(), tmp_path / "intake", 16)
    cset = make_set(tmp_path / "set", n=2, size=32)
    ran = []

    class Mine(Engine):
        name = "mine"

        def check(self, config, calibration_set, checkpoint):
            ran.append(("check", config.engine, config.placement))

        def write(self, job):
            ran.append(("write", job.config.engine))
            raise UnsupportedOptionError("mine stops here")

    monkeypatch.setitem(ENGINES, "mine", Mine())
    config = StaticQuantConfig.from_dict({"engine": "mine"})
    with pytest.raises(UnsupportedOptionError, match="mine stops here"):
        quantize(intake, config, out=tmp_path / "q", calibration_set=cset)
    assert ran == [("check", "mine", "ort"), ("write", "mine")] and not (tmp_path / "q").exists()
    with pytest.raises(UnsupportedOptionError, match="engine: mine places its Q/DQ pairs itself: set placement: mine"):
        StaticQuantConfig.from_dict({"engine": "mine", "placement": "openvino"})
    with pytest.raises(ConfigError, match="quantize.engine: 'nobody' is not registered"):
        quantize(intake, StaticQuantConfig(engine="nobody"), out=tmp_path / "n", calibration_set=cset)


def test_engine_refusals_keep_their_words(tmp_path):
    intake = write_model_intake(concat_map_model(), tmp_path / "intake", 16)
    cset = make_set(tmp_path / "set", n=2, size=32)
    with pytest.raises(UnsupportedOptionError, match="dynamic quantization takes no calibration set"):
        quantize(intake, DynamicQuantConfig(), out=tmp_path / "d", calibration_set=cset)
    with pytest.raises(UnsupportedOptionError, match="NNCF's engine keeps no calibration checkpoint"):
        quantize(intake, StaticQuantConfig(engine="nncf", placement="nncf"), out=tmp_path / "n", calibration_set=cset,
                 checkpoint=tmp_path / "c.npz")


def test_ticker_logs_a_start_a_line_per_interval_and_an_end(caplog):
    from quantkit.progress import Ticker

    now = [0.0]
    with caplog.at_level(logging.INFO, logger="quantkit.progress"):
        with Ticker(desc="nncf accuracy control", unit="img", clock=lambda: now[0]) as t:
            t.bar = None  # off a terminal whatever the test runner's stderr is
            for _ in range(5):
                now[0] += 12.0
                t.update()
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[0].startswith("nncf accuracy control: started; 1 img") and msgs[-1].startswith("nncf accuracy control: done, 5 img")
    assert len(msgs) == 3, msgs  # start at 12 s, a line at 48 s (30 s or more later), the end at 60 s

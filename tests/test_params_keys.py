"""params.yaml as a whole: misspelt sections and model keys are refused by name; tuning sections default when absent."""

from __future__ import annotations

import pytest

from quantkit.config import config_from_params
from quantkit.errors import ConfigError


def test_misspelt_sections_and_model_keys_are_refused_by_name(tmp_path):
    from quantkit.drift import DriftConfig
    from quantkit.report.config import ReportConfig

    p = tmp_path / "params.yaml"
    p.write_text("reprot: {min_agreement: 0.99}\nreport: {}\n")
    with pytest.raises(ConfigError, match=r"unknown section 'reprot'; did you mean 'report'\?"):
        config_from_params(ReportConfig, p, "report")
    p.write_text("models:\n  rec:\n    fiel: models/rec.onnx\n    task: {adapter: ctc_text}\n")
    with pytest.raises(ConfigError, match=r"models.rec: unknown key 'fiel'; did you mean 'file'\?"):
        config_from_params(DriftConfig, p, "drift", model="rec")
    p.write_text("my_stage: {epochs: 3}\nreport: {min_agreement: 0.8}\n")  # a user's own DVC stage's params
    assert config_from_params(ReportConfig, p, "report").min_agreement == 0.8


def test_tuning_sections_default_when_absent_and_model_sections_do_not(tmp_path):
    from quantkit.bundle.verify import VerifyConfig
    from quantkit.drift import DriftConfig
    from quantkit.tasks import TaskConfig

    p = tmp_path / "params.yaml"
    p.write_text("report: {}\n")
    assert config_from_params(DriftConfig, p, "drift") == DriftConfig()
    assert config_from_params(VerifyConfig, p, "bundle.verify") == VerifyConfig()
    with pytest.raises(ConfigError, match="section 'task' is missing"):
        config_from_params(TaskConfig, p, "task")


def test_bind_fallback_and_fleet_sections_default_when_absent(tmp_path):
    """bind, fallback and fleet (and bundle) run on their defaults without a section, as report, drift and measure do (a
    trial stopped on "section 'thresholds' is missing" with a params file holding only intake and task)."""
    from quantkit.config import config_from_params
    from quantkit.fleet.config import FleetConfig, load_fleet_config
    from quantkit.quantize.fallback import FallbackConfig
    from quantkit.thresholds.config import ThresholdsConfig

    p = tmp_path / "params.yaml"
    p.write_text("models:\n  rec: {file: rec.onnx}\ntask: {adapter: ctc_text}\n")
    assert config_from_params(ThresholdsConfig, p, "thresholds", model="rec") == ThresholdsConfig()
    assert config_from_params(FallbackConfig, p, "fallback", model="rec") == FallbackConfig()
    assert load_fleet_config(p) == FleetConfig()  # its default model need not be under models: --model names it


def test_a_fallback_section_named_on_the_command_line_must_exist(tmp_path):
    import argparse

    from quantkit.cli.fallback import OVERRIDES, build_config

    p = tmp_path / "params.yaml"
    p.write_text("task: {adapter: ctc_text}\n")
    args = argparse.Namespace(params=p, section="fallback_night", model=None, **{k: None for k in OVERRIDES})
    with pytest.raises(ConfigError, match="section 'fallback_night' is missing"):
        build_config(args)
    args.section = "fallback"
    assert build_config(args).target == 0.9  # the default section may be absent: its defaults (the target: the green line)

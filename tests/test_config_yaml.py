"""What YAML users write: YAML 1.1 booleans (yes/no/on/off) and 1e-4 are read as meant, or refused saying what was read."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest
import yaml

from quantkit.config import Config, config_from_params
from quantkit.errors import ConfigError
from quantkit.intake import IntakeConfig
from quantkit.quantize import StaticQuantConfig


@dataclasses.dataclass(frozen=True)
class Knobs(Config):
    mode: Literal["error", "warn", "off"] = "error"
    switch: Literal["on", "off", "auto"] = "auto"
    answer: Literal["yes", "no", "maybe"] = "maybe"
    both: Literal["true", "yes"] = "true"
    level: Literal[1, 3, 4] = 3
    flag: bool = False
    count: int = 0
    ratio: float = 0.5
    name: str = ""


def _load(text: str) -> Knobs:
    return Knobs.from_dict(yaml.safe_load(text))


@pytest.mark.parametrize("text,field,value", [
    ("mode: off", "mode", "off"), ("mode: Off", "mode", "off"), ("mode: 'off'", "mode", "off"),
    ("switch: on", "switch", "on"), ("switch: off", "switch", "off"), ("answer: yes", "answer", "yes"), ("answer: no", "answer", "no"),
    ("flag: yes", "flag", True), ("flag: 'yes'", "flag", True), ("flag: 'Off'", "flag", False), ("flag: 'n'", "flag", False),
    ("ratio: 1e-4", "ratio", 1e-4), ("ratio: 2", "ratio", 2.0), ("ratio: '-3.5E2'", "ratio", -350.0), ("level: 1", "level", 1),
])
def test_accepted_where_unambiguous(text, field, value):
    got = getattr(_load(text), field)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text,fragment", [
    ("mode: yes", "read as the boolean true (YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans); write one of 'error', 'warn', 'off' in quotes"),
    ("both: yes", "read as the boolean true"),  # two choices spell true: ambiguous, refused
    ("level: true", "read as the boolean true"),  # never 1 (True == 1 in Python)
    ("count: yes", "count: read as the boolean true (YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans); expected an integer"),
    ("count: '8'", "expected an integer, got '8'; write it without quotes"),
    ("ratio: off", "read as the boolean false"),
    ("ratio: fast", "expected a number, got 'fast'"),
    ("name: no", "name: read as the boolean false (YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans); expected a string; quote the value"),
    ("name: 1.10", "expected a string, got 1.1 (read as a float); quote the value"),
    ("flag: maybe", "expected true or false, got 'maybe'"),
])
def test_refused_saying_what_was_read(text, fragment):
    with pytest.raises(ConfigError) as e:
        _load(text)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_real_sections_read_yaml_booleans(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("intake:\n  note_check: off\n  atol: 1e-4\n  ort_pre_process: no\nquantize:\n  per_channel: yes\n  method: minmax\n")
    cfg = config_from_params(IntakeConfig, p, "intake")
    assert cfg.note_check == "off" and cfg.atol == 1e-4 and cfg.ort_pre_process is False
    assert config_from_params(StaticQuantConfig, p, "quantize").per_channel is True
    p.write_text("intake:\n  batch_size: on\n")
    with pytest.raises(ConfigError, match=r"params.yaml:intake.batch_size: read as the boolean true"):
        config_from_params(IntakeConfig, p, "intake")

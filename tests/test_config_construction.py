"""A config built in Python is checked like one read from params.yaml: a mistyped field raises ConfigError naming
``Class.field`` on construction (not a silent truthy string, not a KeyError later), with the params loader's checks
and messages; the params path keeps its YAML readings and messages."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, get_args, get_origin

import numpy as np
import pytest

from quantkit.config import Config
from quantkit.errors import ConfigError
from quantkit.params import SECTIONS, config_class
from quantkit.quantize import DynamicQuantConfig, StaticQuantConfig, TensorOverride


@pytest.mark.parametrize("kwargs,match", [
    ({"per_channel": "no"}, r"^StaticQuantConfig\.per_channel: expected True or False, got 'no'$"),
    ({"method": "kl"}, r"^StaticQuantConfig\.method: 'kl' is not one of 'minmax', 'entropy', 'percentile', 'distribution'$"),
    ({"activation_type": "int9"}, r"^StaticQuantConfig\.activation_type: 'int9' is not one of 'uint8', "),
    ({"format": True}, r"^StaticQuantConfig\.format: True is not one of 'qdq', 'qoperator'$"),
    ({"calibration_chunk_size": "4"}, r"^StaticQuantConfig\.calibration_chunk_size: expected an integer, got '4'; write it without quotes$"),
    ({"max_images": 2.5}, r"^StaticQuantConfig\.max_images: expected an integer, got 2\.5$"),
    ({"method": "percentile", "percentile": "99.9"}, r"^StaticQuantConfig\.percentile: expected a number, got '99\.9'; write it without quotes$"),
    ({"method": "percentile", "percentile": float("nan")}, r"^StaticQuantConfig\.percentile: nan is not a finite number"),
    ({"nodes_to_exclude": "conv1"}, r"^StaticQuantConfig\.nodes_to_exclude: expected a list, got str$"),
    ({"nodes_to_exclude": [1]}, r"^StaticQuantConfig\.nodes_to_exclude\[0\]: expected a string, got 1"),
    ({"tensor_overrides": {"t": 0.1}}, r"^StaticQuantConfig\.tensor_overrides\.t: expected a mapping, got float \(pass a TensorOverride\)$"),
    ({"reduce_range": 1}, r"^StaticQuantConfig\.reduce_range: expected True or False, got 1$"),
])
def test_static_config_refuses_bad_values_on_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match) as e:
        StaticQuantConfig(**kwargs)
    assert "\n" not in str(e.value)


def test_other_quantization_configs_refuse_bad_values():
    with pytest.raises(ConfigError, match=r"^DynamicQuantConfig\.per_channel: expected True or False, got 'yes'$"):
        DynamicQuantConfig(per_channel="yes")
    with pytest.raises(ConfigError, match=r"^DynamicQuantConfig\.weight_type: 'int3' is not one of"):
        DynamicQuantConfig(weight_type="int3")
    with pytest.raises(ConfigError, match=r"^TensorOverride\.scale: expected a number, got '0\.1'"):
        TensorOverride(scale="0.1", zero_point=0)
    with pytest.raises(ConfigError, match=r"^TensorOverride\.symmetric: expected True or False, got 'false'$"):
        TensorOverride(symmetric="false")


@pytest.mark.parametrize("build,match", [
    (lambda: TensorOverride(scale=0.1, zero_point=1000, quant_type="uint8"), r"^zero_point: 1000 is outside uint8's codes \[0, 255\]"),
    (lambda: StaticQuantConfig.from_dict({"tensor_overrides": {"t": {"scale": 0.1, "zero_point": -1, "quant_type": "uint8"}}}, where="quantize"),
     r"^quantize\.tensor_overrides\.t\.zero_point: -1 is outside uint8's codes"),
    (lambda: _cfg("quantkit.drift.config:DriftConfig")(seed=-1), r"^drift\.seed: -1 must be >= 0"),
    (lambda: _cfg("quantkit.intake.prepare:IntakeConfig")(seed=-1), r"^intake\.seed: -1 must be >= 0"),
    (lambda: _cfg("quantkit.export.config:TorchExportConfig")(seed=-1), r"^export\.seed: -1 must be >= 0"),
    (lambda: _cfg("quantkit.thresholds.config:OperatingPointConfig")(bootstrap_seed=-1), r"bootstrap_seed: -1 must be >= 0"),
])
def test_values_that_failed_later_are_refused_on_construction(build, match):
    """An out-of-range zero point (an OverflowError in the ORT adapter) and a negative seed (numpy's ValueError)."""
    with pytest.raises(ConfigError, match=match):
        build()


def _cfg(target: str) -> Any:
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def test_the_params_path_keeps_its_yaml_readings_and_messages():
    """``per_channel: no`` in YAML 1.2 (kept as text) is still false; what it refuses it says as before."""
    assert StaticQuantConfig.from_dict({"per_channel": "no"}).per_channel is False
    with pytest.raises(ConfigError, match=r"^StaticQuantConfig\.per_channel: expected true or false, got 'maybe'$"):
        StaticQuantConfig.from_dict({"per_channel": "maybe"})
    with pytest.raises(ConfigError, match=r"^quantize\.method: 'kl' is not one of 'minmax', 'entropy', 'percentile', 'distribution'$"):
        StaticQuantConfig.from_dict({"method": "kl"}, where="quantize")
    with pytest.raises(ConfigError, match=r"^quantize\.max_images: read as the boolean true \(YAML 1\.1"):
        StaticQuantConfig.from_dict({"max_images": True}, where="quantize")
    assert StaticQuantConfig.from_dict({"method": "percentile", "percentile": "99.9"}).percentile == 99.9
    with pytest.raises(ConfigError, match=r"^quantize\.percentile: inf is not a finite number"):  # was a ValueError at config_hash
        StaticQuantConfig.from_dict({"method": "percentile", "percentile": float("inf")}, where="quantize")


def test_construction_normalizes_like_from_dict():
    """A list for a tuple field and an int for a float field give the config ``from_dict`` gives: equal, same hash."""
    direct = StaticQuantConfig(method="percentile", percentile=99, nodes_to_exclude=["conv1"], op_types_to_quantize=["Conv"])
    read = StaticQuantConfig.from_dict({"method": "percentile", "percentile": 99, "nodes_to_exclude": ["conv1"], "op_types_to_quantize": ["Conv"]})
    assert direct == read and direct.config_hash() == read.config_hash()
    assert direct.nodes_to_exclude == ("conv1",) and type(direct.percentile) is float
    hash(direct)  # still hashable: the lists became tuples


def test_numpy_scalars_are_accepted_as_they_are():
    c = StaticQuantConfig(max_images=np.int64(3), per_channel=np.bool_(True))
    assert c.max_images == 3 and c.per_channel


# -- every config of the public API (the params sections and the configs nested in them) --------------------------

def _public_configs() -> list[type[Config]]:
    seen: list[type[Config]] = []
    todo = [config_class(s) for s in sorted(SECTIONS)]
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.append(cls)
        for tp in typing.get_type_hints(cls).values():
            todo += [a for a in (tp, *get_args(tp), *(b for a in get_args(tp) for b in get_args(a)))
                     if isinstance(a, type) and issubclass(a, Config)]
    return seen


def _wrong(tp: Any) -> Any:
    """A value of the wrong type for a field of type ``tp`` (``dataclasses.MISSING`` when none is clearly wrong)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _wrong(inner[0]) if len(inner) == 1 else dataclasses.MISSING
    if origin is Literal:
        return "no-such-choice"
    if tp is bool:
        return "no"
    if tp in (int, float):
        return "3"
    if tp is str:
        return 3
    if origin is tuple:
        return 5
    return dataclasses.MISSING


def _cases() -> list[tuple[type[Config], str, Any]]:
    """``(class, field, wrong value)`` for each field of each public config that has a default for every field
    (DemoSetSpec and FleetEvent have required fields: their types are checked through ``from_dict``)."""
    out = []
    for cls in _public_configs():
        if any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls)):
            continue
        for f in dataclasses.fields(cls):
            bad = _wrong(typing.get_type_hints(cls)[f.name])
            if bad is not dataclasses.MISSING:
                out.append((cls, f.name, bad))
    return out


@pytest.mark.parametrize("cls,field,bad", _cases(), ids=lambda x: x.__qualname__ if isinstance(x, type) else repr(x))
def test_every_public_config_refuses_a_mistyped_field_on_construction(cls, field, bad):
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.{field}(\[0\])?: ") as e:
        cls(**{field: bad})
    assert "\n" not in str(e.value)

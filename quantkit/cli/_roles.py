"""Set paths a command takes from the model's own sets (``params.yaml: models.<name>.sets``) instead of a flag, for
DVC matrix stages that cannot read a model's entry themselves: ``--role deployed --model NAME`` and a model's site sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROLES = ("deployed",)
"""The roles a set can be taken for: the deployed model's calibration and reference sets."""


def role_path(explicit: Any, params: Any, model: str | None, role: str | None, kind: str, flag: str) -> Path | None:
    """``explicit`` when given, else the model's deployed ``kind`` set (``models.<model>.sets.deployed.<kind>`` in
    its ``sets.<kind>`` folder) when ``role`` is given, else None.

    Raises:
        ConfigError: both given, ``--role`` without ``--params`` or ``--model``, an unknown role, or the model's sets
            missing. InputFileError: the named set is not registered.
    """
    from ..calibset.model_sets import model_sets
    from ..errors import ConfigError

    if role is None:
        return Path(explicit) if explicit is not None else None
    if explicit is not None:
        raise ConfigError(f"{flag} and --role both name the set; pass one")
    if role not in ROLES:
        raise ConfigError(f"--role {role}: not a role; use one of {', '.join(ROLES)}")
    if params is None or model is None:
        raise ConfigError(f"--role {role} reads models.MODEL.sets.{role}.{kind} from --params; pass --params params.yaml --model NAME")
    return model_sets(params, model).deployed_set(kind)


def model_site_sets(params: Any, model: str | None, flag: str) -> list[Path]:
    """Every site set of ``models.<model>.sets.site`` (sorted by name).

    Raises:
        ConfigError: no ``--params`` or ``--model``, or the model's sets missing. InputFileError: the folder holds no set.
    """
    from ..calibset.model_sets import model_sets
    from ..errors import ConfigError

    if params is None or model is None:
        raise ConfigError(f"name the site sets: {flag} DIR (repeatable), or --params params.yaml --model NAME for the model's own")
    return model_sets(params, model).sets("site")

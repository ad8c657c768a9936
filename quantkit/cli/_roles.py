"""``--role ROLE``: a set path taken from ``params.yaml: calibrations.ROLE`` instead of a flag (for DVC matrix stages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def role_path(explicit: Any, params: Any, role: str | None, key: str, flag: str) -> Path | None:
    """``explicit`` when given, else ``calibrations.<role>.<key>`` from the params file, else None.

    Raises:
        ConfigError: both given, ``--role`` without ``--params``, or the role/key missing in params.
    """
    from ..config import load_params
    from ..errors import ConfigError

    if role is None:
        return Path(explicit) if explicit is not None else None
    if explicit is not None:
        raise ConfigError(f"{flag} and --role both name the set; pass one")
    if params is None:
        raise ConfigError(f"--role {role} reads calibrations.{role}.{key} from --params; pass --params params.yaml")
    roles = load_params(params, "calibrations")
    if role not in roles:
        raise ConfigError(f"{params}: --role {role}: calibrations has no role {role!r} (it has {', '.join(sorted(roles)) or 'none'}); fix --role")
    section = load_params(params, f"calibrations.{role}")
    if key not in section:
        raise ConfigError(f"{params}: calibrations.{role} has no {key!r}; add it or pass {flag}")
    return Path(section[key])

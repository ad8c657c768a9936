"""The params file's ``targets`` checked name by name, where params are read (``quantkit params show``, ``quantkit models
check``, dvc.yaml's first stage per model), before the place stage meets a misspelt runtime or recipe."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .recipes import parse_recipe


def check_targets(path: str | Path) -> dict[str, str] | None:
    """The params file's ``targets`` (:func:`quantkit.paramsfile.targets`) with every runtime and recipe name checked, so a
    misspelt one is one line where params are read (``quantkit params show``, ``quantkit models check``, dvc.yaml's first
    stage), not first at the place stage.

    Raises:
        ConfigError: a runtime :func:`quantkit.runtimes.registered_runtimes` does not know, or a recipe :func:`parse_recipe`
            refuses, naming the file and key.
    """
    from ..paramsfile import target_recipes, targets
    from ..runtimes import registered_runtimes

    found = targets(path)
    known = registered_runtimes()
    for runtime in found or {}:
        if runtime not in known:
            raise ConfigError(f"{path}: targets.{runtime}: {runtime!r} is not a runtime quantkit knows; use one of {', '.join(known)}")
        for r in target_recipes(path, runtime):
            parse_recipe(r, f"{path}: targets.{runtime}.recipes")
    return found


__all__ = ["check_targets"]

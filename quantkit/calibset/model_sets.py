"""A model's own image sets (``params.yaml: models.<name>.sets``) and the candidate's sizes (``candidate``).

Each model of the main job names three folders of sets, one per kind, and which of them the deployed model uses:

```yaml
models:
  my_cls:
    sets:
      calibration: data/my_cls/calibration   # every set in it is the candidate's pool
      reference: data/my_cls/reference       # bind's set (deployed.reference) and the fallback's sets
      site: data/my_cls/site                 # every set in it is evaluated, drift-checked, verified and reported
      deployed: {calibration: day, reference: day}
```

A set is a subfolder holding ``images/`` + ``manifest.json`` (``quantkit calibset register``). Folders, not lists,
because a DVC stage can depend on a folder but not on a list from params: a model's stages depend on its own
folders only, so a set added to or changed in one model's folder re-runs that model's stages and nothing else.
Two models may name the same folders (the demo's two detectors share the demo's scenes); nothing else mixes them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..config import Config, config_from_params, has_section, load_params
from ..errors import ConfigError, InputFileError
from .manifest import MANIFEST

KINDS = ("calibration", "reference", "site")
"""The kinds of set a model has, each a folder of sets (``sets.<kind>``)."""


def set_folders(path: str | Path) -> list[Path]:
    """The sets ``path`` stands for: ``[path]`` when it is a set (holds ``manifest.json``), else its direct subfolders
    that are sets, sorted by name (a model's ``sets.site`` folder, say).

    Raises:
        InputFileError: ``path`` is not a folder, or holds no set.
    """
    p = Path(path)
    if (p / MANIFEST).is_file():
        return [p]
    if not p.is_dir():
        raise InputFileError(f"{p}: no such folder of sets; put a set's images in {p}/NAME/images/ and register it ('quantkit calibset register {p}/NAME --name NAME')")
    found = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith(".") and (d / MANIFEST).is_file())
    if not found:
        raise InputFileError(f"{p}: holds no set (a subfolder with {MANIFEST}); register one with "
                             f"'quantkit calibset register {p}/NAME --name NAME' (its images in {p}/NAME/images/)")
    return found


def holds_sets(path: str | Path) -> bool:
    """Whether ``path`` is a folder of sets (no ``manifest.json`` of its own, a subfolder with one): what commands that
    take a set also take, running once per set. Anything else is left to the single-set path and its messages."""
    p = Path(path)
    return p.is_dir() and not (p / MANIFEST).is_file() and any((d / MANIFEST).is_file() for d in p.iterdir() if d.is_dir())


@dataclasses.dataclass(frozen=True)
class DeployedSets(Config):
    """Which sets of the model's folders the deployed INT8 uses.

    Attributes:
        calibration: name of the set in ``sets.calibration`` the deployed model is calibrated on.
        reference: name of the set in ``sets.reference`` its thresholds are bound on (and its bundle's golden images).
    """

    VERSIONED = False
    calibration: str
    reference: str

    def validate(self) -> None:
        for name in ("calibration", "reference"):
            value = getattr(self, name)
            if not value or "/" in value or value.startswith("."):
                raise ConfigError(f"{name}: {value!r} is not a set name; give the name of a subfolder of sets.{name}")


@dataclasses.dataclass(frozen=True)
class ModelSets(Config):
    """A model's own image sets (``models.<name>.sets``): three folders of sets and the deployed model's choice.

    Attributes:
        calibration: folder of the model's calibration sets (subfolders with ``images/`` + ``manifest.json``); the
            candidate is composed from them (its pool).
        reference: folder of its reference sets (bind's, the fallback's and the candidate's references).
        site: folder of its site sets: each is evaluated, drift-checked, verified and shown in the shift report.
        deployed: the set names the deployed model uses (:class:`DeployedSets`).
    """

    VERSIONED = False
    calibration: str
    reference: str
    site: str
    deployed: DeployedSets

    @classmethod
    def from_dict(cls, data: Any, *, where: str | None = None) -> "ModelSets":
        """As :meth:`Config.from_dict`, naming the fix for a list where a folder goes (a folder of sets, not a list)."""
        for kind in KINDS:
            if isinstance(data, dict) and isinstance(data.get(kind), list):
                raise ConfigError(f"{where or 'sets'}.{kind}: a folder of sets, not a list; put the model's {kind} sets in one "
                                  f"folder (e.g. data/<name>/{kind}/) and name that folder")
        return super().from_dict(data, where=where)

    def validate(self) -> None:
        folders = {k: Path(getattr(self, k)) for k in KINDS}
        for kind, folder in folders.items():
            if not str(folder) or folder.is_absolute() or ".." in folder.parts:
                raise ConfigError(f"{kind}: {str(folder)!r} must be a folder inside the repository (a relative path without '..')")

    def folder(self, kind: str) -> Path:
        """The folder of ``kind`` (one of :data:`KINDS`)."""
        return Path(getattr(self, kind))

    def sets(self, kind: str) -> list[Path]:
        """Every set of ``kind``, sorted by name (:func:`set_folders`).

        Raises:
            InputFileError: the folder is missing or holds no set.
        """
        return set_folders(self.folder(kind))

    def deployed_set(self, kind: str) -> Path:
        """The deployed model's ``calibration`` or ``reference`` set.

        Raises:
            InputFileError: it is not a registered set.
        """
        path = self.folder(kind) / getattr(self.deployed, kind)
        if not (path / MANIFEST).is_file():
            raise InputFileError(f"{path}: sets.deployed.{kind} names no registered set in {self.folder(kind)}; "
                                 f"register it or fix sets.deployed.{kind}")
        return path


def check_model_sets(params: str | Path, model: str) -> ModelSets | None:
    """Check that every folder ``models.<model>.sets`` names holds sets and that the deployed ones are registered, before
    a stage needs them (the model's intake stage runs first: a misspelt folder is one line here, not DVC's missing
    dependency later). A demo model's sets are rendered by the demo_set stages, so they are not required to exist yet.
    None when the model declares no sets.

    Raises:
        ConfigError / InputFileError: the sets are malformed, a folder holds no set, or a deployed set is not registered;
            the message names the params key.
    """
    models = load_params(params, "models")
    entry = models.get(model) if isinstance(models, dict) else None
    if not isinstance(entry, dict) or "sets" not in entry:
        return None
    sets = model_sets(params, model)
    if entry.get("source", "file") == "demo":
        return sets
    root = Path(params).resolve().parent
    for kind in KINDS:
        try:
            set_folders(root / sets.folder(kind))
        except InputFileError as e:
            raise InputFileError(f"{params}: models.{model}.sets.{kind}: {e}") from None
    for kind in ("calibration", "reference"):
        path = root / sets.folder(kind) / getattr(sets.deployed, kind)
        if not (path / MANIFEST).is_file():
            names = ", ".join(d.name for d in set_folders(root / sets.folder(kind)))
            raise InputFileError(f"{params}: models.{model}.sets.deployed.{kind}: {getattr(sets.deployed, kind)!r} is not a set in "
                                 f"{sets.folder(kind)} (it has {names}); fix the name")
    return sets


def model_sets(params: str | Path, model: str) -> ModelSets:
    """``models.<model>.sets`` of the params file.

    Raises:
        InputFileError: the params file is missing or not YAML.
        ConfigError: the model or its ``sets`` is missing, or malformed.
    """
    models = load_params(params, "models")
    if model not in models:
        raise ConfigError(f"{params}: model {model!r} is not under 'models' (it has {', '.join(sorted(models)) or 'none'}); check the model's name")
    if not has_section(params, "sets", model=model):
        raise ConfigError(f"{params}: models.{model}.sets is missing; name the model's own set folders "
                          "(calibration, reference, site, deployed: 'quantkit params sets'), or add it with "
                          "'quantkit models add ... --calibration-set DIR --reference-set DIR --site-set DIR'")
    return config_from_params(ModelSets, params, "sets", model=model)


@dataclasses.dataclass(frozen=True)
class CandidateConfig(Config):
    """The candidate the main job builds per model (dvc.yaml ``compose_candidate`` .. ``bind_candidate``), read by
    dvc.yaml: a calibration set of ``images_per_set`` images of the deployed set and of each pool set (the model's
    ``sets.calibration``) covering a condition its drift check flagged; bound on ``reference_images_per_set`` images of
    each of its reference sets.

    Attributes:
        images_per_set: images taken from the deployed calibration set and from each pool set that is added.
        reference_images_per_set: images of each reference set in the candidate's composed reference set.
    """

    PARAMS_OPTIONAL = True
    images_per_set: int = 16
    reference_images_per_set: int = 12

    def validate(self) -> None:
        for name in ("images_per_set", "reference_images_per_set"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be at least 1")

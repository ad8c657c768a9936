"""The base of every on-disk contract: a frozen, typed, schema-versioned value with ``load`` / ``save``.

An :class:`Artifact` is a :class:`quantkit.config.Config` (strict ``from_dict``, exact ``to_dict``) that
knows its file: ``FILENAME`` inside a stage's output folder and ``KIND`` (its name in messages).
``save`` writes canonical JSON (sorted keys, compact; :func:`quantkit._io.canonical_json`) atomically, so
the same value always gives the same bytes. ``load`` reads, migrates older schema versions
(:meth:`Artifact.migrate`), validates every field (errors name the file and the field) and runs
:meth:`Artifact.check` (e.g. a fingerprint over the content).

Sealed artifacts carry a ``fingerprint`` field: SHA-256 over everything else
(:func:`quantkit._io.fingerprint`), set by :meth:`Artifact.sealed`; a file whose fingerprint does not match
its content was edited by hand and is refused.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .._io import atomic_write_json, canonical_json, fingerprint, read_json
from .._overwrite import FileKind, check_replaceable_file, read_json_object
from ..config import Config
from ..errors import ConfigError, InputFileError
from ..kinds import a_kind, only_fields, other_kind, register_kind

A = TypeVar("A", bound="Artifact")


@dataclasses.dataclass(frozen=True)
class Artifact(Config):
    """An on-disk contract. Subclasses set ``KIND``, ``FILENAME``, ``SCHEMA_VERSION`` and, where it applies,
    ``PRODUCER`` (the command that writes it, named in "re-run ..." fixes)."""

    KIND: ClassVar[str] = "artifact"
    FILENAME: ClassVar[str] = ""
    PRODUCER: ClassVar[str] = ""
    #: Names of fields left out of the fingerprint besides ``fingerprint`` itself.
    UNSEALED: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register each artifact class with :mod:`quantkit.kinds`, so any loader handed its file can name it."""
        super().__init_subclass__(**kwargs)
        if cls.KIND != Artifact.KIND:
            register_kind(cls, cls.KIND, cls.FILENAME, cls.PRODUCER)

    # -- migration and checks -----------------------------------------------------------------------
    @classmethod
    def migrate(cls, data: dict[str, Any], version: Any, path: Path) -> dict[str, Any]:
        """Turn ``data`` written with schema ``version`` into the current schema. Default: refuse.

        Raises:
            InputFileError: the version cannot be read by this quantkit.
        """
        raise InputFileError(f"{path}: {cls.KIND} schema_version {version!r} is not supported (this quantkit reads "
                             f"{cls.SCHEMA_VERSION}){cls._rerun()}")

    def check(self, path: Path) -> None:
        """Consistency checks after loading (default: the fingerprint of sealed artifacts).

        Raises:
            InputFileError: the content does not match its fingerprint.
        """
        if self.is_sealed() and getattr(self, "fingerprint") != self.content_fingerprint():
            raise InputFileError(f"{path}: fingerprint does not match the content of this {self.KIND} (edited by hand?){self._rerun()}")

    # -- fingerprint --------------------------------------------------------------------------------
    @classmethod
    def is_sealed(cls) -> bool:
        return "fingerprint" in {f.name for f in dataclasses.fields(cls)}

    def content_fingerprint(self) -> str:
        """SHA-256 over ``to_dict()`` without ``fingerprint`` (and ``UNSEALED`` fields)."""
        d = self.to_dict()
        for k in ("fingerprint", *self.UNSEALED):
            d.pop(k, None)
        return fingerprint(d)

    def sealed(self: A) -> A:
        """Copy with ``fingerprint`` set to :meth:`content_fingerprint`."""
        return dataclasses.replace(self, fingerprint=self.content_fingerprint())  # type: ignore[call-arg]

    # -- files --------------------------------------------------------------------------------------
    @classmethod
    def path_in(cls, path: str | os.PathLike[str]) -> Path:
        """``path`` itself, or ``path/FILENAME`` when ``path`` is a folder."""
        p = Path(path)
        return p / cls.FILENAME if cls.FILENAME and p.is_dir() else p

    @classmethod
    def load(cls: type[A], path: str | os.PathLike[str]) -> A:
        """Read, migrate, validate and check an artifact file (or the ``FILENAME`` inside a folder).

        Raises:
            InputFileError: missing, not JSON, another kind of quantkit file (the message says which, e.g. a
                threshold set given to ``CalibrationRecord.load``: :mod:`quantkit.kinds`), an unsupported schema version,
                a bad field (the message names the file and the field), or a failed :meth:`check`.
        """
        p = cls.path_in(path)
        data = read_json(p, cls.KIND)
        if not isinstance(data, dict):
            raise InputFileError(f"{p}: a {cls.KIND} must be a JSON object{cls._rerun()}")
        other = other_kind(cls, data)
        if other is not None:
            raise InputFileError(f"{p}: this is {other}, not {a_kind(cls.KIND)}; {cls._pass_instead()}")
        version = data.get("schema_version")
        if version != cls.SCHEMA_VERSION:
            data = cls.migrate(dict(data), version, p)
        try:
            obj = cls.from_dict(data, where=str(p))
        except ConfigError as e:
            msg = str(e)
            raise InputFileError(msg if msg.startswith(str(p)) else f"{p}: {msg}") from None
        obj.check(p)
        return obj

    def to_json(self) -> str:
        """The canonical JSON text :meth:`save` writes (sealed artifacts: as they are, not re-sealed)."""
        return canonical_json(self.to_dict())

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write canonical JSON atomically (sealed artifacts are sealed first); returns the path written.

        Raises:
            InputFileError: the path holds a file that is not this kind of artifact (:meth:`recognizes`): a
                user's file, a model, another artifact. It is left as it was.
        """
        obj = self.sealed() if self.is_sealed() else self
        dest = self.path_in(path)
        check_replaceable_file(dest, self.file_kind())
        return atomic_write_json(dest, obj.to_dict())

    # -- what an output may replace -----------------------------------------------------------------
    @classmethod
    def recognizes(cls, path: Path) -> bool:
        """Whether the existing file ``path`` is one of this kind that quantkit wrote, so an output may replace it:
        a JSON object with ``schema_version`` and no key outside this class's fields, or a file :meth:`load`
        reads (an older schema version it migrates). Never raises."""
        data = read_json_object(path)
        if data is None:
            return False
        if "schema_version" in data and only_fields(cls, data):
            return True
        try:
            cls.load(path)
        except Exception:  # not readable as this kind, for whatever reason: not ours to replace
            return False
        return True

    @classmethod
    def file_kind(cls) -> FileKind:
        """This artifact as a single-file output (:func:`quantkit._overwrite.check_output_file`)."""
        return FileKind(cls.KIND, cls.recognizes)

    @classmethod
    def _pass_instead(cls) -> str:
        """The fix when a loader was handed another kind of file: which file to pass instead."""
        what = f"the {cls.FILENAME}" if cls.FILENAME else f"{a_kind(cls.KIND)} file"
        return f"pass {what}" + (f" that '{cls.PRODUCER}' writes" if cls.PRODUCER else "") + (" (or the folder holding it)" if cls.FILENAME else "")

    @classmethod
    def _rerun(cls) -> str:
        return f"; re-run '{cls.PRODUCER}'" if cls.PRODUCER else ""

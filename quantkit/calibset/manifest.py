"""Sets of images as versioned artifacts: ``images/`` + ``manifest.json`` (+ ``stats.csv``).

The manifest schema is fixed by ``docs/ARCHITECTURE.md``. A set's ``set_id`` is the SHA-256 of the
compact canonical JSON of the sorted ``[[file, sha256], ...]`` pairs (:func:`quantkit._io.fingerprint`),
so two folders with the same image files (names and bytes) have the same id, whatever else differs.

Versioning rule: a manifest is never rewritten with different content. Registering a folder whose
``manifest.json`` differs from what registration would write raises :class:`CalibrationSetError`;
a changed set is registered as a new folder (a new version), and DVC tracks both.

Bad files at registration (every file under ``images/`` whose suffix is an image suffix is decoded):

* corrupt or truncated image, zero-byte file, text file with an image suffix: ``on_error="fail"`` raises :class:`CalibrationSetError`
  naming the file and writes nothing; ``on_error="skip"`` logs a warning naming it and leaves it out of the set (the manifest's
  ``skipped``: the file may stay in ``images/`` without making the folder a changed set; ``RegisterResult.skipped``);
* files without an image suffix (``notes.txt``): never part of the set; one WARNING names them (hidden files and folders, e.g. ``.DS_Store``, are passed over silently);
* 16-bit PNG, grayscale, palette, RGBA: decoded by :func:`quantkit.imageio.load_image`; images with
  partial transparency are named in one WARNING (alpha is ignored, see :mod:`quantkit.imageio`);
* EXIF-rotated photos: ``width``/``height`` are those after applying the EXIF orientation.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, Sequence

from .._io import atomic_write_json, canonical_json, fingerprint, read_json, sha256_file
from ..errors import CalibrationSetError, ConfigError, InputFileError
from ..imageio import IMAGE_SUFFIXES, decode_image
from ..progress import progress
from ..tasks.registry import label_keys
from .stats import image_statistics, read_stats_csv, stats_frame, write_stats_csv

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STATS = "stats.csv"
IMAGES = "images"
SCHEMA_VERSION = 1
Kind = Literal["calibration", "reference", "site"]
KINDS = ("calibration", "reference", "site")
OnError = Literal["fail", "skip"]


@dataclasses.dataclass(frozen=True)
class ImageEntry:
    """One image of a set. ``file`` is relative to the set folder (POSIX), ``bytes`` its size.

    ``labels``: ground truth of the image, or ``None`` when the set carries none. Keys are read by task
    adapters (each names its key, :attr:`quantkit.tasks.TaskAdapter.LABELS`): ``text_boxes`` (text quads,
    ``[[x, y] * 4]`` per box in image pixels, clockwise from top-left), ``boxes`` (``[x0, y0, x1, y1, class]``
    per object), ``class`` (an int), ``text`` (a string).
    """

    file: str
    sha256: str
    bytes: int
    width: int
    height: int
    format: str
    captured_at: str | None = None
    labels: Mapping[str, Any] | None = None

    @property
    def text_boxes(self) -> tuple[tuple[tuple[float, float], ...], ...] | None:
        """Ground-truth text quads (``labels.text_boxes``), or None."""
        quads = (self.labels or {}).get("text_boxes")
        return None if quads is None else tuple(tuple((float(x), float(y)) for x, y in q) for q in quads)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "file": self.file, "sha256": self.sha256, "bytes": self.bytes, "width": self.width,
            "height": self.height, "format": self.format, "captured_at": self.captured_at,
        }
        if self.labels is not None:
            d["labels"] = dict(self.labels)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> "ImageEntry":
        try:
            labels = d.get("labels")
            if labels is not None and not isinstance(labels, dict):
                raise TypeError("labels must be a mapping")
            return cls(file=str(d["file"]), sha256=str(d["sha256"]), bytes=int(d["bytes"]), width=int(d["width"]),
                       height=int(d["height"]), format=str(d["format"]), captured_at=d.get("captured_at"), labels=labels)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CalibrationSetError(f"{where}: malformed image entry ({type(e).__name__}: {e}); re-register the set") from None

    def __repr__(self) -> str:
        return f"ImageEntry({self.file!r}, {self.width}x{self.height}, {self.sha256[:12]})"


@dataclasses.dataclass(frozen=True)
class CalibrationSet:
    """A registered set loaded from its folder. Build with :meth:`load` or :func:`register_set`."""

    root: Path
    set_id: str
    name: str
    kind: str
    camera: str
    lighting: str
    site: str
    capture_start: str | None
    capture_end: str | None
    entries: tuple[ImageEntry, ...]
    generator: dict[str, Any] | None = None
    skipped: tuple[str, ...] = ()

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, verify: bool = False) -> "CalibrationSet":
        """Read ``folder/manifest.json``; with ``verify=True`` also re-hash every image (see :meth:`verify`).

        Raises:
            CalibrationSetError: no manifest, a malformed or inconsistent one, an empty set, or (verify) a
                missing or changed image.
        """
        root = Path(folder)
        mpath = root / MANIFEST
        if not mpath.is_file():
            if not root.is_dir():
                raise CalibrationSetError(f"{root}: no such folder; check the image set's path")
            if (root.parent / MANIFEST).is_file():
                raise CalibrationSetError(f"{root}: this is the image folder of the registered set {root.parent}; pass {root.parent} itself")
            raise CalibrationSetError(f"{root}: no {MANIFEST}; register the folder with 'quantkit calibset register {root} --name NAME'")
        try:
            data = read_json(mpath, "set manifest")
        except InputFileError as e:
            raise CalibrationSetError(str(e)) from None
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            raise CalibrationSetError(f"{mpath}: schema_version must be {SCHEMA_VERSION}; re-register the set with this quantkit")
        try:
            entries = tuple(ImageEntry.from_dict(e, f"{mpath}: images[{i}]") for i, e in enumerate(data["images"]))
            cset = cls(root=root, set_id=str(data["set_id"]), name=str(data["name"]), kind=str(data["kind"]),
                       camera=str(data["camera"]), lighting=str(data["lighting"]), site=str(data["site"]),
                       capture_start=data.get("capture_start"), capture_end=data.get("capture_end"),
                       entries=entries, generator=data.get("generator"), skipped=tuple(str(f) for f in data.get("skipped", ())))
        except (KeyError, TypeError) as e:
            raise CalibrationSetError(f"{mpath}: field {e} missing or malformed; re-register the set") from None
        if not entries:
            raise CalibrationSetError(f"{mpath}: the set has no images; add images under {root / IMAGES} and register a new set")
        if data.get("count") != len(entries):
            raise CalibrationSetError(f"{mpath}: count {data.get('count')} != {len(entries)} images listed; the manifest was edited, re-register")
        if compute_set_id(entries) != cset.set_id:
            raise CalibrationSetError(f"{mpath}: set_id does not match the listed hashes; the manifest was edited, re-register")
        if verify:
            cset.verify()
        return cset

    @property
    def count(self) -> int:
        return len(self.entries)

    def paths(self) -> list[Path]:
        """Absolute-or-relative (as ``root``) paths of the images, in manifest order."""
        return [self.root / e.file for e in self.entries]

    def verify(self) -> None:
        """Re-hash every image and compare with the manifest (streaming, 1 MiB chunks).

        Raises:
            CalibrationSetError: an image is missing or its SHA-256 differs, or an image file under ``images/`` is not
                in the manifest (a set is what its manifest lists: an added image is a new version); names the first one.
        """
        listed = {e.file for e in self.entries} | set(self.skipped)
        if extra := [f for f in iter_image_files(self.root) if f.relative_to(self.root).as_posix() not in listed]:
            raise CalibrationSetError(f"{extra[0]}: in {self.root / IMAGES} but not registered in {self.root / MANIFEST} ({len(extra)} such "
                                      "image(s)); register the changed set as a new version (copy the folder, then 'quantkit calibset register') or remove it")
        for e, p in progress(list(zip(self.entries, self.paths())), desc=f"verify {self.name}"):
            try:
                digest = sha256_file(p)
            except FileNotFoundError:
                raise CalibrationSetError(f"{p}: listed in {self.root / MANIFEST} but missing; restore it (dvc pull) or register the changed set as a new version") from None
            if digest != e.sha256:
                raise CalibrationSetError(f"{p}: content changed since registration (sha256 {digest[:12]} != {e.sha256[:12]}); restore it (dvc pull) or register the changed set as a new version (copy the folder, then 'quantkit calibset register')")

    def stats(self) -> "Any":
        """Per-image statistics DataFrame from ``stats.csv`` (see :mod:`quantkit.calibset.stats`)."""
        return read_stats_csv(self.root / STATS)

    def manifest(self) -> dict[str, Any]:
        """The manifest as a plain dict (what ``manifest.json`` holds)."""
        return _manifest_dict(self.name, self.kind, self.camera, self.lighting, self.site, self.entries, self.generator, self.skipped)

    def to_dict(self) -> dict[str, Any]:
        """Summary without per-image entries: path, id, metadata, count and capture window."""
        return {"path": str(self.root), "set_id": self.set_id, "name": self.name, "kind": self.kind, "camera": self.camera,
                "lighting": self.lighting, "site": self.site, "count": self.count,
                "capture_start": self.capture_start, "capture_end": self.capture_end}

    def __repr__(self) -> str:
        return f"CalibrationSet({self.name!r}, {self.count} images, id={self.set_id[:12]}, camera={self.camera}, lighting={self.lighting})"


@dataclasses.dataclass(frozen=True)
class RegisterResult:
    """What :func:`register_set` did: the set, whether the manifest was (re)written, skipped files."""

    set: CalibrationSet
    written: bool
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.set.to_dict(), "written": self.written, "skipped": list(self.skipped)}

    def __repr__(self) -> str:
        return f"RegisterResult({self.set!r}, written={self.written}, skipped={len(self.skipped)})"


def _labels(value: Any) -> dict[str, Any] | None:
    """A ``labels`` mapping; a bare list is the older form of ``{"text_boxes": quads}``."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    return {"text_boxes": [[[float(x), float(y)] for x, y in q] for q in value]}


def compute_set_id(entries: Sequence[ImageEntry]) -> str:
    """SHA-256 over the compact canonical JSON of sorted ``[file, sha256]`` pairs."""
    return fingerprint(sorted([e.file, e.sha256] for e in entries))


def _manifest_dict(name: str, kind: str, camera: str, lighting: str, site: str, entries: Sequence[ImageEntry], generator: dict[str, Any] | None, skipped: Sequence[str] = ()) -> dict[str, Any]:
    times = sorted(e.captured_at for e in entries if e.captured_at)
    d: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "set_id": compute_set_id(entries), "name": name, "kind": kind,
        "camera": camera, "lighting": lighting, "site": site,
        "capture_start": times[0] if times else None, "capture_end": times[-1] if times else None,
        "count": len(entries), "images": [e.to_dict() for e in entries],
    }
    # skipped: unreadable files left out (on_error: skip): not part of the set, nor a change to it
    d.update({**({"generator": generator} if generator is not None else {}), **({"skipped": sorted(skipped)} if skipped else {})})
    return d


def _exif_time(path: Path) -> str | None:
    """EXIF DateTimeOriginal (or DateTime) as ISO-8601, or None."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # damaged metadata was already judged by decode_image
            with Image.open(path) as im:
                exif = im.getexif()
            raw = exif.get_ifd(0x8769).get(0x9003) or exif.get(0x0132)
        if raw:
            return _dt.datetime.strptime(str(raw).strip("\x00 "), "%Y:%m:%d %H:%M:%S").isoformat()
    except Exception:  # noqa: BLE001 - EXIF is optional metadata; any failure means "unknown"
        return None
    return None


def iter_image_files(folder: Path) -> Iterator[Path]:
    """Files under ``folder/images`` (recursive, sorted by relative POSIX path) with an image suffix."""
    yield from scan_image_folder(folder)[0]


def scan_image_folder(folder: Path) -> tuple[list[Path], list[Path]]:
    """``(images, others)`` under ``folder/images`` (recursive, sorted by relative POSIX path): files with an
    image suffix, and every other non-hidden file (never part of the set)."""
    img_dir = folder / IMAGES
    images: list[Path] = []
    others: list[Path] = []
    for p in sorted(img_dir.rglob("*"), key=lambda q: q.relative_to(folder).as_posix()):
        if not p.is_file() or any(part.startswith(".") for part in p.relative_to(img_dir).parts):
            continue
        (images if p.suffix.lower() in IMAGE_SUFFIXES else others).append(p)
    return images, others


def _some(paths: Sequence[str], n: int = 3) -> str:
    return ", ".join(paths[:n]) + (f" and {len(paths) - n} more" if len(paths) > n else "")


def _measure(root: Path, files: list[Path], name: str, captured_at: Mapping[str, str],
             labels: Mapping[str, Any], on_error: str) -> tuple[list[ImageEntry], list[dict[str, Any]], list[str]]:
    """Hash, decode and measure each image (one in memory at a time): manifest entries, stats rows, skipped files.

    Raises:
        CalibrationSetError: an unreadable image with ``on_error="fail"``, or every image unreadable.
    """
    entries: list[ImageEntry] = []
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    transparent: list[str] = []
    for p in progress(files, total=len(files), desc=f"register {name}"):
        rel = p.relative_to(root).as_posix()
        try:
            decoded = decode_image(p)
            fmt = _image_format(p)
        except InputFileError as e:
            if on_error == "fail":
                raise CalibrationSetError(f"{e}; or register with on_error=skip (--on-error skip)") from None
            log.warning("skipping %s", e)
            skipped.append(rel)
            continue
        h, w = decoded.array.shape[:2]
        entries.append(ImageEntry(
            file=rel, sha256=sha256_file(p), bytes=p.stat().st_size, width=int(w), height=int(h), format=fmt,
            captured_at=captured_at.get(rel) or _exif_time(p), labels=_labels(labels.get(rel)),
        ))
        rows.append({"file": rel, **image_statistics(decoded.array)})
        if decoded.partial_alpha:
            transparent.append(rel)
        del decoded
    if not entries:
        raise CalibrationSetError(f"{root / IMAGES}: every image was skipped as unreadable; fix or replace them")
    if transparent:
        log.warning("%s: %d image(s) have partial transparency (%s); quantkit ignores alpha and uses the stored colours, as "
                    "cv2.imread does; if your deployment composites them on a background, flatten them that way before registering",
                    root, len(transparent), _some(transparent))
    return entries, rows, skipped


def _warn_unread_label_keys(root: Path, labels: Mapping[str, Any]) -> None:
    """Warn about ``labels`` keys no registered task reads (a misspelt ``box`` only failed when a task looked for it)."""
    read = label_keys()
    if unread := sorted({k for v in labels.values() if isinstance(v, Mapping) for k in v} - read):
        log.warning("%s: no task reads the label key(s) %s (the tasks read %s); a task will find no ground truth under them",
                    root, ", ".join(unread), ", ".join(sorted(read)))


def register_set(
    folder: str | os.PathLike[str],
    *,
    name: str,
    kind: str = "calibration",
    camera: str = "unknown",
    lighting: str = "unknown",
    site: str = "unknown",
    captured_at: Mapping[str, str] | None = None,
    labels: Mapping[str, Any] | None = None,
    generator: dict[str, Any] | None = None,
    on_error: OnError = "fail",
) -> RegisterResult:
    """Register ``folder/images/*`` as a set: hash, decode and measure each image, write ``stats.csv``
    and ``manifest.json`` (in that order, each atomically; the manifest marks the set complete).

    One pass, one image in memory at a time. ``captured_at`` and ``labels`` map a relative file name
    (``images/0000.jpg``) to an ISO-8601 time and to its ground-truth ``labels`` mapping (see :class:`ImageEntry`;
    a bare list is read as text quads); without ``captured_at`` the EXIF
    ``DateTimeOriginal`` is used when present.

    Returns:
        :class:`RegisterResult`; ``written`` is False when an identical manifest already existed.

    Raises:
        ConfigError: ``kind`` or ``on_error`` is not a valid choice, or ``name`` is empty.
        CalibrationSetError: no ``images/`` folder or no images; a bad image with ``on_error="fail"``;
            an existing manifest with different content (a changed set must be a new version).
    """
    root = Path(folder)
    if kind not in KINDS:
        raise ConfigError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if on_error not in ("fail", "skip"):
        raise ConfigError(f"on_error: {on_error!r} is not one of 'fail', 'skip'")
    if not name:
        raise ConfigError("name: must be a non-empty string (e.g. --name cam1-day)")
    if not (root / IMAGES).is_dir():
        raise CalibrationSetError(f"{root}: no {IMAGES}/ folder; put the images in {root / IMAGES} and register again")
    files, others = scan_image_folder(root)
    if not files:
        raise CalibrationSetError(f"{root / IMAGES}: no image files ({', '.join(sorted(IMAGE_SUFFIXES))}); add images and register again")
    if others:
        rels = [p.relative_to(root).as_posix() for p in others]
        log.warning("%s: %d file(s) without an image suffix (%s) are not part of the set: %s; move them out of %s/ to silence this",
                    root, len(rels), ", ".join(sorted(IMAGE_SUFFIXES)), _some(rels), IMAGES)
    stray = sorted(set(labels or {}) - {p.relative_to(root).as_posix() for p in files})
    if stray:
        raise CalibrationSetError(f"{root}: labels name {len(stray)} file(s) that are not images of the set ({_some(stray)}); "
                                  f"key the labels by the file's path in the set, e.g. {IMAGES}/0001.jpg")
    _warn_unread_label_keys(root, labels or {})
    entries, rows, skipped = _measure(root, files, name, captured_at or {}, labels or {}, on_error)
    manifest = _manifest_dict(name, kind, camera, lighting, site, entries, generator, skipped)
    mpath = root / MANIFEST
    written = True
    if mpath.exists():
        old = mpath.read_text(encoding="utf-8", errors="replace")
        if old != canonical_json(manifest):
            old_id = _old_id(mpath)
            if old_id == manifest["set_id"]:
                raise CalibrationSetError(
                    f"{mpath}: already registered (set_id {old_id[:12]}) with different metadata (name, kind, camera, lighting, site, "
                    "capture times, labels or generator); a manifest is never rewritten: copy the folder and register the copy"
                )
            raise CalibrationSetError(
                f"{mpath}: already registered (set_id {old_id[:12]}) with different content (new set_id {manifest['set_id'][:12]}); "
                "a changed set is a new version: copy the images to a new folder and register that"
            )
        written = False
    if written:
        write_stats_csv(stats_frame(rows), root / STATS)
        atomic_write_json(mpath, manifest)
    elif not (root / STATS).exists():
        write_stats_csv(stats_frame(rows), root / STATS)
    log.info("registered %s: %d images, set_id %s", root, len(entries), manifest["set_id"][:12])
    return RegisterResult(CalibrationSet.load(root), written, tuple(skipped))


def _old_id(mpath: Path) -> str:
    try:
        return str(read_json(mpath, "set manifest").get("set_id", "?"))
    except (InputFileError, AttributeError):
        return "?"


def _image_format(path: Path) -> str:
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # damaged metadata was already judged by decode_image
        with Image.open(path) as im:
            return str(im.format or path.suffix.lstrip(".").upper())

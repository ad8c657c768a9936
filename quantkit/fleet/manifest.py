"""The fleet manifest: one row per site image (Parquet, or CSV accepted), built from a folder tree or checked.

Columns (``captured_at`` is UTC; ``line``, ``lighting``, ``bytes`` and ``sha256`` may be empty):

==============  =========================  ===========================================================
column          type                       meaning
==============  =========================  ===========================================================
uri             string                     local path or fsspec URI (``s3://...``); a relative path is
                                           relative to the manifest's folder
camera, site    string                     camera id (unique in the fleet) and its site
line            string                     production line
captured_at     timestamp[us, UTC]         capture time
lighting        string (nullable)          optional lighting label
bytes, sha256   int64, string (nullable)   file size and content digest (``register`` fills them);
                                           shard keys use them so a changed image re-scores its shard
==============  =========================  ===========================================================

Rows are stored sorted by camera, capture time and URI. ``register`` walks a tree laid out as
``--layout`` (default ``{site}/{camera}/{date}``, any of ``{site} {line} {camera} {date}`` as folder
levels, ``{date}`` as ``YYYY-MM-DD``); the capture time is EXIF DateTimeOriginal (taken as UTC) or,
without EXIF, the date folder's midnight. Bad files are counted and named in a :class:`ManifestCheck`
(missing, duplicate, unreadable, outside the layout), never a crash; unreadable and misplaced files
are left out of a registered manifest.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as _dt
import io
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterator, Literal

from .._io import atomic_write_bytes, sha256_bytes
from ..errors import ConfigError, InputFileError
from ..extras import require
from ..imageio import IMAGE_SUFFIXES

log = logging.getLogger(__name__)

REQUIRED = ("uri", "camera", "site", "captured_at")
OPTIONAL = ("line", "lighting", "bytes", "sha256")
COLUMNS = REQUIRED[:3] + ("line", "captured_at", "lighting", "bytes", "sha256")
LEVELS = ("site", "line", "camera", "date")
EXAMPLES = 20
Verify = Literal["decode", "exists", "none"]


@dataclasses.dataclass(frozen=True)
class ManifestCheck:
    """What checking a manifest (or registering a tree) found. Lists hold at most 20 examples each.

    ``images``: rows (or image files) looked at; ``missing``, ``unreadable``, ``duplicates``
    (``uri`` listed twice, or identical bytes under two names), ``unplaced`` (files outside the
    layout): counts and example names.
    """

    images: int
    missing: int = 0
    unreadable: int = 0
    duplicates: int = 0
    unplaced: int = 0
    examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unreadable or self.duplicates or self.unplaced)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}

    def lines(self) -> list[str]:
        """Plain lines: one per problem kind with its count and examples."""
        out = [f"{self.images} images checked" + ("; no problems" if self.ok else "")]
        for kind in ("missing", "unreadable", "duplicates", "unplaced"):
            n = getattr(self, kind)
            if n:
                ex = self.examples.get(kind, [])
                out.append(f"{kind}: {n} ({'; '.join(ex[:5])}{'; ...' if n > 5 else ''})")
        return out

    def __repr__(self) -> str:
        return f"ManifestCheck({self.images} images, missing={self.missing}, unreadable={self.unreadable}, duplicates={self.duplicates})"


def _add(examples: dict[str, list[str]], kind: str, what: str) -> None:
    lst = examples.setdefault(kind, [])
    if len(lst) < EXAMPLES:
        lst.append(what)


@dataclasses.dataclass(frozen=True, repr=False)
class FleetManifest:
    """A loaded manifest: ``frame`` (pandas, :data:`COLUMNS`, sorted) and the folder relative URIs start from."""

    path: Path
    root: Path
    frame: Any

    def resolve(self, uri: str) -> str:
        """Absolute path or URI of a row's ``uri``."""
        return resolve_uri(uri, self.root)

    def __len__(self) -> int:
        return int(len(self.frame))

    def __repr__(self) -> str:
        return f"FleetManifest({self.path}, {len(self)} images, {self.frame['camera'].nunique()} cameras)"


def resolve_uri(uri: str, root: str | os.PathLike[str]) -> str:
    """``uri`` unchanged when it is a URL or absolute, else joined to ``root`` (POSIX)."""
    if "://" in uri or os.path.isabs(uri):
        return uri
    return (Path(root) / uri).as_posix()


def read_bytes(uri: str) -> bytes:
    """The bytes of a local file or fsspec URI (raises OSError / FileNotFoundError)."""
    if "://" in uri:
        fsspec = require("fsspec", "fleet", "quantkit fleet")
        with fsspec.open(uri, "rb") as f:
            return f.read()
    return Path(uri).read_bytes()


def _exists(uri: str) -> bool:
    if "://" in uri:
        fsspec = require("fsspec", "fleet", "quantkit fleet")
        fs, path = fsspec.core.url_to_fs(uri)
        return bool(fs.exists(path))
    return os.path.isfile(uri)


def _normalize(frame: Any, where: str) -> Any:
    import pandas as pd

    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise InputFileError(f"{where}: column {missing[0]!r} is missing; a fleet manifest needs {', '.join(REQUIRED)} (see quantkit fleet register)")
    out = pd.DataFrame({c: frame[c] if c in frame.columns else None for c in COLUMNS})
    for c in ("uri", "camera", "site"):
        bad = out[c].isna() | (out[c].astype(str).str.strip() == "")
        if bad.any():
            raise InputFileError(f"{where}: row {int(bad.idxmax())} has an empty {c!r}; fill it in")
        out[c] = out[c].astype(str)
    out["line"] = out["line"].fillna("").astype(str)
    raw = out["captured_at"]
    when = pd.to_datetime(raw, utc=True, format="ISO8601", errors="coerce")
    if when.isna().any():
        i = int(when.isna().to_numpy().argmax())
        raise InputFileError(f"{where}: row {i} captured_at {raw.iloc[i]!r} is not an ISO-8601 time "
                             "(e.g. 2025-03-03T08:15:00+00:00); fix it")
    out["captured_at"] = when.astype("datetime64[us, UTC]")
    out["lighting"] = out["lighting"].astype("string")
    out["bytes"] = pd.to_numeric(out["bytes"], errors="coerce").astype("Int64")
    out["sha256"] = out["sha256"].astype("string")
    sites = out.groupby("camera")["site"].unique()
    shared = sites[sites.map(len) > 1]
    if len(shared):
        cam = str(shared.index[0])
        raise InputFileError(f"{where}: camera id {cam!r} appears under sites {', '.join(sorted(map(str, shared.iloc[0])))}; a camera id is "
                             "unique in the fleet (each camera is checked against its own history): prefix ids with their site, "
                             "e.g. s1-camA (quantkit fleet register does this when names repeat)")
    return out.sort_values(["camera", "captured_at", "uri"], kind="stable").reset_index(drop=True)


def load_manifest(path: str | os.PathLike[str]) -> FleetManifest:
    """Read a manifest (``.parquet`` or ``.csv``), check its columns and types, sort it.

    Raises:
        InputFileError: the file is missing or unreadable, a required column is missing, or a value
            is empty or not a time (the message names the file, row and column).
    """
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"{p}: fleet manifest not found; build one with 'quantkit fleet register IMAGES --out {p}'")
    csv = p.suffix.lower() == ".csv"
    if not csv:
        require("pyarrow", "fleet", "quantkit fleet (a Parquet manifest)")
    try:
        frame = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""]) if csv else pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - pyarrow/pandas raise many types for a bad file
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputFileError(f"{p}: not a readable {'CSV' if csv else 'Parquet'} manifest ({first}); regenerate it") from None
    if len(frame) == 0:
        raise InputFileError(f"{p}: the manifest lists no images; register a folder with 'quantkit fleet register IMAGES --out {p}'")
    return FleetManifest(p, p.resolve().parent, _normalize(frame, str(p)))


def write_manifest(frame: Any, path: str | os.PathLike[str]) -> Path:
    """Write a manifest frame as Parquet (or CSV for a ``.csv`` path) atomically, sorted, same bytes for same rows."""
    pa = require("pyarrow", "fleet", "quantkit fleet")
    pq = require("pyarrow.parquet", "fleet", "quantkit fleet")

    p = Path(path)
    frame = _normalize(frame, str(p))
    if p.suffix.lower() == ".csv":
        csv = frame.assign(captured_at=frame["captured_at"].map(lambda t: t.isoformat())).to_csv(index=False, lineterminator="\n")
        return atomic_write_bytes(p, csv.encode("utf-8"))
    schema = pa.schema([("uri", pa.string()), ("camera", pa.string()), ("site", pa.string()), ("line", pa.string()),
                        ("captured_at", pa.timestamp("us", tz="UTC")), ("lighting", pa.string()), ("bytes", pa.int64()),
                        ("sha256", pa.string())])
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False).replace_schema_metadata({"quantkit": "fleet manifest v1"})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return atomic_write_bytes(p, buf.getvalue())


def _probe(uri: str, verify: Verify) -> tuple[str, int | None, str | None, str | None]:
    """(state, bytes, sha256, capture time) of one file; state is ok | missing | unreadable."""
    if verify == "none":
        return "ok", None, None, None
    try:
        data = read_bytes(uri)
    except FileNotFoundError:
        return "missing", None, None, None
    except OSError as e:
        return f"unreadable: {e.strerror or e}", None, None, None
    if verify == "exists":
        return "ok", len(data), sha256_bytes(data), None
    from PIL import Image

    try:
        if not data:
            raise ValueError("empty file")
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            exif = im.getexif()
            raw = exif.get_ifd(0x8769).get(0x9003) or exif.get(0x0132)
    except Exception as e:  # noqa: BLE001 - Pillow raises many types for bad images
        return f"unreadable: {str(e).splitlines()[0] if str(e) else type(e).__name__}", len(data), None, None
    when = None
    if raw:
        try:
            when = _dt.datetime.strptime(str(raw).strip("\x00 "), "%Y:%m:%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc).isoformat()
        except ValueError:
            when = None
    return "ok", len(data), sha256_bytes(data), when


def _probe_all(uris: list[str], verify: Verify) -> Iterator[tuple[str, int | None, str | None, str | None]]:
    from ..progress import progress

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:  # Pillow and file reads release the GIL
        yield from progress(pool.map(lambda u: _probe(u, verify), uris), total=len(uris), desc="check images")


def check_manifest(manifest: FleetManifest, *, verify: Verify = "decode") -> ManifestCheck:
    """Look for missing, unreadable and duplicate images of a manifest; never raises for a bad file.

    ``verify``: ``decode`` reads and decodes every image (and compares ``sha256`` where the manifest
    has it), ``exists`` only reads the bytes, ``none`` checks duplicates only.
    """
    f = manifest.frame
    ex: dict[str, list[str]] = {}
    dup_uri = f["uri"].duplicated(keep="first")
    for u in f.loc[dup_uri, "uri"]:
        _add(ex, "duplicates", f"{u} listed twice")
    missing = unreadable = 0
    digests: dict[str, str] = {}
    dup_content = 0
    uris = [manifest.resolve(u) for u in f["uri"]]
    for (uri, listed), (state, _, digest, _) in zip(zip(uris, f["sha256"]), _probe_all(uris, verify)):
        if state == "missing":
            missing += 1
            _add(ex, "missing", uri)
        elif state != "ok":
            unreadable += 1
            _add(ex, "unreadable", f"{uri} ({state.split(': ', 1)[-1]})")
        elif digest is not None:
            if isinstance(listed, str) and listed and listed != digest:
                unreadable += 1
                _add(ex, "unreadable", f"{uri} (sha256 differs from the manifest: the file changed)")
            elif digest in digests and digests[digest] != uri:
                dup_content += 1
                _add(ex, "duplicates", f"{uri} has the same bytes as {digests[digest]}")
            digests.setdefault(digest, uri)
    return ManifestCheck(len(f), missing, unreadable, int(dup_uri.sum()) + dup_content, 0, ex)


def _layout_regex(layout: str) -> tuple[re.Pattern[str], list[str]]:
    parts = [p for p in layout.strip("/").split("/") if p]
    names = [p[1:-1] for p in parts]
    if not parts or any(not (p.startswith("{") and p.endswith("}")) or p[1:-1] not in LEVELS for p in parts) \
            or len(set(names)) != len(names) or not {"site", "camera"} <= set(names):
        raise ConfigError(f"--layout {layout!r}: use folder levels among {{site}} {{line}} {{camera}} {{date}}, each once, "
                          "with {site} and {camera}, e.g. {site}/{camera}/{date}")
    return re.compile("^" + "/".join(r"(\d{4}-\d{2}-\d{2})" if n == "date" else r"([^/]+)" for n in names) + "/[^/]+$"), names


def register_tree(root: str | os.PathLike[str], out: str | os.PathLike[str], *, layout: str = "{site}/{camera}/{date}",
                  verify: Verify = "decode") -> tuple[FleetManifest, ManifestCheck]:
    """Build a manifest of every image under ``root`` laid out as ``layout`` and write it to ``out``.

    URIs are stored relative to ``out``'s folder. Unreadable files, identical copies and files
    outside the layout are left out and named in the returned check.

    Raises:
        InputFileError: ``root`` is not a folder, or it holds no image that fits the layout.
        ConfigError: ``layout`` is malformed.
    """
    import pandas as pd

    base, dest = Path(root), Path(out)
    if not base.is_dir():
        raise InputFileError(f"{base}: not a folder; pass the root of the image tree ({layout})")
    pattern, names = _layout_regex(layout)
    files = sorted((p for p in base.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")),
                   key=lambda p: p.relative_to(base).as_posix())
    ex: dict[str, list[str]] = {}
    placed: list[tuple[Path, dict[str, str]]] = []
    for p in files:
        m = pattern.match(p.relative_to(base).as_posix())
        if m is None:
            _add(ex, "unplaced", p.as_posix())
        else:
            placed.append((p, dict(zip(names, m.groups()))))
    rows, seen = [], {}
    unreadable = dup = 0
    for (p, levels), (state, size, digest, when) in zip(placed, _probe_all([q.as_posix() for q, _ in placed], verify)):
        if state != "ok":
            unreadable += 1
            _add(ex, "unreadable", f"{p.as_posix()} ({state.split(': ', 1)[-1]})")
            continue
        if digest is not None and digest in seen:
            dup += 1
            _add(ex, "duplicates", f"{p.as_posix()} has the same bytes as {seen[digest]}")
            continue
        if digest is not None:
            seen[digest] = p.as_posix()
        if when is None:
            if "date" not in levels:
                unreadable += 1
                _add(ex, "unreadable", f"{p.as_posix()} (no EXIF capture time and no {{date}} folder)")
                continue
            when = f"{levels['date']}T00:00:00+00:00"
        rows.append({"uri": os.path.relpath(p.resolve(), dest.resolve().parent).replace(os.sep, "/"), "camera": levels["camera"],
                     "site": levels["site"], "line": levels.get("line", ""), "captured_at": when, "lighting": None,
                     "bytes": size, "sha256": digest})
    check = ManifestCheck(len(files), 0, unreadable, dup, len(files) - len(placed), ex)
    if not rows:
        raise InputFileError(f"{base}: no readable image fits the layout {layout} ({'; '.join(check.lines()[1:]) or 'no image files'})")
    frame = pd.DataFrame(rows)
    if (frame.groupby("camera")["site"].nunique() > 1).any():  # camera names repeat across sites: qualify every id
        frame["camera"] = frame["site"] + "-" + frame["camera"]
        log.warning("%s: camera folder names repeat across sites; camera ids are <site>-<camera> (e.g. %s)", base, frame["camera"].iloc[0])
    write_manifest(frame, dest)
    log.info("fleet manifest %s: %d images (%s)", dest, len(rows), "; ".join(check.lines()))
    return load_manifest(dest), check

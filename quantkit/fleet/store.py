"""Read a fleet scores folder (written by :func:`quantkit.fleet.score.score_fleet`): one reader, used by check and report.

``ScoreStore(out)`` reads ``summary.json`` and ``edges.json`` once; shard summaries and rows are read
per camera on demand, so memory follows one camera, not the fleet.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Any

from .._io import read_json
from ..errors import InputFileError
from ..extras import require
from .scorer import shard_summary_path
from .summaries import Edges, Summary


class ScoreStore:
    """A scores folder.

    Raises:
        InputFileError: the folder, ``summary.json`` or ``edges.json`` is missing or malformed.
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.path = Path(out)
        if not (self.path / "summary.json").is_file():
            raise InputFileError(f"{self.path}: no summary.json; run 'quantkit fleet score ... --out {self.path}' first")
        self.summary = read_json(self.path / "summary.json", "fleet scores summary")
        try:
            self.edges = Edges.from_dict(read_json(self.path / "edges.json", "fleet histogram edges"))
            self.primary: dict[str, Any] = dict(self.summary["primary"])
            self.cameras: dict[str, str] = {c: v["site"] for c, v in self.summary["cameras"].items()}
            self.shards = list(self.summary["shards"])
        except (KeyError, TypeError) as e:
            raise InputFileError(f"{self.path}/summary.json: field {e} missing; rerun 'quantkit fleet score'") from None

    @property
    def manifest_root(self) -> Path:
        """The folder the manifest's relative image URIs start from (stored relative to this scores folder; an
        absolute path, as older scores folders hold, is used as it is)."""
        return self.path / self.summary["manifest"]["root"]

    def camera_shards(self, camera: str) -> list[tuple[dict[str, Any], Summary]]:
        """``(identity, summary)`` of each of ``camera``'s shards, sorted by window.

        Raises:
            InputFileError: a shard summary listed in ``summary.json`` is missing (the folder was edited).
        """
        out = []
        for ident in sorted((s for s in self.shards if s["camera"] == camera), key=lambda s: s["window"]):
            p = shard_summary_path(self.path, ident["key"])
            if not p.is_file():
                raise InputFileError(f"{p}: shard summary listed in summary.json is missing; rerun 'quantkit fleet score'")
            doc = read_json(p, "shard summary")
            out.append((ident, Summary.from_dict(doc["summary"], self.edges)))
        return out

    def group(self, kind: str, name: str) -> Summary:
        """The rolled-up summary of a ``site`` or the ``fleet`` (``name`` ignored) or a ``camera``. A sketch the stored
        rollup left out (estimation mode: not the same bytes on every run) is merged again from its members."""
        if kind == "fleet":
            stored, members = self.summary["fleet"], [("site", s) for s in sorted(self.summary["sites"])]
        elif kind == "site":
            stored, members = self.summary["sites"][name], [("camera", c) for c in sorted(self.cameras) if self.cameras[c] == name]
        else:
            stored, members = self.summary["cameras"][name]["summary"], []
        out = Summary.from_dict(stored, self.edges)
        if set(out.hist) - set(out.kll):
            parts = [self.group(*m) for m in members] if members else [s for _, s in self.camera_shards(name)]
            merged = parts[0]
            for p in parts[1:]:
                merged = merged.merge(p)
            out.kll = {**merged.kll, **out.kll}
        return out

    def camera_rows(self, camera: str, columns: list[str] | None = None) -> Any:
        """``camera``'s rows as a pandas DataFrame sorted by capture time and URI (empty when it has none)."""
        ds = require("pyarrow.dataset", "fleet", "quantkit fleet")

        folder = self.path / "rows" / f"camera={urllib.parse.quote(camera, safe='')}"
        if not folder.is_dir():
            import pandas as pd

            return pd.DataFrame(columns=columns or [])
        cols = None if columns is None else list(dict.fromkeys([*columns, "captured_at", "uri"]))
        table = ds.dataset(folder, format="parquet", partitioning=ds.partitioning(flavor="hive")).to_table(columns=cols)
        return table.to_pandas().sort_values(["captured_at", "uri"], kind="stable").reset_index(drop=True)

    def __repr__(self) -> str:
        return f"ScoreStore({self.path}, {len(self.cameras)} cameras, {len(self.shards)} shards)"

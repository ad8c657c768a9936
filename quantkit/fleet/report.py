"""``quantkit fleet report``: one self-contained HTML page for quality leads, from a fleet check.

Verdict first; then the planted-truth score (demo only), cameras ranked (what to do, since when, why),
a camera x window status grid, per-site rollups, and a section per alerting camera: what changed
(statistics with their medians before and after), since when, example images (reference vs since the
change, lowest INT8 agreement first) and the agreement trend per window (inline SVG). Rendered with
Jinja2 (autoescaping on); images are embedded as base64 JPEG; no script, no external URL, so it opens
offline. Same inputs, same bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import logging
import os
from pathlib import Path
from typing import Any

from .._io import atomic_write_text
from ..errors import InputFileError
from ..report.glossary import TERMS
from .check import CameraCheck, FleetCheck
from .config import FleetReportConfig
from .decisions import primary_label
from .manifest import read_bytes, resolve_uri
from .store import ScoreStore

log = logging.getLogger(__name__)

STATUS_LABELS = {"reference": "reference window", "ok": "ok", "alert": "alert", "few-images": "too few images"}


def _thumbnail(uri: str, px: int) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(read_bytes(uri))) as im:
            im = im.convert("RGB")
            im.thumbnail((px, px))
            buf = io.BytesIO()
            im.save(buf, format="JPEG", quality=80, optimize=False, progressive=False)
    except Exception as e:  # noqa: BLE001 - a missing example image must not stop the report
        log.warning("%s: no thumbnail (%s)", uri, e)
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _examples(store: ScoreStore, cam: CameraCheck, cfg: FleetReportConfig) -> list[dict[str, Any]]:
    """Thumbnails: one reference image, then up to ``examples`` since the change (lowest agreement first)."""
    if cfg.examples == 0 or cam.since is None:
        return []
    rows = store.camera_rows(cam.camera, ["uri", "window", "agreement", "scored", "error"])
    rows = rows[rows["error"].isna()]
    ref_windows = [w.window for w in cam.windows if w.status == "reference"]
    ref = rows[rows["window"].isin(ref_windows[-1:])]
    after = rows[rows["window"] >= cam.since].copy()
    after["_a"] = after["agreement"].astype("Float64").fillna(2.0)
    picks = [("reference", r) for _, r in ref.head(1).iterrows()]
    picks += [("since the change", r) for _, r in after.sort_values(["_a", "captured_at", "uri"], kind="stable").head(cfg.examples).iterrows()]
    out = []
    for label, r in picks:
        src = _thumbnail(resolve_uri(str(r["uri"]), store.manifest_root), cfg.thumbnail_px)
        if src is not None:
            agreement = None if r["agreement"] is None or str(r["agreement"]) == "<NA>" else float(r["agreement"])
            out.append({"label": label, "src": src, "uri": str(r["uri"]), "when": r["captured_at"].isoformat()[:16].replace("T", " "),
                        "agreement": agreement})
    return out


def _trend(cam: CameraCheck, width: int = 560, height: int = 120) -> dict[str, Any]:
    """SVG geometry of the agreement per window (points, the reference level, the 'since' marker)."""
    ws = list(cam.windows)
    n = max(len(ws), 2)
    x = [round(20 + i * (width - 40) / (n - 1), 1) for i in range(len(ws))]
    y = lambda v: round(height - 15 - v * (height - 30), 1)  # noqa: E731 - agreement 0..1 -> pixels
    pts = [{"x": xi, "y": y(w.agreement), "v": w.agreement, "window": w.window[:10], "status": w.status}
           for xi, w in zip(x, ws) if w.agreement is not None]
    since_x = next((xi for xi, w in zip(x, ws) if w.window == cam.since), None)
    ref = cam.reference.get("agreement")
    return {"width": width, "height": height, "points": pts, "polyline": " ".join(f"{p['x']},{p['y']}" for p in pts),
            "ref_y": None if ref is None else y(ref), "since_x": since_x, "y0": y(0.0), "y1": y(1.0)}


def _grid(check: FleetCheck) -> dict[str, Any]:
    from ..drift import PLAIN_NAMES

    windows = sorted({w.window for c in check.cameras for w in c.windows})
    rows = []
    for c in sorted(check.cameras, key=lambda c: (c.site, c.camera)):
        by = {w.window: w for w in c.windows}
        cells = []
        for win in windows:
            w = by.get(win)
            status = "none" if w is None else ("since" if c.since == win else w.status)
            tip = "no images" if w is None else (f"{win[:10]}: {STATUS_LABELS.get(w.status, w.status)}, {w.images} images"
                                                 + (f"; {', '.join(w.evidence)}" if w.evidence else "")
                                                 + (f"; moved: {', '.join(PLAIN_NAMES.get(m.name, m.name) for m in w.moved[:4])}" if w.moved else ""))
            cells.append({"status": status, "tip": tip})
        rows.append({"camera": c.camera, "site": c.site, "status": c.status, "cells": cells})
    daily = all(w[11:19] == "00:00:00" for w in windows)
    return {"windows": [w[5:10] if daily else w[5:13].replace("T", " ") for w in windows], "rows": rows}


def render_report(check: FleetCheck, store: ScoreStore, config: FleetReportConfig | None = None) -> str:
    """The HTML page as a string (see the module docstring)."""
    import jinja2

    from ..drift import PLAIN_NAMES
    from ..drift.advice import ACTIONS

    cfg = config or FleetReportConfig()
    env = jinja2.Environment(loader=jinja2.PackageLoader("quantkit.fleet", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    ranked = [check.camera(c) for c in check.ranked]
    sections = [{"camera": c, "examples": _examples(store, c, cfg), "trend": _trend(c)} for c in ranked[:cfg.max_cameras]]
    return env.get_template("fleet_report.html.j2").render(
        check=check, ranked=ranked, sections=sections, grid=_grid(check), primary_label=primary_label(check.primary),
        status_labels=STATUS_LABELS, models=check.scores.get("models", {}), plain=PLAIN_NAMES, actions=ACTIONS, glossary=FLEET_TERMS)


FLEET_TERMS: tuple[tuple[str, str], ...] = (
    *((k, v) for k, v in TERMS if k in ("FP32", "INT8", "calibration set", "agreement with FP32", "drift")),
    ("window", "One camera's images of one period (a day here); each camera is compared window by window with its own first windows "
               "(its reference), not with the other cameras."),
    ("the green line", "The agreement with FP32 a site set must keep to be green in the shift report (report.min_agreement); a "
                       "camera whose agreement falls below it is treated as the shift report treats an amber or red set."),
    ("shadow / highlight brightness (p5, p95)", "The brightness below which the darkest 5% (above which the brightest 5%) of an "
                                                "image's pixels lie."),
    ("alert precision / recall (demo only)", "Of the cameras flagged, the share that carry a planted event (precision); of the "
                                             "planted events, the share flagged (recall). Only the demo fleet has planted events."),
)
"""The fleet report's glossary, shown where its words first appear (the shift report's entries for the shared words)."""


@dataclasses.dataclass(frozen=True)
class ReportResult:
    path: str
    bytes: int
    cameras: int
    alerting: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def write_fleet_report(check: str | os.PathLike[str] | FleetCheck, out: str | os.PathLike[str], config: FleetReportConfig | None = None) -> ReportResult:
    """Render the report of a fleet check (``check.json`` or the object) to ``out`` (an ``.html`` file), atomically.

    Raises:
        InputFileError: the check or its scores folder is missing or malformed, or ``out`` is a folder.
    """
    res = check if isinstance(check, FleetCheck) else FleetCheck.load(check)
    dest = Path(out)
    if dest.is_dir():
        raise InputFileError(f"{dest}: is a folder; --out takes the HTML file's path, e.g. {dest / 'index.html'}")
    html = render_report(res, ScoreStore(res.scores["path"]), config)
    atomic_write_text(dest, html)
    return ReportResult(str(dest), len(html.encode("utf-8")), len(res.cameras), len(res.ranked))

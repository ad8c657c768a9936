"""Figures and thumbnails for the shift report. Plot functions take report data and return a ``Figure``.

Figures are built with :class:`matplotlib.figure.Figure` (no pyplot state, never shown);
:func:`png_bytes` renders one to PNG. Thumbnails are small JPEGs with each model's detections drawn.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from .model import ModelReport, SiteReport

COLOURS = {"fp32": "#2b8a3e", "deployed": "#e8590c", "candidate": "#1c7ed6"}
"""Colour per model, shared by plots and thumbnails (FP32 green, deployed orange, candidate blue)."""


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    """Render ``fig`` to PNG bytes (deterministic metadata: no software/date tags)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def near_line(model: ModelReport, ax: Any = None) -> Figure:
    """Decisions near the line, one model: per site set and INT8 model (deployed, candidate), the share of FP32's
    decisions within one integer step of that model's threshold (a bar, labelled in percent), and the same share on
    the images its thresholds were bound on (a black tick: "when calibrated"). A bar well above its tick means more
    decisions can flip from a one-code change than at calibration. Sets without a measurement draw no bar.
    """
    from matplotlib.figure import Figure

    fig = ax.figure if ax is not None else Figure(figsize=(6.0, 2.8), layout="constrained")
    ax = ax or fig.subplots()
    names = [s.name for s in model.sites]
    x = np.arange(len(names))
    width = 0.38
    ticked = False
    for i, role in enumerate(("deployed", "candidate")):
        vals = [100 * s.near_line[role].share_1 if role in s.near_line else np.nan for s in model.sites]
        if all(np.isnan(vals)):
            continue
        pos = x + (i - 0.5) * width
        bars = ax.bar(pos, vals, width, label=role, color=COLOURS[role])
        ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.0f}%" for v in vals], fontsize=8)
        for p, s in zip(pos, model.sites):
            nl = s.near_line.get(role)
            if nl is not None and nl.baseline_1 is not None:
                ax.hlines(100 * nl.baseline_1, p - width / 2, p + width / 2, color="k", lw=2,
                          label=None if ticked else "when calibrated")
                ticked = True
    ax.set_xticks(x, names)
    top = max([100 * nl.share_1 for s in model.sites for nl in s.near_line.values()]
              + [100 * (nl.baseline_1 or 0.0) for s in model.sites for nl in s.near_line.values()] + [5.0])
    ax.set_ylim(0, top * 1.25)
    ax.set_ylabel("% of decisions")
    ax.set_title(f"{model.name}: decisions within one INT8 step of the line", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    return fig


def agreement(model: ModelReport, min_agreement: float) -> Figure:
    """Grouped bars: the primary agreement metric per site set for deployed and candidate, with the pass line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 2.8), layout="constrained")
    ax = fig.subplots()
    names = [s.name for s in model.sites]
    x = np.arange(len(names))
    for i, v in enumerate(("deployed", "candidate")):
        vals = [(s.variant(v).agreement.get(model.primary.name, np.nan) if s.variant(v) else np.nan) for s in model.sites]  # type: ignore[union-attr]
        bars = ax.bar(x + (i - 0.5) * 0.38, vals, 0.38, label=v, color=COLOURS[v])
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(min_agreement, color="k", ls="--", lw=1, label=f"pass ≥ {min_agreement:.2f}")
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel(model.primary.label)
    ax.set_title(model.name, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def drift_effects(sites: Sequence[SiteReport]) -> Figure:
    """Heat map of image-statistic drift: effect / threshold per site set and statistic (Wasserstein where present)."""
    from matplotlib.figure import Figure

    from ..artifacts.drift import PLAIN_NAMES

    sites = [s for s in sites if s.drift]
    stats = sorted({e.name for s in sites for e in s.drift.statistics})  # type: ignore[union-attr]
    fig = Figure(figsize=(6.0, 0.6 + 0.3 * max(len(stats), 1)), layout="constrained")
    ax = fig.subplots()
    if not sites or not stats:
        ax.text(0.5, 0.5, "no drift results", ha="center", va="center")
        ax.set_axis_off()
        return fig
    grid = np.full((len(stats), len(sites)), np.nan)
    for j, s in enumerate(sites):
        for e in s.drift.statistics:  # type: ignore[union-attr]
            if e.metric == "wasserstein" or np.isnan(grid[stats.index(e.name), j]):
                grid[stats.index(e.name), j] = e.effect / e.threshold if e.threshold > 0 else (10.0 if e.effect > 0 else 0.0)
    im = ax.imshow(np.clip(grid, 0, 3), cmap="RdYlGn_r", vmin=0, vmax=3, aspect="auto")
    for (r, c), val in np.ndenumerate(grid):
        if np.isfinite(val):
            ax.text(c, r, f"{val:.1f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(sites)), [s.name for s in sites])
    ax.set_yticks(range(len(stats)), [PLAIN_NAMES.get(n, n) for n in stats], fontsize=8)
    fig.colorbar(im, ax=ax, label="change / normal variation (>1 moved)")
    return fig


def thumbnail(image_path: Path, boxes: dict[str, Sequence[Sequence[Sequence[float]]]], max_side: int, quality: int = 70) -> bytes | None:
    """JPEG thumbnail (longest side ``max_side`` px) with each model's polygons drawn in its colour.

    ``boxes`` are ``{variant: [[[x, y], ...], ...]}`` in the image file's pixel coordinates. Returns
    ``None`` when the image cannot be read (the report shows the name instead).
    """
    import cv2

    from ..errors import InputFileError
    from ..imageio import load_image

    try:
        img = load_image(image_path)
    except InputFileError:
        return None
    h, w = img.shape[:2]
    s = min(1.0, max_side / max(h, w))
    small = cv2.resize(img, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA) if s < 1 else img.copy()
    for v in ("fp32", "deployed", "candidate"):
        colour = tuple(int(COLOURS[v][i : i + 2], 16) for i in (1, 3, 5))
        for poly in boxes.get(v, []):
            pts = np.round(np.asarray(poly, float) * s).astype(np.int32).reshape(-1, 1, 2)
            cv2.polylines(small, [pts], True, colour, 1 if v == "fp32" else 2)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(small, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    return buf.tobytes() if ok else None

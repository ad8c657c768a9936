"""Shift reports: what changed on each site set, why, and whether a recalibrated model may go to the line.

``make_report(inputs, config, out)`` reads evaluation, drift, calibration records and threshold sets
(:mod:`.build`), renders a self-contained HTML file, Markdown, DVC metrics and DVC plot data
(:mod:`.html`, figures in :mod:`.plots`) and writes them atomically.
"""

from __future__ import annotations

from pathlib import Path

from .build import (
    ReportConfig,
    ReportInputs,
    ShiftMetrics,
    ShiftReport,
    SiteReport,
    build_report,
)
from .html import render_html, render_markdown, write_report

__all__ = [
    "ReportConfig",
    "ReportInputs",
    "ShiftMetrics",
    "ShiftReport",
    "SiteReport",
    "build_report",
    "make_report",
    "render_html",
    "render_markdown",
    "write_report",
]


def make_report(inputs: ReportInputs, config: ReportConfig | None = None, out: str | Path = "reports") -> ShiftReport:
    """Build the report from ``inputs`` and write it under ``out`` (see :func:`write_report`).

    Raises:
        InputFileError: an input is missing or malformed; nothing is written then.
    """
    report = build_report(inputs, config)
    write_report(report, out)
    return report

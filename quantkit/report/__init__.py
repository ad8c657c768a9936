"""Shift reports: what changed on each site set, why, and whether a recalibrated model may go to the line.

``make_report(models, config, out)`` reads each model's evaluations, drift results, calibration records and
threshold sets (:mod:`.aggregate`, checked to belong together), decides per model (:mod:`.verdict`), and renders a
self-contained HTML file, Markdown, DVC metrics and DVC plot data (:mod:`.render`, figures in :mod:`.plots`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .aggregate import ModelInputs, build_model_report, build_report
from .config import ReportConfig
from .model import ModelReport, ShiftMetrics, ShiftReport, SiteReport
from .render import render_html, render_markdown, write_report

__all__ = ["ModelInputs", "ModelReport", "ReportConfig", "ShiftMetrics", "ShiftReport", "SiteReport", "build_model_report", "build_report",
           "make_report", "render_html", "render_markdown", "write_report"]


def make_report(models: Sequence[ModelInputs], config: ReportConfig | None = None, out: str | Path = "reports") -> ShiftReport:
    """Build the report of ``models`` and write it under ``out`` (see :func:`write_report`).

    Raises:
        InputFileError / BindingMismatchError: an input is missing, malformed, or belongs to other artifacts;
            nothing is written then.
    """
    report = build_report(models, config)
    write_report(report, out)
    return report

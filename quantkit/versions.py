"""Versions of the tools that produced an artifact, for records, export notes, reports and bundles."""

from __future__ import annotations

import platform
from importlib import metadata

CORE = ("onnx", "onnxruntime", "numpy", "quantkit")
"""The packages every quantkit artifact records."""


def tool_versions(packages: tuple[str, ...] = CORE, *, python: bool = False) -> dict[str, str]:
    """``{package: version}`` of installed distributions (``"not installed"`` when absent).

    Versions come from the installed distributions' metadata (``importlib.metadata``), so a package is
    not imported to ask it. ``python=True`` adds the interpreter version under ``"python"``.
    """
    out = {"python": platform.python_version()} if python else {}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out

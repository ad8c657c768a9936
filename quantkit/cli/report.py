"""``quantkit report``: write the shift report (HTML, Markdown, DVC metrics and plots) for one or more models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._overwrite import FileKind, read_json_object, text_with


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write the shift report (HTML, Markdown, DVC metrics and plots)",
        description=(
            "Aggregate each model's evaluations, drift checks, calibration records and threshold sets into "
            "OUT/shift_report.html (self-contained), OUT/shift_report.md, OUT/metrics.json and OUT/plots/*.csv. "
            "A model's work folder holds eval/<site>/, drift/<site>.json, quantize/{deployed,candidate}/ and "
            "thresholds/{deployed,candidate}.json (the pipeline's layout, e.g. work/models/ppocr_det)."
        ),
    )
    add_model_arguments(p)
    p.add_argument("--site-sets", type=Path, help="folder holding the site sets, for example thumbnails (default: site_sets)")
    p.add_argument("--params", type=Path, help="params.yaml; options from its 'report' section")
    p.add_argument("--out", type=Path, default=Path("reports"), help="output folder (default: reports)")
    p.add_argument("--json", action="store_true", help="print the report facts as JSON instead of the verdicts")
    p.set_defaults(func=run)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model NAME`` / ``--work-dir DIR`` (repeatable) and ``--work``, read by :func:`model_work_dirs` (report, measure)."""
    p.add_argument("--model", action="append", metavar="NAME",
                   help="a model under params 'models' (repeat for several): its work folder WORK/NAME; default: every model there")
    p.add_argument("--work-dir", type=Path, action="append", metavar="DIR",
                   help="a model's work folder itself, without params (repeatable), e.g. work/models/ppocr_det")
    p.add_argument("--work", type=Path, default=Path("work/models"),
                   help="the folder holding each params model's work folder (default: work/models, the pipeline's layout)")


def _is_report_metrics(path: Path) -> bool:
    """``metrics.json`` of a shift report: ``{model: {..., "verdict": {"candidate_acceptable": ...}}}``."""
    data = read_json_object(path)
    return data is not None and all(isinstance(v, dict) and "candidate_acceptable" in (v.get("verdict") or {}) for v in data.values())


def report_files() -> dict[str, FileKind]:
    """What the report may replace in --out: ``{file name: FileKind}`` (the files of an earlier report).
    Here rather than in :mod:`quantkit.report.render` until the writer checks them itself."""
    return {"shift_report.html": FileKind("shift report page", text_with("<!DOCTYPE html>", "machine/measurements.js")),
            "shift_report.md": FileKind("shift report (Markdown)", text_with("# ", "| site set | model | status |")),
            "metrics.json": FileKind("shift report metrics file", _is_report_metrics)}


def check_out(out: Path, inputs: list[Any]) -> None:
    """Refuse an --out whose report files (or ``plots/``) are not an earlier report's, or that is or holds an input,
    before anything is written (the report writes several files one after the other)."""
    from .._overwrite import check_not_input, check_not_output_dir, check_output_dir, check_output_file
    from ..errors import InputFileError

    if out.exists() and not out.is_dir():
        raise InputFileError(f"{out}: is a file; --out takes a folder (the report writes several files into it)")
    check_not_input(out, inputs)
    check_not_output_dir(out)
    for name, kind in report_files().items():
        check_output_file(out / name, kind)
    check_output_dir(out / "plots", None)


def model_work_dirs(models: list[str] | None, params: Path | None, work: Path, work_dirs: list[Path] | None = None) -> list[Path]:
    """The work folders a command reads: ``work_dirs`` when given; else ``work/<name>`` for each of ``models`` (names
    under the params file's ``models``) or, without names, for every model there (the main job's list, so a model added
    to or removed from params is in or out). ``--model`` is a model of params.yaml, as in every command.

    Raises:
        ConfigError: nothing to read, both ``--model`` and ``--work-dir``, a name that is not under ``models`` (a path
            given as a name says to use --work-dir), or the params' ``models`` missing or malformed.
    """
    from ..paramsfile import pipeline_models
    from ..errors import ConfigError

    if work_dirs:
        if models:
            raise ConfigError("--model names a params model, --work-dir a work folder: pass one of them")
        return list(work_dirs)
    if params is None:
        raise ConfigError("name the models: --params params.yaml (every model under 'models', or --model NAME), "
                          "or --work-dir WORK_DIR (repeatable)")
    known = pipeline_models(params)
    for name in models or ():
        if name not in known:
            hint = "; a work folder goes with --work-dir" if "/" in name else ""
            raise ConfigError(f"{params}: --model {name}: not a model under 'models' (it has {', '.join(known)}){hint}")
    return [work / name for name in (models or known)]


def run(args: argparse.Namespace) -> int:
    from ..config import config_from_params
    from ..errors import InputFileError
    from ..paramsfile import targets
    from ..report import ModelInputs, ReportConfig, make_report

    args.model = model_work_dirs(args.model, args.params, args.work, args.work_dir)
    check_out(args.out, [*args.model, args.site_sets, args.params])
    for w in args.model:
        if not w.is_dir():
            raise InputFileError(f"{w}: model work folder not found; pass the folder holding eval/, quantize/ and thresholds/ (e.g. work/models/ppocr_det)")
    cfg = config_from_params(ReportConfig, args.params, "report")
    runtimes = tuple(targets(args.params) or ())
    report = make_report([ModelInputs.from_work_dir(w, site_sets=args.site_sets, targets=runtimes,
                                                    measurements=args.out / "machine" / Path(w).name / "measurements.json")
                          for w in args.model], cfg, args.out)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return 0
    lines = []
    for m in report.models:
        lines += [f"{m.name}: {m.label.upper()}", *(f"  {v}" for v in m.verdict)]
        for s in m.sites:
            lines.append(f"  {s.name}: " + ", ".join(f"{x.variant} {x.status} {m.primary.name} {x.agreement.get(m.primary.name, float('nan')):.2f}"
                                                     for x in s.metrics if x.variant in ("deployed", "candidate")))
    lines.append(f"written: {args.out / 'shift_report.html'}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0

"""Render a :class:`ShiftReport` as self-contained HTML (Jinja2, autoescaped), Markdown, DVC metrics and plots.

The HTML embeds every figure as a base64 PNG and every thumbnail as a base64 JPEG, with inline CSS: it opens
offline and is byte-identical for the same inputs. Machine-dependent measurements (latency) are not in it: a
small script fills the "Speed on this machine" section from ``machine/measurements.js`` beside the report when
that file exists (written by ``quantkit measure``, :mod:`quantkit.report.measure`). :func:`write_report` renders everything in memory first,
then writes each file atomically (``plots/`` is swapped in whole), so a failure leaves the previous report.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

from markupsafe import Markup

from .._io import atomic_output_dir, atomic_write_json, atomic_write_text, canonical_json
from ..versions import tool_versions
from . import candidate, near_line, plots
from .commands import COPY_JS, command_blocks
from .glossary import glossary
from .model import ModelReport, ShiftReport, is_fragile
from .verdict import drift_label, plural

log = logging.getLogger(__name__)

TASK_WORDS = {"db_text": "text detection (DB probability map)", "box_detector": "object detection (boxes)",
              "classifier": "classification", "ctc_text": "text recognition (CTC)", "segmentation": "binary segmentation"}

SPEED_JS = """
(function () {
  var parts = window.QUANTKIT_MEASUREMENTS || [], box = document.getElementById("speed");
  if (!box) { return; }
  if (!Array.isArray(parts)) { parts = [parts]; }
  var esc = function (s) { return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); };
  var x = function (v) { return v ? v.toFixed(2) + "x" : "–"; };
  var latency = [], nodes = [], skipped = {}, machine = "", method = "";
  parts.forEach(function (m) {
    latency = latency.concat(m.latency || []);
    nodes = nodes.concat(m.node_time || []);
    Object.keys(m.skipped || {}).forEach(function (k) { skipped[k] = m.skipped[k]; });
    machine = machine || m.machine || ""; method = method || m.method || "";
  });
  var timed = {};
  latency.forEach(function (r) { timed[r.model] = true; });
  var missing = (window.QUANTKIT_REPORT_MODELS || []).filter(function (n) { return !timed[n]; });
  var notMeasured = missing.length ? "<p class='missing'>Not measured on this machine: " + missing.map(function (n) {
    return esc(n) + " (run <code>dvc repro measure@" + esc(n) + "</code>)"; }).join(", ") + ".</p>" : "";
  if (!latency.length) { box.innerHTML = notMeasured || box.innerHTML; return; }
  var rows = latency.map(function (r) {
    var slow = r.vs_fp32 && r.vs_fp32 < 1, belowBest = r.vs_fp32 && r.vs_best_float && r.vs_best_float < 1;
    var placed = r.placement ? " <small>(" + esc(r.placement) + " placement)</small>" : "";
    return "<tr" + (slow || belowBest ? " class='slow'" : "") + "><td class='l'>" + esc(r.model) + "</td><td class='l'>" + esc(r.variant) + placed + "</td><td class='l'>" +
      esc(r.runtime) + "</td><td>" + esc(r.threads) + "</td><td>" + r.median_ms.toFixed(1) + "</td><td>" + x(r.vs_fp32) + (slow ? " (slower than FP32)" : "") +
      "</td><td>" + (r.vs_fp32 ? x(r.vs_best_float) + (belowBest ? " (slower than " + esc(r.best_float) + ": do not quantize for this runtime)" : "") : "–") +
      "</td><td>" + x(r.vs_deployed) + "</td></tr>";
  });
  var skip = Object.keys(skipped).map(function (k) { return esc(k) + " (" + esc(skipped[k]) + ")"; });
  box.innerHTML = "<p>Measured on " + esc(machine || "this machine") + " (" + esc(method) + "). These figures change with the machine." +
    (skip.length ? " Not timed: " + skip.join(", ") + "." : "") + "</p>" + notMeasured +
    "<table id='speed-table'><tr><th class='l'>model</th><th class='l'>variant</th><th class='l'>runtime</th><th>threads</th><th>median ms</th>" +
    "<th>speed-up vs FP32</th><th>vs the runtime's best float run</th><th>candidate vs deployed</th></tr>" + rows.join("") + "</table>" +
    nodeTable(nodes);
  function nodeTable(list) {
    if (!list.length) { return ""; }
    var body = list.map(function (p) {
      var kinds = (p.by_kind || []).slice(0, 4).map(function (k) { return esc(k.type) + " " + esc(k.precision) + " " + k.ms.toFixed(1); }).join(", ");
      return "<tr><td class='l'>" + esc(p.model) + "</td><td class='l'>" + esc(p.variant) + (p.placement ? " <small>(" + esc(p.placement) + ")</small>" : "") +
        "</td><td class='l'>" + esc(p.runtime) + "@" + esc(p.threads) + "</td><td>" + p.total_ms.toFixed(1) + "</td><td>" +
        (100 * p.integer_kernel_share).toFixed(0) + "%</td><td>" + esc(p.conversions) + " (" + p.conversion_ms.toFixed(1) + " ms)</td><td class='l'>" + kinds + "</td></tr>";
    });
    return "<details><summary>Where the time went, per node (for engineers)</summary><p>Where the time went, per node, as each runtime reports what it executed (one profiled inference; layer times " +
      "add up to more than the latency above when the runtime's profiler adds overhead). Integer kernels: convolutions and matrix " +
      "products that ran in int8/uint8. A standalone Q/DQ node is a conversion between float and integer that no kernel absorbed.</p>" +
      "<table id='node-table'><tr><th class='l'>model</th><th class='l'>variant</th><th class='l'>runtime@threads</th><th>layer ms</th>" +
      "<th>in integer Conv/MatMul kernels</th><th>standalone Q/DQ nodes</th><th class='l'>slowest layer kinds (type, precision, ms)</th></tr>" +
      body.join("") + "</table></details>";
  }
})();
"""


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _img(data: bytes | None, mime: str, alt: str) -> Markup:
    if not data:
        return Markup("<i>image not available</i>")
    return Markup('<img alt="{}" src="data:{};base64,{}">').format(alt, mime, base64.b64encode(data).decode("ascii"))


def _png(fig: Any, alt: str) -> Markup:
    return _img(plots.png_bytes(fig), "image/png", alt)


def _variants(m: ModelReport) -> list[str]:
    order = ("deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds")
    return [v for v in order if any(s.variant(v) for s in m.sites)]


def _figures(m: ModelReport, report: ShiftReport) -> dict[str, Markup]:
    figs = {"agreement": _png(plots.agreement(m, report.config.min_agreement), f"{m.name}: {m.primary.label} per site set"),
            "drift": _png(plots.drift_effects(m.sites), f"{m.name}: image statistic changes")}
    if any(s.near_line for s in m.sites):
        figs["near_line"] = _png(plots.near_line(m), f"{m.name}: share of decisions within one INT8 step of the line per site set")
    return figs


def _thumbs(m: ModelReport, px: int) -> dict[str, list[Markup]]:
    out = {}
    for s in m.sites:
        out[s.name] = [_img(plots.thumbnail(s.images_dir / ex.image, ex.polygons, px) if s.images_dir else None, "image/jpeg", ex.image)
                       for ex in s.examples]
    return out


def verdict_commands(m: ModelReport) -> tuple[str, ...]:
    """The commands that carry out the verdict (shown as code blocks under it): the fallback candidate's bundle and
    verify commands, or the pipeline's for a recalibrated candidate; none unless the decision is to deploy it (switch, or
    switch on a runtime: :data:`quantkit.decision.DEPLOYS`)."""
    if m.choice is None or not m.choice.deploys or m.shipped:
        return ()
    return m.deploy or ("dvc repro", "dvc metrics diff")


def render_html(report: ShiftReport) -> str:
    """The report as one self-contained HTML document (UTF-8 text), deterministic for the same report."""
    from importlib import resources

    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("quantkit.report", "templates"), autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    css = resources.files("quantkit.report").joinpath("templates/style.css").read_text(encoding="utf-8")
    cfg = report.config
    ctx = {
        "report": report, "config": cfg, "css": Markup(css), "colours": plots.COLOURS, "speed_js": Markup(SPEED_JS),
        "task_words": {m.name: TASK_WORDS.get(m.task, m.task) for m in report.models},
        "variants": {m.name: _variants(m) for m in report.models},
        "rules": {m.name: cfg.rule(m.primary.label, m.item) for m in report.models},
        "items": {m.name: plural(m.item) for m in report.models},
        "drift_labels": {m.name: {s.name: drift_label(s) for s in m.sites} for m in report.models},
        "agreement_metrics": {m.name: [x for x in m.metrics if x.kind == "agreement"][:2] for m in report.models},
        "accuracy_metrics": {m.name: [x for x in m.metrics if x.kind == "accuracy"][:3] for m in report.models},
        "more_metrics": {m.name: [x for x in m.metrics if x.kind == "agreement" and x.name != m.primary.name] for m in report.models},
        "drift_metrics": sorted({e.metric for m in report.models for s in m.sites if s.drift for e in s.drift.statistics}),
        "effects": {m.name: {s.name: {(e.name, e.metric): e for e in (s.drift.statistics if s.drift else ())} for s in m.sites} for m in report.models},
        "figures": {m.name: _figures(m, report) for m in report.models},
        "near_line": {m.name: {s.name: [(role, near_line.sentence(nl, role, cfg), is_fragile(nl, cfg)) for role, nl in near_line.ordered(s.near_line)]
                               for s in m.sites} for m in report.models},
        "near_line_warnings": {m.name: near_line.warnings(m, cfg) for m in report.models},
        "thumbs": {m.name: _thumbs(m, cfg.thumbnail_px) for m in report.models},
        "commands": {m.name: command_blocks(verdict_commands(m)) for m in report.models},
        "glossary": glossary(report.models), "copy_js": Markup(COPY_JS),
        "fallback_html": {m.name: candidate.html(m, cfg.candidate_latency) for m in report.models if m.fallback is not None},
        "primary_only": {m.name: [x for x in m.metrics if x.name == m.primary.name] for m in report.models},
        "choice_sentences": {m.name: [choice_sentence(c) for c in m.recipes] for m in report.models},
        "provenance": {m.name: canonical_json(m.provenance) for m in report.models},
        "versions": canonical_json(tool_versions(("quantkit", "onnx", "onnxruntime", "numpy", "pandas", "scipy", "matplotlib"), python=True)),
    }
    return env.get_template("shift_report.html.j2").render(**ctx)


def render_markdown(report: ShiftReport) -> str:
    """The same verdicts and per-site figures as Markdown."""
    lines = [f"# {report.title}", ""]
    for m in report.models:
        lines += [f"## {m.name}: **{m.label.upper()}**", ""] + [f"- {v}" for v in m.verdict] + [f"- Warning: {w}" for w in near_line.warnings(m, report.config)] + [""]
        if verdict_commands(m):
            lines += ["```bash", *verdict_commands(m), "```", ""]
        lines += [f"| site set | model | status | {m.primary.label} | {plural(m.item)} / image | Δ vs FP32 | what changed in the images |",
                  "|---|---|---|---|---|---|---|"]
        for s in m.sites:
            for x in s.metrics:
                lines.append(f"| {s.name} | {x.variant} | {x.status if x.variant != 'fp32' else '–'} | "
                             f"{_fmt(x.agreement.get(m.primary.name))} | {x.detections_per_image:.2f} | {x.detection_change:+.0%} | "
                             f"{drift_label(s)[0] if x.variant == 'deployed' else ''} |")
        near = [f"- {s.name}: {near_line.sentence(nl, role, report.config)}" for s in m.sites for role, nl in near_line.ordered(s.near_line)]
        if near:
            lines += ["", "Decisions near the line (within one INT8 step of the threshold):", "", *near]
        lines += ["", "| threshold | FP32 | deployed | deployed int | candidate | candidate int |", "|---|---|---|---|---|---|"]
        for t in m.thresholds:
            lines.append(f"| {t['name']} | " + " | ".join("–" if t[k] is None else str(t[k]) for k in ("fp32", "deployed", "deployed_int", "candidate", "candidate_int")) + " |")
        lines.append("")
        lines += _recipes_markdown(m)
        lines += candidate.markdown(m, report.config.candidate_latency)
    return "\n".join(lines)


def _recipes_markdown(m: Any) -> list[str]:
    """How each target runtime's INT8 file was chosen (the HTML report's engineers' fold): every recipe's agreement with its
    interval and speed against the runtime's best float run, the one deployed and why, what was not built."""
    if not m.recipes:
        return []
    lines = [f"### How {m.name}'s INT8 file for each runtime was chosen", "",
             f"| runtime | recipe | {m.primary.label} [95% CI] | vs best float run | deployed |", "|---|---|---|---|---|"]
    for c in m.recipes:
        for f in c["figures"]:
            ci = f" [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f.get("ci") else ""
            lines.append(f"| {c['runtime']} | {f['name']} | {f['agreement']:.3f}{ci} | {f['vs_best_float']:.2f}x | {'yes' if f['name'] == c['chosen'] else ''} |")
        lines += [f"| {c['runtime']} | {k['recipe']} | not built: {k['why']} | | |" for k in c.get("skipped", [])]
    return [*lines, "", *(f"- {choice_sentence(c)}" for c in m.recipes), ""]


def choice_sentence(c: dict[str, Any]) -> str:
    """One runtime's choice in words (``choice.json``): its reason, and where the fallback recipe was built, from what."""
    fb = c.get("fallback")
    extra = (f" The fallback started from {fb['from']} and kept {fb['kept_in_float']} nodes in float to reach {fb['target']:.3f} on "
             f"{fb['search_images']} calibration images.") if fb else ""
    return f"{c['runtime']}: {c['reason']}.{extra}"


def plot_tables(report: ShiftReport) -> dict[str, str]:
    """DVC plot data: ``{file name: CSV text}`` (agreement per model x site x variant, score CDFs, and ``near_line.csv``:
    decisions near the line per model x site x role, shares 0..1, when any evaluation counted them)."""
    import numpy as np

    files: dict[str, str] = {}
    rows = ["model_site_variant,agreement,detections_per_image,alarm_rate"]
    for m in report.models:
        for s in m.sites:
            for x in s.metrics:
                rows.append(f"{m.name}/{s.name}/{x.variant},{x.agreement.get(m.primary.name, 1.0):.6g},{x.detections_per_image:.6g},{x.alarm_rate:.6g}")
            hist = s.score_hist or {}
            edges = np.asarray(hist.get("bin_edges", []), float)
            for v, counts in sorted((hist.get("counts") or {}).items()):
                c = np.asarray(counts, float)
                if "@" in v or c.sum() <= 0 or edges.size != c.size + 1:
                    continue
                cdf = np.cumsum(c) / c.sum()
                files[f"score_cdf-{m.name}-{s.name}-{v}.csv"] = "score,cdf\n" + "".join(f"{a:.6g},{b:.6g}\n" for a, b in zip(edges[1:], cdf))
    files["agreement.csv"] = "\n".join(rows) + "\n"
    near = ["model_site_role,within_1_step,within_k_steps,k,baseline_within_1_step,decisions"]
    for m in report.models:
        for s in m.sites:
            for role, nl in sorted(s.near_line.items()):
                base = "" if nl.baseline_1 is None else f"{nl.baseline_1:.6g}"
                near.append(f"{m.name}/{s.name}/{role},{nl.share_1:.6g},{nl.share_k:.6g},{nl.k},{base},{nl.decisions}")
    if len(near) > 1:
        files["near_line.csv"] = "\n".join(near) + "\n"
    return files


def _check_out(out: Path) -> None:
    from ..errors import InputFileError

    if out.exists() and not out.is_dir():
        raise InputFileError(f"{out}: is a file; the report's output is a folder, choose another --out")
    for name in ("shift_report.html", "shift_report.md", "metrics.json"):
        if (out / name).is_dir():
            raise InputFileError(f"{out / name}: is a folder where the report writes a file; remove it or choose another --out")
    if (out / "plots").exists() and not (out / "plots").is_dir():
        raise InputFileError(f"{out / 'plots'}: is a file where the report writes a folder; remove it or choose another --out")


def write_report(report: ShiftReport, out: str | Path) -> dict[str, Path]:
    """Render and write ``shift_report.html``, ``shift_report.md``, ``metrics.json`` and ``plots/*.csv``.

    Everything is rendered before the first write; each file is replaced atomically and ``plots/`` is swapped
    in whole. Returns ``{"html", "markdown", "metrics", "plots"}`` paths.
    """
    out = Path(out)
    _check_out(out)
    html_text = render_html(report)
    md_text = render_markdown(report)
    tables = plot_tables(report)
    with atomic_output_dir(out / "plots") as tmp:
        for name, text in tables.items():
            (tmp / name).write_text(text, encoding="utf-8")
    paths = {"html": atomic_write_text(out / "shift_report.html", html_text), "markdown": atomic_write_text(out / "shift_report.md", md_text),
             "metrics": atomic_write_json(out / "metrics.json", report.metrics_dict()), "plots": out / "plots"}
    log.info("report written to %s (%d bytes HTML)", out, len(html_text.encode("utf-8")))
    return paths

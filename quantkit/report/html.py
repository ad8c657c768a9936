"""Render a :class:`~quantkit.report.build.ShiftReport` as self-contained HTML, Markdown, DVC metrics and plots.

The HTML embeds every figure as a base64 PNG and every thumbnail as a base64 JPEG, with inline CSS
(``style.css`` and ``template.html`` ship as package data): no external URL, no script, so it opens
offline. :func:`write_report` renders everything in memory first and then writes each file atomically
(the ``plots/`` folder is swapped in whole), so a failure leaves the previous report intact.
"""

from __future__ import annotations

import base64
import html
import logging
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from .._io import (
    atomic_output_dir,
    atomic_write_json,
    atomic_write_text,
    canonical_json,
)
from . import plots
from .build import INT8_VARIANTS, ShiftReport, drift_label

log = logging.getLogger(__name__)

METRIC_COLUMNS = (
    ("pixel_iou_vs_fp32", "pixel IoU vs FP32", "{:.3f}"),
    ("box_f1_vs_fp32", "box F1 vs FP32", "{:.3f}"),
    ("detections_per_image", "detections / image", "{:.2f}"),
    ("alarm_rate_change", "Δ detections vs FP32", "{:+.0%}"),
    ("alarm_rate", "images with detections", "{:.0%}"),
    ("precision", "precision", "{:.3f}"),
    ("recall", "recall", "{:.3f}"),
    ("f1", "F1", "{:.3f}"),
    ("score_psi", "score PSI", "{:.3f}"),
    ("score_ks", "score KS", "{:.3f}"),
    ("score_wasserstein", "score W1", "{:.4f}"),
    ("latency_ms", "latency ms (this machine; not in metrics.json)", "{:.1f}"),
)


def _e(x: Any) -> str:
    return html.escape(str(x))


def _fmt(v: Any, fmt: str) -> str:
    return "–" if v is None else fmt.format(v)


def _img(data: bytes, mime: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:{mime};base64,{base64.b64encode(data).decode("ascii")}">'


def _alerts(report: ShiftReport) -> dict[str, float]:
    c = report.config
    return {"score_psi": c.score_psi_alert, "score_ks": c.score_ks_alert, "score_wasserstein": c.score_wasserstein_alert}


def _matrix(report: ShiftReport) -> str:
    variants = [v for v in ("deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds") if any(s.variant(v) for s in report.sites)]
    rows = ['<table class="matrix"><tr><th class="l">site set</th>' + "".join(f"<th>{_e(v)}</th>" for v in variants) + "<th>drift</th></tr>"]
    for s in report.sites:
        cells = []
        for v in variants:
            m = s.variant(v)
            cells.append("<td>–</td>" if m is None else f'<td class="{m.status}">{m.status.upper()}<br>IoU {m.pixel_iou_vs_fp32:.2f} · {m.alarm_rate_change:+.0%} det.</td>')
        drift, css = drift_label(s)
        cls = f' class="{css}"' if css else ""
        rows.append(f'<tr><td class="l">{_e(s.name)}</td>{"".join(cells)}<td{cls}>{_e(drift)}</td></tr>')
    return "\n".join(rows) + "</table>"


def _metrics_table(site: Any, alerts: dict[str, float]) -> str:
    head = '<tr><th class="l">model</th>' + "".join(f"<th>{_e(label)}</th>" for _, label, _ in METRIC_COLUMNS) + "</tr>"
    body = []
    for m in site.metrics:
        d = m.to_dict()
        cells = []
        for key, _, fmt in METRIC_COLUMNS:
            v = d[key]
            cls = ' class="alert"' if key in alerts and v is not None and v > alerts[key] else ""
            cells.append(f"<td{cls}>{_fmt(v, fmt)}</td>")
        body.append(f'<tr><td class="l {m.status if m.variant != "fp32" else ""}">{_e(m.variant)}</td>{"".join(cells)}</tr>')
    return f"<table>{head}{''.join(body)}</table>"


def _effect_cell(e: dict[str, Any] | None) -> str:
    if e is None:
        return "<td>–</td>"
    cls = ' class="alert"' if e["moved"] else ""
    return f"<td{cls}>{e['effect']:.3g} ({e['threshold']:.3g})</td>"


def _change(c: dict[str, Any]) -> str:
    """Relative change of the medians, or "–" where it is not defined (calibration median 0 or absent)."""
    cm, rel = c.get("calibration_median"), c.get("relative_change")
    return "–" if not cm or rel is None else f"{100 * rel:+.0f}%"


def _drift_html(site: Any) -> str:
    drift = site.drift
    if not drift:
        return "<p>No drift result for this site set.</p>"
    label, _ = drift_label(site)
    head = {"recalibrate": "Images changed and the deployed model is affected: recalibrate",
            "changed — model unaffected": "Images changed, but the deployed model still agrees with FP32 (drift check alone would recommend recalibrating)",
            "stable": "Images stable: no recalibration needed"}.get(label, label)
    out = [f"<p><b>{_e(head)}</b>: " + "; ".join(_e(r) for r in drift.get("reasons", [])) + "</p>"]
    effects: dict[str, dict[str, Any]] = {}
    for e in drift.get("statistics", []):
        effects.setdefault(e["name"], {})[e["metric"]] = e
    metrics = sorted({m for d in effects.values() for m in d})
    rows = ['<table><tr><th class="l">image statistic</th><th>calibration median</th><th>site median</th><th>change</th>'
            + "".join(f"<th>{_e(m)} (threshold)</th>" for m in metrics) + "</tr>"]
    changes = {c["name"]: c for c in drift.get("changes", [])}
    order = sorted(effects, key=lambda n: (not changes.get(n, {}).get("moved", False), -changes.get(n, {}).get("separation", 0.0), n))
    for name in order:
        c = changes.get(name, {})
        cls = ' class="moved"' if c.get("moved") else ""
        cells = "".join(_effect_cell(effects[name].get(m)) for m in metrics)
        rows.append(f'<tr><td class="l"{cls}>{_e(name)}</td><td>{c.get("calibration_median", float("nan")):.4g}</td><td>{c.get("site_median", float("nan")):.4g}</td>'
                    f'<td>{_change(c)}</td>{cells}</tr>')
    out.append("".join(rows) + "</table>")
    clip = drift.get("clipping")
    if clip:
        worst = ", ".join(f"{_e(w['tensor'])} {100 * w['rate']:.2f}%" for w in clip.get("worst", [])[:3])
        out.append(f'<p>Activation clipping of the deployed INT8 model: <span class="{"alert" if clip["moved"] else ""}">{100 * clip["rate"]:.3f}%</span> of values '
                   f"vs {100 * clip['baseline']:.3f}% on calibration images (threshold {100 * clip['threshold']:.3f}%). Worst tensors: {worst or '–'}.</p>")
    return "\n".join(out)


def _examples_html(site: Any, cfg: Any) -> str:
    if not site.examples:
        return ""
    figs = []
    for ex in site.examples:
        caption = _e(ex["image"]) + "<br>" + " · ".join(f"{_e(v)} IoU {x:.2f}" for v, x in ex["iou"].items() if v in INT8_VARIANTS)
        data = plots.thumbnail(site.images_dir / ex["image"], ex["boxes"], cfg.thumbnail_px) if site.images_dir else None
        img = _img(data, "image/jpeg", ex["image"]) if data else "<i>image not available</i>"
        figs.append(f"<figure>{img}<figcaption>{caption}</figcaption></figure>")
    legend = '<p class="legend">Boxes: ' + "".join(f'<span style="color:{c}">{v}</span>' for v, c in plots.COLOURS.items()) + "</p>"
    return f'<h3>Where the models disagree most</h3>{legend}<div class="thumbs">{"".join(figs)}</div>'


def render_html(report: ShiftReport) -> str:
    """The report as one self-contained HTML document (UTF-8 text)."""
    from matplotlib.figure import Figure  # noqa: F401  (fail early when matplotlib is missing)

    cfg = report.config
    alerts = _alerts(report)
    cls = report.decision.replace(" ", "-")
    parts = [f"<h1>{_e(report.title)}</h1>",
             f'<div class="verdict {cls}"><p><span class="decision">{_e(report.decision)}</span></p>'
             + f'<p class="headline">{_e(report.verdict[0])}</p>' + "".join(f"<p>{_e(line)}</p>" for line in report.verdict[1:])
             + f'<p class="rule">{_e(report.rule)}</p></div>',
             "<h2>At a glance</h2>", _matrix(report),
             '<div class="figs">' + _img(plots.png_bytes(plots.agreement(report)), "image/png", "pixel IoU vs FP32 per site set")
             + _img(plots.png_bytes(plots.drift_effects(report)), "image/png", "image statistic drift") + "</div>"]
    thresh = next((t["fp32"] for t in report.thresholds if t["name"] == "thresh" and isinstance(t["fp32"], (int, float))), None)
    for s in report.sites:
        parts.append(f"<h2>Site set {_e(s.name)}</h2>")
        parts.append(_metrics_table(s, alerts))
        parts.append(f'<p class="rule">Score distance alerts vs FP32: PSI &gt; {cfg.score_psi_alert:g} (0.1/0.25 rule of thumb, Siddiqi 2006), '
                     f"KS &gt; {cfg.score_ks_alert:g}, W1 &gt; {cfg.score_wasserstein_alert:g}.</p>")
        parts.append('<div class="figs">' + _img(plots.png_bytes(plots.score_cdf(s, threshold=thresh)), "image/png", f"{s.name} score distribution") + "</div>")
        parts.append("<h3>What changed in the images</h3>" + _drift_html(s))
        parts.append(_examples_html(s, cfg))
    parts.append("<h2>Thresholds, old vs new</h2>" + _threshold_html(report))
    parts.append("<h2>Tensors whose scales moved most</h2>" + _scales_html(report))
    parts.append("<h2>Provenance</h2><pre class=\"mono\">" + _e(canonical_json(report.provenance)) + "</pre>")
    template = Template(resources.files("quantkit.report").joinpath("template.html").read_text(encoding="utf-8"))
    css = resources.files("quantkit.report").joinpath("style.css").read_text(encoding="utf-8")
    return template.substitute(title=_e(report.title), css=css, body="\n".join(parts))


def _threshold_html(report: ShiftReport) -> str:
    if not report.thresholds:
        return "<p>No thresholds.</p>"
    rows = ['<table><tr><th class="l">threshold</th><th>FP32</th><th>deployed</th><th>deployed (integer)</th><th>candidate</th><th>candidate (integer)</th><th class="l">tensor / dtype / test</th></tr>']
    for t in report.thresholds:
        f = lambda v: "–" if v is None else (f"{v:.4g}" if isinstance(v, float) else _e(v))
        rows.append(f'<tr><td class="l">{_e(t["name"])}</td><td>{f(t["fp32"])}</td><td>{f(t["deployed"])}</td><td>{f(t["deployed_int"])}</td>'
                    f'<td>{f(t["candidate"])}</td><td>{f(t["candidate_int"])}</td><td class="l">{_e(t["tensor"])} {_e(t["dtype"])} {_e(t.get("comparison", ""))}</td></tr>')
    return "".join(rows) + "</table>"


def _scales_html(report: ShiftReport) -> str:
    if not report.scale_moves:
        return "<p>No candidate record to compare.</p>"
    rows = ['<table><tr><th class="l">tensor</th><th class="l">role</th><th>deployed scale</th><th>candidate scale</th><th>ratio</th></tr>']
    for r in report.scale_moves:
        rows.append(f'<tr><td class="l mono">{_e(r["tensor"])}</td><td class="l">{_e(r["role"])}</td><td>{r["deployed_scale"]:.4g}</td><td>{r["candidate_scale"]:.4g}</td><td>{r["ratio"]:.3f}</td></tr>')
    return "".join(rows) + "</table>"


def render_markdown(report: ShiftReport) -> str:
    """The same facts as Markdown (verdict, summary matrix, per-site metrics, thresholds, scales)."""
    lines = [f"# {report.title}", "", f"**{report.decision.upper()}**", ""]
    lines += [f"- {v}" for v in report.verdict] + ["", f"_{report.rule}_", "", "## At a glance", ""]
    lines += ["| site set | model | status | pixel IoU vs FP32 | detections / image | Δ vs FP32 | precision | recall | score PSI |", "|---|---|---|---|---|---|---|---|---|"]
    for s in report.sites:
        for m in s.metrics:
            lines.append(f"| {s.name} | {m.variant} | {m.status if m.variant != 'fp32' else '–'} | {m.pixel_iou_vs_fp32:.3f} | {m.detections_per_image:.2f} | "
                         f"{m.alarm_rate_change:+.0%} | {_fmt(m.precision, '{:.3f}')} | {_fmt(m.recall, '{:.3f}')} | {_fmt(m.score_psi, '{:.3f}')} |")
    lines += ["", "## What changed in the images", ""]
    for s in report.sites:
        reasons = "; ".join((s.drift or {}).get("reasons", [])) or "no drift result"
        flag = drift_label(s)[0]
        lines.append(f"- **{s.name}** ({flag}): {reasons}")
    lines += ["", "## Thresholds, old vs new", "", "| threshold | FP32 | deployed | deployed int | candidate | candidate int |", "|---|---|---|---|---|---|"]
    for t in report.thresholds:
        cells = ["–" if t[k] is None else str(t[k]) for k in ("fp32", "deployed", "deployed_int", "candidate", "candidate_int")]
        lines.append(f"| {t['name']} | " + " | ".join(cells) + " |")
    lines += ["", "## Tensors whose scales moved most", "", "| tensor | deployed scale | candidate scale | ratio |", "|---|---|---|---|"]
    for r in report.scale_moves:
        lines.append(f"| `{r['tensor']}` | {r['deployed_scale']:.4g} | {r['candidate_scale']:.4g} | {r['ratio']:.3f} |")
    lines += ["", "## Provenance", "", "```json", canonical_json(report.provenance).rstrip(), "```", ""]
    return "\n".join(lines)


def plot_tables(report: ShiftReport) -> dict[str, str]:
    """DVC plot data: ``{file name: CSV text}`` (score CDF per site x model, agreement/alarm rate per site x model)."""
    import numpy as np

    files: dict[str, str] = {}
    rows = ["site_model,pixel_iou_vs_fp32,detections_per_image,alarm_rate"]
    for s in report.sites:
        for m in s.metrics:
            rows.append(f"{s.name}/{m.variant},{m.pixel_iou_vs_fp32:.6g},{m.detections_per_image:.6g},{m.alarm_rate:.6g}")
        hist = s.score_hist or {}
        edges = np.asarray(hist.get("bin_edges", []), float)
        for v, counts in sorted((hist.get("counts") or {}).items()):
            c = np.asarray(counts, float)
            if "@" in v or c.sum() <= 0 or edges.size != c.size + 1:
                continue
            cdf = np.cumsum(c) / c.sum()
            files[f"score_cdf-{s.name}-{v}.csv"] = "score,cdf\n" + "".join(f"{x:.6g},{y:.6g}\n" for x, y in zip(edges[1:], cdf))
    files["agreement.csv"] = "\n".join(rows) + "\n"
    return files


def _check_out(out: Path) -> None:
    """Refuse, before writing anything, an output folder that is a file or holds a folder where a file goes.

    Raises:
        InputFileError: one line naming the path.
    """
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

    Everything is rendered before the first write; each file is replaced atomically and ``plots/`` is
    swapped in whole. Returns ``{"html", "markdown", "metrics", "plots"}`` paths.
    """
    out = Path(out)
    _check_out(out)
    html_text = render_html(report)
    md_text = render_markdown(report)
    tables = plot_tables(report)
    metrics = report.metrics_dict()
    with atomic_output_dir(out / "plots") as tmp:
        for name, text in tables.items():
            (tmp / name).write_text(text, encoding="utf-8")
    paths = {
        "html": atomic_write_text(out / "shift_report.html", html_text),
        "markdown": atomic_write_text(out / "shift_report.md", md_text),
        "metrics": atomic_write_json(out / "metrics.json", metrics),
        "plots": out / "plots",
    }
    log.info("report written to %s (%d bytes HTML)", out, len(html_text.encode("utf-8")))
    return paths

"""The report's candidate section, from the candidate's ``fallback.json`` (:class:`quantkit.artifacts.FallbackResult`).

For a model whose candidate came from the precision fallback (dvc.yaml: ``fallback@<model>``) the report says
which nodes stay in float and why, how fast the candidate runs against FP32 and the deployed model (the
medians ``fallback.json`` measured, interleaved, on the machine that ran the fallback; machine-dependent, so
never a DVC metric), and the commands that deploy it. Plain text lines, shared by the HTML and Markdown.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Sequence

from .commands import command_blocks

MAX_NODES = 24
"""Float nodes listed by name in the report (the rest are counted; ``fallback.json`` lists them all)."""


def summary_line(fb: Any) -> str:
    """What the fallback kept and what it reached (one sentence)."""
    kept = len(fb.kept)
    what = "kept in float" if fb.strategy == "float" else "given 16-bit activations"
    per_set = ", ".join(f"{name} {fb.metric_before_per_set.get(name, float('nan')):.3f} → {v:.3f}"
                        for name, v in sorted(fb.metric_after_per_set.items()))
    return (f"The candidate is one model for every condition: {kept} node{'s' if kept != 1 else ''} {what} "
            f"({len(fb.islands)} island{'s' if len(fb.islands) != 1 else ''}, {fb.transitions} float/8-bit conversions), the rest INT8, "
            f"so that {fb.metric} vs FP32 reaches {fb.target} on every reference set "
            f"({'met' if fb.met else 'NOT met'} {_where(fb)}; all-8-bit → candidate: {per_set}).")


def _where(fb: Any) -> str:
    """On which images the figures were measured: the held-out split with the worst set's interval, or in-sample."""
    if not fb.heldout_images:
        return "on the images the search chose on (in-sample, optimistic)"
    ci = (f", {100 * fb.confidence:.0f}% interval {fb.metric_after_ci[0]:.3f} to {fb.metric_after_ci[1]:.3f} on the worst set"
          if fb.metric_after_ci is not None else "")
    return f"on held-out images the search never saw: {fb.split_words()}{ci}"


def node_lines(fb: Any, limit: int = MAX_NODES) -> list[str]:
    """One line per reason, the nodes kept for it grouped: ``8 nodes: <reason> (conv1 (Conv), ...)``, the first ``limit``
    names listed over all lines, then how many more."""
    groups: dict[str, list[str]] = {}
    for k in fb.kept:
        groups.setdefault(k.reason, []).append(f"{k.name} ({k.op_type})")
    lines, shown = [], 0
    for reason, nodes in groups.items():
        names = nodes[:max(limit - shown, 0)]
        shown += len(names)
        more = f", ... {len(nodes) - len(names)} more" if len(nodes) > len(names) else ""
        head = f"{len(nodes)} nodes, same reason" if len(nodes) > 1 else "1 node"
        lines.append(f"{head}: {reason}" + (f" ({', '.join(names)}{more})" if names else f" ({len(nodes)} not listed)"))
    if len(fb.kept) > limit:
        lines.append(f"{len(fb.kept) - limit} nodes not named here (fallback.json lists every node and why)")
    return lines


def latency_lines(fb: Any, show: bool = True) -> list[str]:
    """One line per runtime and thread count: FP32, candidate and deployed medians and the speedups."""
    if not show:
        return ["Latency: measured by the fallback (fallback.json, 'latency'); not shown here (report.candidate_latency: false)."]
    if not fb.latency:
        return ["Latency: timed on the machine that shows this report, under \"Speed on this machine\" (quantkit measure: "
                "FP32, deployed and candidate interleaved on each target runtime), not in fallback.json (fallback.timings: false)."]
    lines = []
    for r in fb.latency:
        dep = (f"; deployed {r.deployed_ms:.1f} ms, candidate {r.speedup_vs_deployed:.2f}× the deployed speed"
               if r.deployed_ms is not None and r.speedup_vs_deployed is not None else "")
        lines.append(f"{r.runtime}, {r.threads} thread{'s' if r.threads != 1 else ''} (median of {r.repeats}, interleaved): "
                     f"FP32 {r.fp32_ms:.1f} ms, candidate {r.candidate_ms:.1f} ms ({r.speedup_vs_fp32:.2f}× FP32){dep}")
    for where in fb.slower_than_fp32:
        lines.append(f"Warning: the candidate is not faster than FP32 on {where}.")
    lines.append("Timed on the machine that ran the fallback (machine-dependent; not a DVC metric).")
    return lines


def deploy_commands(name: str, candidate: Path, thresholds: Path, fb: Any, site_sets: Sequence[str], runtimes: Sequence[str] = ()) -> list[str]:
    """The commands that package and verify the candidate (the pipeline layout ``work/models/<model>/...``): golden
    outputs from the fallback's first reference set, verification on ``site_sets`` (the report's site set folders), once
    per runtime of ``runtimes`` (the target runtimes it is to be deployed on; none: the runtimes verify picks)."""
    work = candidate.parent.parent
    golden = next((s.path for s in fb.reference_sets if s.path), "reference_sets/<a reference set>")
    dist = f"dist/{name}-candidate"
    sites = "".join(f" --site-set {shlex.quote(s)}" for s in site_sets)
    verify = [f"quantkit verify {dist} --fp32 {work / 'intake'}{sites} --params params.yaml --out {work / 'verify-candidate.json'}"] if not runtimes else [
        f"quantkit verify {dist} --runtime {rt} --fp32 {work / 'intake'}{sites} --params params.yaml --out {work / f'verify-candidate-{rt}.json'}"
        for rt in runtimes]
    return [f"quantkit bundle {candidate} --thresholds {thresholds} --fp32 {work / 'intake'} --golden {golden} --params params.yaml --out {dist}",
            *verify]


def _deploys(m: Any) -> bool:
    """Whether the model's decision is to deploy the candidate (commands are shown under no other decision)."""
    choice = getattr(m, "choice", None)
    return choice is not None and choice.deploys


def section(m: Any, show_latency: bool = True) -> dict[str, list[str]]:
    """``{"summary", "nodes", "latency", "deploy"}`` text lines for a model report with a fallback result."""
    fb = m.fallback
    return {"summary": [summary_line(fb)], "nodes": node_lines(fb), "latency": latency_lines(fb, show_latency),
            "deploy": list(m.deploy)}


def markdown(m: Any, show_latency: bool = True) -> list[str]:
    """The candidate section as Markdown lines (empty without a fallback result)."""
    if m.fallback is None:
        return []
    s = section(m, show_latency)
    lines = ["### The candidate (precision fallback)", "", *s["summary"], "", "Kept in float, and why:", ""]
    lines += [f"- {x}" for x in s["nodes"]] + [""] + [f"- {x}" for x in s["latency"]] + [""]
    if _deploys(m):  # commands only under a decision to deploy
        lines += ["To deploy it:", "", "```bash", *s["deploy"], "```", ""]
    return lines


def html(m: Any, show_latency: bool = True) -> Any:
    """The candidate section as HTML (a :class:`markupsafe.Markup`, escaped)."""
    from markupsafe import Markup, escape

    s = section(m, show_latency)
    items = "".join(f"<li>{escape(x)}</li>" for x in s["nodes"])
    lat = "".join(f"<li>{escape(x)}</li>" for x in s["latency"])
    cmds = Markup("<p>To deploy it:</p>") + command_blocks(s["deploy"]) if _deploys(m) else Markup("")
    return Markup(f"<h3>The candidate (precision fallback)</h3><p>{escape(s['summary'][0])}</p>"
                  f"<details><summary>Kept in float, and why ({len(m.fallback.kept)})</summary><ul>{items}</ul></details>"
                  f"<details><summary>Latency measured by the fallback</summary><ul>{lat}</ul></details>{cmds}")


__all__ = ["deploy_commands", "html", "latency_lines", "markdown", "node_lines", "section", "summary_line"]

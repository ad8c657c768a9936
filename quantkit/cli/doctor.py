"""``quantkit doctor``: this machine's runtimes, CPU and the risky-pattern matrix (which patterns each runtime gets right)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="installed runtimes, CPU ISA and the risky-pattern matrix of this machine",
        description="Run the risky-pattern suite (tiny QDQ models of Concat with mixed scales, Resize modes and coordinate "
        "transforms, per-channel axes, signed/unsigned/16-bit activations, 4-bit weights, u8xs8 saturation, rounding) on every "
        "installed runtime and compare each with ONNX's reference evaluator and its codes with ONNX Runtime's QDQ simulation. "
        "'ok' = within 1 quantization step of the output and at most 2% of its codes differing from the simulation's; "
        "'DIFF n' = n steps off; 'DIFF n%' = n% of its codes differ by one; 'REFUSED' = the runtime cannot load or run it. "
        "Takes a few seconds.",
    )
    p.add_argument("--runtime", action="append", metavar="NAME", help="only this runtime (repeatable; default every installed one)")
    p.add_argument("--quantized", metavar="FILE", help="a quantized (QDQ) model: also list the patterns it uses, where, and each runtime's verdict")
    p.add_argument("--json", action="store_true", help="print the matrix as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..patterns import pattern_matrix, patterns_in

    used = None
    if args.quantized:
        from ..modelio import load_model

        used = patterns_in(load_model(args.quantized))
    m = pattern_matrix(args.runtime)
    if args.json:
        out = m.to_dict()
        if used is not None:
            out["model"] = {"path": args.quantized, "patterns": [{"pattern": p, "nodes": nodes, "verdicts": {
                v: (r.verdict if r is not None else None) for v in m.variants for r in [m.verdict(p, v)]}} for p, nodes in used]}
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write(render(m) + "\n")
    if used is not None:
        sys.stdout.write(render_model(m, args.quantized, used) + "\n")
    return 0


def render(m: Any) -> str:
    """Machine lines, then one row per pattern and one column per runtime variant, then the details of every cell
    that does not agree."""
    share = f"; at most {100 * m.max_code_share:g}% of output codes differing from the QDQ simulation's" if m.max_code_share is not None else ""
    lines = [f"cpu       {m.machine.get('model', '?')} ({m.machine.get('machine', '?')})",
             f"isa       {' '.join(m.machine.get('flags') or []) or 'none of the tracked flags'}",
             f"runtimes  {', '.join(f'{k} {v}' for k, v in sorted(m.versions.items()))}",
             f"patterns  {len({r.pattern for r in m.results})}, tolerance {m.tolerance_steps:g} quantization step(s) of the output{share}", ""]
    cols = m.variants
    rows = m.table()
    w0 = max(len("pattern"), *(len(r[0]) for r in rows))
    widths = [max(len(c), *(len(r[i + 1]) for r in rows)) for i, c in enumerate(cols)]
    lines.append("  ".join(["pattern".ljust(w0)] + [c.ljust(w) for c, w in zip(cols, widths)]).rstrip())
    for r in rows:
        lines.append("  ".join([r[0].ljust(w0)] + [c.ljust(w) for c, w in zip(r[1:], widths)]).rstrip())
    bad = [r for r in m.results if r.verdict != "agree"]
    if bad:
        lines.append("")
        lines += [f"{r.variant} {r.pattern}: {r.verdict}: {r.detail}" for r in bad]
    return "\n".join(lines)


def render_model(m: Any, path: str, used: list[tuple[str, list[str]]]) -> str:
    """The patterns ``path`` uses: per pattern the cell of each runtime variant and the nodes (``-``: the suite has no
    model of that construct)."""
    if not used:
        return f"\n{path}: uses none of the suite's quantized patterns (a float model has none: quantize it first)"
    lines = ["", f"{path}: the patterns it uses"]
    w0 = max(len(p) for p, _ in used)
    for p, nodes in used:
        cells = ", ".join(f"{v} {r.cell if r is not None else '-'}" for v in m.variants for r in [m.verdict(p, v)])
        at = ", ".join(nodes[:3]) + (f" (+{len(nodes) - 3})" if len(nodes) > 3 else "")
        lines.append(f"  {p.ljust(w0)}  {cells}  at {at}")
    return "\n".join(lines)

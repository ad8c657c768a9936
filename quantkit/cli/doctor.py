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
        description="Run the risky-pattern suite (tiny QDQ models of Concat with mixed scales, Resize modes, per-channel "
        "axes, signed/unsigned/16-bit activations, 4-bit weights, u8xs8 saturation, rounding) on every installed runtime and "
        "compare each with ONNX's reference evaluator. 'ok' = within the tolerance (1 quantization step of the output), "
        "'DIFF n' = n steps off, 'REFUSED' = the runtime cannot load or run it. Takes a few seconds.",
    )
    p.add_argument("--runtime", action="append", metavar="NAME", help="only this runtime (repeatable; default every installed one)")
    p.add_argument("--json", action="store_true", help="print the matrix as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..patterns import pattern_matrix

    m = pattern_matrix(args.runtime)
    if args.json:
        sys.stdout.write(json.dumps(m.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    sys.stdout.write(render(m) + "\n")
    return 0


def render(m: Any) -> str:
    """Machine lines, then one row per pattern and one column per runtime variant, then the details of every cell
    that does not agree."""
    lines = [f"cpu       {m.machine.get('model', '?')} ({m.machine.get('machine', '?')})",
             f"isa       {' '.join(m.machine.get('flags') or []) or 'none of the tracked flags'}",
             f"runtimes  {', '.join(f'{k} {v}' for k, v in sorted(m.versions.items()))}",
             f"patterns  {len({r.pattern for r in m.results})}, tolerance {m.tolerance_steps:g} quantization step(s) of the output", ""]
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

"""The ``quantkit`` command line: one thin module per operation (habit 1 of STYLE.md).

Each module in :data:`COMMAND_MODULES` defines ``register(subparsers)`` which adds one sub-command
and sets ``func`` on it: ``func(args) -> int`` parses flags into the library's configs, calls one
public library function and renders the result (table by default, ``--json`` where offered).
"""

COMMAND_MODULES = (
    "demo",
    "export",
    "inspect",
    "intake",
    "models",
    "support",
    "calibset",
    "quantize",
    "fallback",
    "record",
    "compare",
    "bind",
    "evaluate",
    "drift",
    "report",
    "measure",
    "bundle",
    "verify",
    "doctor",
    "params",
    "fleet",
)

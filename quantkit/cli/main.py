"""Entry point of the ``quantkit`` CLI. Exceptions map to exit codes here and only here."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from .. import __version__
from ..errors import QuantkitError
from . import COMMAND_MODULES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quantkit",
        description="Quantize ONNX vision models with versioned calibration, bound thresholds and shift reports.",
    )
    parser.add_argument("--version", action="version", version=f"quantkit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"quantkit.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"quantkit.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except QuantkitError as e:
        print(f"quantkit {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except OSError as e:  # a path the OS refuses (permissions, a file where a folder is needed, /proc ...)
        where = e.filename if e.filename is not None else "a path"
        print(f"quantkit {args.command}: error: {where}: {e.strerror or e}; check the path and its permissions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"quantkit {args.command}: interrupted; no output was written", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

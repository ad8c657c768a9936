"""Entry point of the ``quantkit`` CLI. Exceptions map to exit codes here and only here."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import shlex
import signal
import sys
from typing import Any, Iterator, Sequence

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
    for name in COMMAND_MODULES:  # every listed command must import: a missing one is a bug (exit 70), never a silent gap in --help
        importlib.import_module(f"quantkit.cli.{name}").register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM (``kill``, ``timeout``, a CI runner
    cancelling a job), so it unwinds exactly like Ctrl-C: every ``atomic_output_dir`` removes its
    temporary folder and the command exits 143 with one line."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread (main() called from a worker thread): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except Exception as e:  # a command module that does not import is a quantkit bug: one line, exit 70, never a silent gap
        print(f"quantkit: internal error: a command failed to load ({type(e).__name__}: {e}); please report it", file=sys.stderr)
        return 70
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("quantkit.progress").setLevel(logging.INFO if args.verbose < 2 else logging.DEBUG)  # progress lines off a TTY
    with _sigterm_as_interrupt():
        return _run(args, argv)


def _run(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
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
    except KeyboardInterrupt as e:
        # A command that leaves something for the next run names it in ``e.kept`` (one phrase); one whose finished
        # part is output that the same command line completes (fleet score's shards) also sets ``e.resume``.
        kept = getattr(e, "kept", "")
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        if kept and getattr(e, "resume", False):
            line = f"{how}; {kept}; to resume, run: {shlex.join(['quantkit', *argv])}"
        else:
            line = f"{how}; no output was written" + (f"; {kept}" if kept else "")
        print(f"quantkit {args.command}: {line}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except Exception as e:  # a quantkit bug, not the user's input: one line, the traceback with -vv
        if args.verbose >= 2:
            raise
        first = (str(e).splitlines() or [""])[0][:300]
        print(f"quantkit {args.command}: internal error: {type(e).__name__}: {first}; no output was written. This is a quantkit "
              "bug: please report it with the output of the same command run with -vv", file=sys.stderr)
        return 70  # EX_SOFTWARE (sysexits.h)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

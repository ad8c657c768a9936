"""An unexpected exception (a quantkit bug, not bad input) is one line and exit 70; -vv shows the traceback."""

from __future__ import annotations

import pytest

from quantkit.cli import main as cli


def _boom(args):
    raise KeyError("Conv@6_w_cle")


def test_a_bug_is_one_line_exit_70_and_the_traceback_needs_vv(monkeypatch, capsys):
    real = cli.build_parser

    def parser():
        p = real()
        p.parse_args(["params"])  # the sub-command exists
        for action in p._subparsers._group_actions:  # route 'params' to a function that fails
            action.choices["params"].set_defaults(func=_boom)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert cli.main(["params"]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: KeyError: 'Conv@6_w_cle'" in err and "-vv" in err and "Traceback" not in err
    with pytest.raises(KeyError):
        cli.main(["-vv", "params"])

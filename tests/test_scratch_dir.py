"""Temporary work folders of a killed run are removed by the next run of the same kind (a new user's trial: a killed
``quantkit quantize`` left its ``/tmp/quantkit-quantize-*`` copies of the model for good). The names are those
:func:`quantkit._io.temp_dir_beside` gives, ``.quantkit-KIND.PID.xxxxxxxx.tmp``, swept by :func:`quantkit._io.remove_dead_temps`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from quantkit._io import scratch_dir


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_dead_runs_folder_is_removed_a_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    dead = tmp_path / f".quantkit-quantize.{_dead_pid()}.abcd1234.tmp"
    live = tmp_path / f".quantkit-quantize.{os.getppid()}.abcd1234.tmp"  # the test runner's parent: alive
    other = tmp_path / f".quantkit-verify.{_dead_pid()}.abcd1234.tmp"  # another kind: left to its own next run
    for d in (dead, live, other):
        (d / "model.onnx").parent.mkdir()
        (d / "model.onnx").write_bytes(b"x")
    with scratch_dir("quantize") as work:
        assert Path(work).parent == tmp_path and Path(work).name.startswith(f".quantkit-quantize.{os.getpid()}.")
        assert not dead.exists() and live.exists() and other.exists()
    assert not Path(work).exists()

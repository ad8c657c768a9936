"""Interrupting ``quantkit fleet score`` (Ctrl-C to the whole process group, or SIGTERM): one line on stderr naming
the shards kept and the command that resumes, no Dask tracebacks, exit 130 (143 for SIGTERM), and the resumed run's
scores equal an uninterrupted run's."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet_fixtures import make_fleet_tree, make_models

from quantkit.fleet import FleetScoreConfig, register_tree, score_fleet

TESTS = Path(__file__).parent
CLI = [sys.executable, "-m", "quantkit.cli.main"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("interrupt")
    paths = make_models(root / "models")
    register_tree(make_fleet_tree(root / "images"), root / "manifest.parquet")  # 4 cameras x 3 days: 12 shards
    return {**paths, "manifest": root / "manifest.parquet", "root": root}


def _args(fleet: dict[str, Path], out: Path) -> list[str]:
    return ["fleet", "score", str(fleet["manifest"]), "--fp32", str(fleet["intake"]), "--quantized", str(fleet["quantized"]),
            "--thresholds", str(fleet["thresholds"]), "--calibration-set", str(fleet["calibration_set"]), "--workers", "2",
            "--ort-threads", "1", "--out", str(out)]


def _interrupt(fleet: dict[str, Path], out: Path, sig: int, group: bool, after: int = 2) -> tuple[int, str, str]:
    """Run the CLI in its own session with slow shards; once ``after`` shards are written send ``sig`` to the whole
    process group (what Ctrl-C in a terminal does: the workers get it too) or to the command alone."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "DASK_DISTRIBUTED__WORKER__PRELOAD": '["slow_shards"]', "SLOW_SHARDS_S": "1"}
    proc = subprocess.Popen([*CLI, *_args(fleet, out)], env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while len(list((out / "shards").glob("*.json"))) < after and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be interrupted: " + proc.stderr.read()[-2000:]
    (os.killpg if group else os.kill)(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


def test_ctrl_c_keeps_finished_shards_says_so_in_one_line_and_the_resumed_run_equals_a_clean_one(fleet, tmp_path):
    out, clean = tmp_path / "scores", tmp_path / "clean"
    code, stdout, stderr = _interrupt(fleet, out, signal.SIGINT, group=True)
    assert code == 130 and stdout == ""
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    m = re.fullmatch(r"quantkit fleet: interrupted; (\d+) of 12 shards finished and are kept in (\S+); a rerun scores only the "
                     r"other (\d+); to resume, run: (quantkit fleet score .*)\n", stderr)
    assert m, stderr
    kept = int(m.group(1))
    assert 2 <= kept < 12 and int(m.group(3)) == 12 - kept and m.group(2) == str(out)
    assert len(list((out / "shards").glob("*.json"))) == kept and not (out / "summary.json").exists()
    resume = shlex.split(m.group(4))
    assert resume[1:] == _args(fleet, out)
    done = subprocess.run([*CLI, *resume[1:]], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"in 12 shards ({kept} already done)" in done.stdout
    score_fleet(fleet["manifest"], fleet["intake"], fleet["quantized"], fleet["thresholds"], fleet["calibration_set"], clean,
                FleetScoreConfig(workers=0))
    files = sorted(p.relative_to(clean).as_posix() for p in clean.rglob("*") if p.is_file() and p.name != "run.json")
    assert files == sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != "run.json")
    for name in files:  # rows, shard summaries, edges and summary.json: the same bytes
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name


def test_sigterm_says_the_same_in_one_line_and_exits_143(fleet, tmp_path):
    code, stdout, stderr = _interrupt(fleet, tmp_path / "scores", signal.SIGTERM, group=False)
    assert code == 143 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("quantkit fleet: terminated (SIGTERM); "), stderr
    assert "shards finished and are kept in" in stderr and "to resume, run: quantkit fleet score" in stderr

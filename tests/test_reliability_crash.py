"""Crash safety, concurrency and signals: a killed or competing writer never leaves a half-written output.

SIGKILL lands just before every atomic rename a command makes (counted by a hook, so every write point is
hit, not a lucky moment), plus once at a time during the run. After each kill every output file is
byte-identical to the previous run's or to a complete new run's, never anything else; the next run
cleans up what the killed one left. Two writers to one output: the second gets one line naming the first.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from _reliability import mini_pipeline, pipeline_argv, run_hooked, snapshot, start_hooked
from quantkit._io import output_lock
from quantkit.cli.main import main

pytestmark = pytest.mark.slow  # ~20 subprocess runs of about 2 s each


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    return mini_pipeline(tmp_path_factory.mktemp("crash") / "p")


def _argv(pipe, command: str, calib: str = "calib_b") -> list[str]:
    return next(a for a in pipeline_argv(pipe, calib) if a[0] == command)


def _leftovers(pipe) -> list[str]:
    return sorted(str(p) for base in (pipe["root"], pipe["root"] / "work", pipe["reports"]) if base.is_dir() for p in base.iterdir()
                  if p.name.startswith(".") and (p.name.endswith(".tmp") or p.name.endswith(".lock") or p.name.endswith(".old")))


def _kill_everywhere(pipe, command: str, outputs: list[Path], whole: list[Path]) -> tuple[int, dict[str, bytes]]:
    """SIGKILL ``command`` before each of its atomic renames, then let it complete; returns (renames, new snapshot).

    Each file of ``outputs`` must be its previous or its new bytes after every kill; each folder of ``whole``
    must be entirely previous or entirely new.
    """
    argv = _argv(pipe, command)
    before = snapshot(outputs)
    states = []
    n = 0
    while True:
        n += 1
        r = run_hooked(argv, {"QK_KILL_AT": str(n), "QK_KILL_WHEN": "before"})
        if r.returncode != -signal.SIGKILL:
            assert r.returncode == 0, r.stderr
            break
        assert n < 20, "no end to the renames"
        states.append(snapshot(outputs))
    after = snapshot(outputs)
    assert after != before, "the new run must write different bytes for the check to mean anything"
    for i, s in enumerate(states, 1):
        assert all(k in before or k in after for k in s), f"kill before rename {i}: unexpected files {sorted(set(s) - set(before) - set(after))}"
        for k, data in s.items():
            assert data in (before.get(k), after.get(k)), f"kill before rename {i}: {k} is neither the previous nor the new file"
        for folder in whole:
            part = {k: v for k, v in s.items() if k.startswith(str(folder) + os.sep)}
            old = {k: v for k, v in before.items() if k.startswith(str(folder) + os.sep)}
            new = {k: v for k, v in after.items() if k.startswith(str(folder) + os.sep)}
            assert part in (old, new), f"kill before rename {i}: {folder} is a mix of two runs"
    assert _leftovers(pipe) == [], "the completed run must clean what the killed ones left"
    return n - 1, after


def test_sigkill_at_every_write_point_of_quantize_bind_report(pipe):
    q, b, r = _argv(pipe, "quantize"), _argv(pipe, "bind"), _argv(pipe, "report")
    assert q and b and r
    renames, new_q = _kill_everywhere(pipe, "quantize", [pipe["quant"]], [pipe["quant"]])
    assert renames >= 2
    # before the final swap nothing of the new quantization is visible: the folder is the previous one
    renames_b, _ = _kill_everywhere(pipe, "bind", [pipe["thresholds"], pipe["history"]], [])
    assert renames_b >= 2
    assert main(_argv(pipe, "evaluate")) == 0  # report's inputs now all come from the calib-b run
    renames_r, _ = _kill_everywhere(pipe, "report", [pipe["reports"]], [pipe["reports"] / "plots"])
    assert renames_r >= 3
    print(f"SIGKILL points (one before each atomic rename): quantize {renames}, bind {renames_b}, report {renames_r}")
    assert snapshot([pipe["quant"]]) == new_q


def test_sigkill_at_a_moment_during_quantize(pipe):
    argv_a, argv_b = _argv(pipe, "quantize", "calib_a"), _argv(pipe, "quantize", "calib_b")
    assert run_hooked(argv_b).returncode == 0
    new = snapshot([pipe["quant"]])
    t0 = time.monotonic()
    assert run_hooked(argv_a).returncode == 0
    full = time.monotonic() - t0
    old = snapshot([pipe["quant"]])
    for frac in (0.5, 0.9):
        p = start_hooked(argv_b)
        time.sleep(full * frac)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        assert snapshot([pipe["quant"]]) in (old, new), f"killed at {frac:.0%} of a run: the output is neither the previous nor the new one"
    # a run after the kills (it may resume from their calibration checkpoint) writes exactly the uninterrupted run's bytes
    assert run_hooked(argv_b).returncode == 0 and snapshot([pipe["quant"]]) == new
    assert run_hooked(argv_a).returncode == 0 and _leftovers(pipe) == [] and snapshot([pipe["quant"]]) == old


def test_second_writer_gets_one_line_naming_the_first(pipe, capsys):
    before = snapshot([pipe["quant"]])
    with output_lock(pipe["quant"]):
        rc = main(_argv(pipe, "quantize"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"pid {os.getpid()}" in err[0] and "another quantkit command is writing it" in err[0]
    assert snapshot([pipe["quant"]]) == before


def test_two_quantize_processes_into_one_out(pipe):
    first = start_hooked(_argv(pipe, "quantize", "calib_a"), {"QK_SLEEP_IN_LOCK": "4"})
    lock = pipe["quant"].with_name(f".{pipe['quant'].name}.lock")
    deadline = time.monotonic() + 30
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = run_hooked(_argv(pipe, "quantize", "calib_b"))
    out1, err1 = first.communicate(timeout=120)
    assert first.returncode == 0, err1
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1 and f"pid {first.pid}" in lines[0], second.stderr
    assert "Traceback" not in second.stderr and second.stdout == ""
    assert (pipe["quant"] / "record.json").is_file() and not lock.exists()


def test_sigterm_cleans_up_like_ctrl_c(pipe):
    before = snapshot([pipe["quant"]])
    p = start_hooked(_argv(pipe, "quantize", "calib_a"), {"QK_SLEEP_IN_LOCK": "20"})
    lock = pipe["quant"].with_name(f".{pipe['quant'].name}.lock")
    deadline = time.monotonic() + 30
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and err.strip().splitlines() == ["quantkit quantize: terminated (SIGTERM); no output was written"], err
    assert snapshot([pipe["quant"]]) == before and _leftovers(pipe) == []


def test_stale_temp_and_half_swapped_output_recovered(tmp_path):
    from quantkit._io import atomic_output_dir

    out = tmp_path / "out"
    with atomic_output_dir(out) as t:
        (t / "a.txt").write_text("one")
    (tmp_path / ".out.999999999.deadbeef.tmp").mkdir()  # a writer (pid 999999999, gone) killed while writing
    os.replace(out, tmp_path / ".out.old")  # a writer killed between the two renames of the fallback swap
    with atomic_output_dir(tmp_path / "other") as t:
        pass
    assert not out.exists()
    with atomic_output_dir(out) as t:
        assert (out / "a.txt").read_text() == "one"  # put back before anything else
        (t / "a.txt").write_text("two")
    assert (out / "a.txt").read_text() == "two" and sorted(os.listdir(tmp_path)) == ["other", "out"]
    shutil.rmtree(out)

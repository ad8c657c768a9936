"""Long work in logs: start / every-30-s / end lines off a terminal (fake clock), tqdm on a terminal."""

from __future__ import annotations

import logging

import pytest

from quantkit import progress as qp


class FakeClock:
    def __init__(self, step: float) -> None:
        self.t, self.step = 1000.0, step

    def __call__(self) -> float:
        return self.t

    def tick(self) -> None:
        self.t += self.step


def _run(n: int, step: float, caplog, total: int | None = None, stop: int | None = None) -> list[str]:
    clock = FakeClock(step)
    caplog.set_level(logging.INFO, logger="quantkit.progress")
    caplog.clear()
    for i, _ in enumerate(qp.LogProgress(range(n), total=n if total is None else total, desc="calibrate", unit="img", clock=clock)):
        clock.tick()  # each item takes `step` seconds
        if stop is not None and i + 1 == stop:
            break
    return [r.getMessage() for r in caplog.records if r.name == "quantkit.progress"]


def test_long_work_logs_start_every_30s_and_end(caplog):
    lines = _run(100, 1.0, caplog)  # 100 s of work, 1 s per image
    assert lines[0] == "calibrate: started of 100 img; 10/100 img (10%), 1 img/s, elapsed 10.0s, ETA 1m30s"
    progress = lines[1:-1]
    assert [ln.split(",")[0] for ln in progress] == ["calibrate: 40/100 img (40%)", "calibrate: 70/100 img (70%)"]
    assert "ETA 30.0s" in progress[-1] and "elapsed 1m10s" in progress[-1]
    assert lines[-1] == "calibrate: done, 100 img in 1m40s (1 img/s)"
    assert len(_run(1000, 1.0, caplog)) == 1 + 32 + 1  # start at 10 s, progress at 40, 70 ... 970 s, end


def test_short_work_logs_nothing(caplog):
    assert _run(90, 0.1, caplog) == []  # 9 s in all: under QUIET_S
    assert _run(10, 1.0, caplog) == ["calibrate: done, 10 img in 10.0s (1 img/s)"]  # ends as it passes QUIET_S: one line


def test_stopped_early_and_unknown_total(caplog):
    lines = _run(100, 1.0, caplog, stop=40)
    assert lines[-1].startswith("calibrate: stopped, 39 img in 40.0s")  # the 40th was handed out, its end never reported
    lines = _run(50, 2.0, caplog, total=0)
    assert lines[0].startswith("calibrate: started; 5 img, 0.5 img/s") and "ETA" not in "".join(lines)


def test_progress_chooses_tqdm_on_a_tty(monkeypatch, caplog):
    seen = []
    monkeypatch.setattr(qp, "_stderr_is_tty", lambda: True)
    monkeypatch.setattr(qp, "tqdm", lambda it, **kw: (seen.append(kw), iter(it))[1])
    assert list(qp.progress(range(3), total=3, desc="x")) == [0, 1, 2] and seen and seen[0]["desc"] == "x"
    monkeypatch.setattr(qp, "_stderr_is_tty", lambda: False)
    monkeypatch.setattr(qp, "LogProgress", lambda it, **kw: (seen.append(("log", kw)), iter(it))[1])
    assert list(qp.progress(range(2), desc="y")) == [0, 1] and seen[-1][0] == "log"


@pytest.mark.parametrize("s,text", [(5.04, "5.0s"), (65, "1m05s"), (3725, "1h02m05s")])
def test_durations(s, text):
    assert qp._duration(s) == text

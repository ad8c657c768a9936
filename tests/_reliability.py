"""Small generated inputs for the reliability tests: a tiny map model, tiny image sets, a whole mini pipeline.

Everything is 32x32 so each quantkit command runs in about a second (most of it Python start-up).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

SIZE = 32

from models import tiny_map_model  # noqa: E402,F401 - re-exported for the reliability tests


def write_images(folder: Path, seeds: list[int], size: int = SIZE) -> dict[str, list]:
    """PNG images with a dark bar (a 'text line') on a random background; returns text-box labels per file."""
    from PIL import Image

    (folder / "images").mkdir(parents=True, exist_ok=True)
    labels = {}
    for s in seeds:
        rng = np.random.default_rng(s)
        img = np.empty((size, size, 3), np.uint8)
        img[:] = rng.integers(120, 230, 3)
        y = int(rng.integers(4, size - 12))
        img[y:y + 6, 4:size - 4] = rng.integers(0, 40, 3)
        rel = f"images/{s:04d}.png"
        Image.fromarray(img).save(folder / rel)
        labels[rel] = [[[4, y], [size - 4, y], [size - 4, y + 6], [4, y + 6]]]
    return labels


def make_set(folder: Path, name: str, seeds: list[int], kind: str = "calibration") -> Path:
    from quantkit.calibset import register_set

    labels = write_images(folder, seeds)
    register_set(folder, name=name, kind=kind, camera="cam1", lighting="day", labels=labels)
    return folder


PARAMS = """intake:
  input_size: [32, 32]
  note_check: off
task:
  adapter: db_text
  options: {thresh: 0.3, box_thresh: 0.5, unclip_ratio: 1.6}
thresholds:
  operating_point: {mode: keep_fp32, bootstrap_resamples: 20}
  min_agreement: 0.0
report:
  examples_per_site: 1
  thumbnail_px: 32
"""


def mini_pipeline(root: Path) -> dict[str, Path]:
    """intake -> quantize (set A) -> bind -> evaluate -> report under ``root``, in process; returns the paths."""
    from quantkit.cli.main import main

    p = {"root": root, "params": root / "params.yaml", "model": root / "tiny.onnx", "intake": root / "work" / "intake",
         "calib_a": root / "sets" / "calib-a", "calib_b": root / "sets" / "calib-b", "ref": root / "sets" / "ref",
         "site": root / "sets" / "site", "quant": root / "work" / "quantize" / "deployed",
         "thresholds": root / "work" / "thresholds" / "deployed.json",
         "history": root / "history.jsonl", "eval": root / "work" / "eval", "reports": root / "reports"}
    root.mkdir(parents=True, exist_ok=True)
    p["params"].write_text(PARAMS)
    onnx.save(tiny_map_model(), p["model"])
    make_set(p["calib_a"], "calib-a", [1, 2, 3, 4])
    make_set(p["calib_b"], "calib-b", [11, 12, 13, 14, 15, 16])
    make_set(p["ref"], "ref", [21, 22, 23, 24], kind="reference")
    make_set(p["site"], "site", [31, 32, 33, 34], kind="site")
    for argv in pipeline_argv(p, "calib_a"):
        rc = main(argv)
        assert rc == 0, argv
    return p


def pipeline_argv(p: dict[str, Path], calib: str) -> list[list[str]]:
    """The CLI calls of the mini pipeline, calibrating on ``calib`` (``calib_a`` or ``calib_b``)."""
    s = str
    return [
        ["intake", s(p["model"]), "--params", s(p["params"]), "--out", s(p["intake"])],
        ["quantize", s(p["intake"]), "--calibration-set", s(p[calib]), "--out", s(p["quant"])],
        ["bind", s(p["quant"]), "--fp32", s(p["intake"]), "--reference", s(p["ref"]), "--params", s(p["params"]),
         "--history", s(p["history"]), "--out", s(p["thresholds"]), "--json"],
        ["evaluate", s(p["site"]), "--fp32", s(p["intake"]), "--deployed", s(p["quant"]), "--deployed-thresholds", s(p["thresholds"]),
         "--params", s(p["params"]), "--out", s(p["eval"] / "site")],
        ["report", "--work-dir", s(p["root"] / "work"), "--site-sets", s(p["root"] / "sets"), "--params", s(p["params"]), "--out", s(p["reports"])],
    ]


def _scratch(p: Path) -> bool:
    """A writer's hidden temporary sibling or lock (left by a killed writer, cleaned by the next)."""
    return any(part.startswith(".") and part.endswith((".tmp", ".lock", ".old")) for part in p.parts)


def snapshot(paths: list[Path]) -> dict[str, bytes]:
    """Every file under ``paths`` (files or folders) -> its bytes, writers' scratch files left out."""
    out = {}
    for base in paths:
        files = [base] if base.is_file() else sorted(q for q in base.rglob("*") if q.is_file()) if base.exists() else []
        for f in files:
            if not _scratch(f.relative_to(base.parent)):
                out[str(f)] = f.read_bytes()
    return out


HOOK = r'''
import os, signal, sys, time
kill_at = int(os.environ.get("QK_KILL_AT", "0"))
when = os.environ.get("QK_KILL_WHEN", "before")
sleep_s = float(os.environ.get("QK_SLEEP_IN_LOCK", "0"))
import quantkit._io as qio
count = 0

def counted(fn):
    def wrapper(*a, **k):
        global count
        count += 1
        if count == kill_at and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        r = fn(*a, **k)
        if count == kill_at and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return r
    return wrapper

os.replace = counted(os.replace)
qio._exchange = counted(qio._exchange)
if sleep_s:
    _mkdtemp = qio.tempfile.mkdtemp
    def slow_mkdtemp(*a, **k):
        d = _mkdtemp(*a, **k)
        time.sleep(sleep_s)
        return d
    qio.tempfile.mkdtemp = slow_mkdtemp
from quantkit.cli.main import main
sys.exit(main(sys.argv[1:]))
'''
"""Runs ``quantkit ARGS`` (``python -c HOOK ARGS``); ``QK_KILL_AT=N`` SIGKILLs the process just before
(``QK_KILL_WHEN=before``) or after the N-th atomic rename (``os.replace`` or the folder exchange);
``QK_SLEEP_IN_LOCK=S`` sleeps S seconds after an output's temporary folder is made (the lock is held)."""


def run_hooked(argv: list[str], env: dict[str, str] | None = None, timeout: float = 120.0):
    """Run ``quantkit argv`` under :data:`HOOK`; returns the CompletedProcess."""
    import os
    import subprocess
    import sys

    full = {**os.environ, "QK_KILL_AT": "0", **(env or {})}
    return subprocess.run([sys.executable, "-c", HOOK, *argv], capture_output=True, text=True, env=full, timeout=timeout)


def start_hooked(argv: list[str], env: dict[str, str] | None = None):
    """Start ``quantkit argv`` under :data:`HOOK` without waiting; returns the Popen."""
    import os
    import subprocess
    import sys

    full = {**os.environ, "QK_KILL_AT": "0", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", HOOK, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)

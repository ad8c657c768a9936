"""Demo sets are versioned data: the same params render the same bytes whatever SIMD/BLAS code the CPU selects.

Each render runs in a subprocess under one dispatch setting; on one machine, turning the CPU-specific paths off
(OpenBLAS kernels without FMA, NumPy without its dispatched SIMD loops, OpenCV without SIMD/IPP/threads,
libjpeg-turbo without SIMD) stands in for another CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import hashlib, json, os, sys
if os.environ.get("QK_TEST_CV_PLAIN"):
    import cv2
    cv2.setUseOptimized(False); cv2.setNumThreads(1); cv2.ipp.setUseIPP(False)
import numpy as np
from quantkit.demo.camera import CameraConfig, LightingConfig, capture
from quantkit.demo.scene import SceneAssets, compose
from quantkit.demo.synth import DemoConfig, DemoSetSpec, make_set

out = sys.argv[1]
cfg = DemoConfig(input_size=(96, 128), sets={
    "cam2": DemoSetSpec(out=f"{out}/cam2", camera="cam2", lighting="day", count=3, seed=5),
    "night": DemoSetSpec(out=f"{out}/night", camera="cam1", lighting="night", count=3, seed=6)})
result = {}
for name in cfg.sets:
    make_set(cfg, name)
    manifest = json.loads(open(f"{out}/{name}/manifest.json").read())
    stats = hashlib.sha256(open(f"{out}/{name}/stats.csv", "rb").read()).hexdigest()
    result[name] = [e["sha256"] for e in manifest["images"]] + [manifest["set_id"], stats]
# the raw photos too (before JPEG, which can hide a last-bit change): the fleet's knocked lens (defocus 3 px)
rng = np.random.default_rng([7, 1])
scene, _ = compose(SceneAssets(), rng, (72, 88), (2, 2))
photo = capture(scene, cfg.cameras["cam2"].replace(defocus_px=3.0), LightingConfig(exposure=0.8, gain=2.0), rng)
result["raw"] = [hashlib.sha256(scene.tobytes()).hexdigest(), hashlib.sha256(photo.tobytes()).hexdigest()]
print(json.dumps(result))
'''


def _plain_env() -> dict[str, str]:
    """The CPU-specific code paths off: generic OpenBLAS kernels (no FMA), NumPy's baseline loops, no libjpeg-turbo SIMD."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    found = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    # GLIBC_TUNABLES: glibc's own FMA/AVX2 variants of libm functions (expf, logf, ...) off
    env = {"QK_TEST_CV_PLAIN": "1", "JSIMD_FORCENONE": "1", "OPENBLAS_NUM_THREADS": "1", "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA"}
    env["OPENBLAS_CORETYPE"] = "Prescott" if os.uname().machine in ("x86_64", "AMD64") else "ARMV8"
    if found:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(found)
    return env


def _render(tmp: Path, env: dict[str, str]) -> dict[str, list[str]]:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "JSIMD_FORCENONE")}
    full = {**base, "PYTHONPATH": os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")]), **env}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp)], capture_output=True, text=True, env=full, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_demo_images_do_not_depend_on_cpu_dispatch(tmp_path: Path) -> None:
    default = _render(tmp_path / "default", {})
    plain = _render(tmp_path / "plain", _plain_env())
    assert set(default) == {"cam2", "night", "raw"} and [len(v) for v in default.values()] == [5, 5, 2]
    assert plain == default

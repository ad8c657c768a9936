"""Stand-ins for the fleet tests (imported by name; holds no tests itself).

:func:`make_models` writes a tiny intake (Conv-Relu-Conv-Sigmoid map head, 32x32), its INT8 model and
record, the threshold set bound to it, and a registered calibration set; :func:`make_fleet_tree` writes
small PNG site images laid out ``site/camera/YYYY-MM-DD/HHMMSS.png`` with soft bright blobs (so the
head finds regions), optionally darker from a given day on one camera (a planted change).
:func:`make_box_models` does the same for a box detector (``tests/models.py: concat_head_model``, separate
``boxes`` and ``scores`` outputs) read by the ``box_detector`` task adapter.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import numpy as np
from test_bundle_fixtures import make_intake, make_quantized, make_thresholds

SIZE = 48


def blob_image(rng: np.random.Generator, gain: float = 1.0) -> np.ndarray:
    """``(SIZE, SIZE, 3) uint8``: noisy grey background with two bright blobs, times ``gain``."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    img = rng.normal(70, 12, (SIZE, SIZE, 3))
    for _ in range(2):
        cy, cx = rng.integers(8, SIZE - 8, 2)
        img += 150 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 30.0)[..., None]
    return np.clip(img * gain, 0, 255).astype(np.uint8)


def make_calibration_set(root: Path) -> Path:
    """A registered calibration set of 12 blob images (with ``stats.csv``) at ``root/calib``."""
    from PIL import Image

    from quantkit.calibset import register_set

    calib = root / "calib"
    (calib / "images").mkdir(parents=True)
    rng = np.random.default_rng(99)
    for i in range(12):
        Image.fromarray(blob_image(rng)).save(calib / "images" / f"{i:04d}.png")
    register_set(calib, name="calib", kind="calibration", camera="cam1", lighting="day")
    return calib


def make_models(root: Path) -> dict[str, Path]:
    """Intake, deployed quantized folder, bound thresholds and a calibration set (with ``stats.csv``) under ``root``."""
    calib = make_calibration_set(root)
    intake = make_intake(root / "intake")
    quantized = make_quantized(intake, root / "quantized", seed=1, images=calib)
    return {"intake": intake, "quantized": quantized, "thresholds": make_thresholds(quantized, root / "thresholds.json"),
            "calibration_set": calib}


BOX_TASK = {"layout": "separate", "output": "scores", "boxes_output": "boxes", "box_format": "cxcywh", "match_iou": 0.5}
"""``box_detector`` options that read :func:`models.concat_head_model` (``split=True``)."""


def make_box_models(root: Path, size: int = 16) -> dict[str, Path]:
    """Like :func:`make_models` for a box detector: ``concat_head_model(size, split=True)`` quantized on the
    calibration set, with a ``box_detector`` threshold set (score 0.5, NMS IoU 0.45) bound to it."""
    import json

    from models import concat_head_model
    from test_bundle_fixtures import make_quantized
    from test_quantize_fixtures import write_model_intake

    from quantkit.artifacts.thresholds import Binding, ThresholdSet

    calib = make_calibration_set(root)
    intake = write_model_intake(concat_head_model(size, split=True), root / "intake", size)
    quantized = make_quantized(intake, root / "quantized", seed=1, images=calib)
    rec = json.loads((quantized / "record.json").read_text())
    cs = rec["calibration_set"]
    values = {"score_thresh": 0.5, "iou_thresh": 0.45}
    ts = ThresholdSet(adapter="box_detector", options=BOX_TASK, values=values, fp32_values=values,
                      binding=Binding(model_digest=rec["model_digest"], record_fingerprint=rec["fingerprint"], calibration_set_id=cs["set_id"],
                                      calibration_set_name=cs["name"], quantized_model_digest=rec["quantized_model_digest"]))
    ts.save(root / "thresholds.json")
    return {"intake": intake, "quantized": quantized, "thresholds": root / "thresholds.json", "calibration_set": calib}


def make_fleet_tree(root: Path, *, sites: int = 2, cameras: int = 2, days: int = 3, per_day: int = 3, dark_camera: str = "",
                    dark_from: int = 99, seed: int = 0) -> Path:
    """Images under ``root/<site>/<camera>/<date>/<HHMMSS>.png``; camera ``dark_camera`` is darker (x0.4) from day ``dark_from``."""
    from PIL import Image

    start = _dt.date(2025, 3, 3)
    for s in range(sites):
        for c in range(cameras):
            cam = f"{'ab'[s]}{c + 1:02d}"
            for d in range(days):
                folder = root / f"site-{'ab'[s]}" / cam / (start + _dt.timedelta(days=d)).isoformat()
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(per_day):
                    rng = np.random.default_rng([seed, s, c, d, i])
                    gain = 0.4 if cam == dark_camera and d >= dark_from else 1.0
                    Image.fromarray(blob_image(rng, gain)).save(folder / f"{8 + i:02d}0000.png")
    return root

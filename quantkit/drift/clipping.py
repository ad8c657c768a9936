"""Activation clipping: the fraction of FP32 activation values outside the range the INT8 model represents
(``[(qmin - zp) * scale, (qmax - zp) * scale]`` from the calibration record), on a sample of site images versus
a sample of calibration images (the baseline). It moved when ``rate > max(baseline * clip_ratio, baseline +
clip_floor)``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..artifacts.drift import ClippedTensor, Clipping
from .._io import sha256_file
from ..errors import CalibrationSetError, InputFileError
from .config import DriftConfig


def _sample(paths: Sequence[Path], k: int) -> list[Path]:
    if k <= 0 or len(paths) <= k:
        return list(paths)
    idx = np.unique(np.linspace(0, len(paths) - 1, k).round().astype(int))
    return [paths[i] for i in idx]



def clipping_rates(fp32_dir: str | Path, record_dir: str | Path, images: Sequence[Path]) -> dict[str, float]:
    """Per-tensor fraction of FP32 activation values outside the INT8 range, over ``images``.

    Preprocesses each image with the FP32 model's export note (``fp32_dir/export_note.json`` or the
    note embedded in the model) and counts with :func:`quantkit.quantize.compare.clipping_rates`
    (every activation marked as an output on an ordinary FP32 run, range ``[(qmin - zp) * s,
    (qmax - zp) * s]`` per channel from the record); one image at a time, only counts are kept.

    Returns:
        ``{tensor name: clipped fraction (0..1)}`` for the record's activations present in the FP32 graph.

    Raises:
        ModelError / InputFileError: model, note or record missing, unusable or not matching.
    """
    from ..artifacts.record import CalibrationRecord
    from ..imageio import load_image
    from ..modelio import check_one_image_batch
    from ..quantize.compare import clipping_rates as clipping_table
    from ..quantize.engine import load_intake

    model_path, model, note = load_intake(fp32_dir)
    check_one_image_batch(model, note.preprocessing.input_name, model_path, batch_axis=note.preprocessing.batch_axis)
    record = CalibrationRecord.load(record_dir)
    digest = sha256_file(model_path)
    if record.model_digest != digest:
        raise InputFileError(f"{model_path}: not the FP32 model {record_dir} was quantized from (its record names "
                             f"{record.model_digest[:12]}, this file is {digest[:12]}); pass that model's intake folder as --fp32")
    batches = (note.preprocessing.apply(load_image(p))[0] for p in images)
    table = clipping_table(model, record, batches, total=len(images))
    return {str(t): float(r) for t, r in zip(table["tensor"], table["clipping_rate"])}


def measure_clipping(site: Sequence[Path], calibration: Sequence[Path], fp32: Path, quantized: Path, cfg: DriftConfig) -> Clipping:
    """Clipping rate of the INT8 model on a sample of the site images vs a sample of the calibration images.

    Raises:
        CalibrationSetError: a set has no images; ModelError / InputFileError: model, note or record unusable.
    """
    site_imgs = _sample(site, cfg.clip_images)
    cal_imgs = _sample(calibration, cfg.clip_images)
    if not site_imgs or not cal_imgs:
        raise CalibrationSetError("no image files for the clipping check; add images or set drift.clipping: false")
    site_rates = clipping_rates(fp32, quantized, site_imgs)
    base_rates = clipping_rates(fp32, quantized, cal_imgs)
    rate = float(np.mean(list(site_rates.values())))
    baseline = float(np.mean(list(base_rates.values())))
    threshold = max(baseline * cfg.clip_ratio, baseline + cfg.clip_floor)
    worst = tuple(ClippedTensor(n, r) for n, r in sorted(site_rates.items(), key=lambda kv: (-kv[1], kv[0]))[:5])
    return Clipping(rate, baseline, threshold, rate > threshold, len(site_imgs), len(cal_imgs), len(site_rates), worst)

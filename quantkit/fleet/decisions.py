"""The fleet's one contact with the task adapter: FP32 and INT8 outputs of one image -> summary columns.

Everything task-specific the fleet needs (decoding outputs, what agreement with FP32 means, which
metric is primary) is asked here and nowhere else in :mod:`quantkit.fleet`; the rest of the package
only sums the columns listed in :data:`SUM_COLUMNS` and calls :func:`aggregate`.

The adapter is the deployed threshold set's (:meth:`quantkit.artifacts.ThresholdSet.make_adapter`: INT8 at
its bound thresholds; ``fp32=True``: FP32 at the FP32 thresholds), completed from the model
(:meth:`quantkit.tasks.TaskAdapter.with_model`). Agreement is the task's own primary metric
(:meth:`quantkit.tasks.TaskAdapter.primary_metric`: pixel IoU for ``db_text``, box F1 at the task's
``match_iou`` for ``box_detector``, top-1 for classifiers, exact text for recognizers), a ratio of summed
counts (:class:`quantkit.tasks.MetricSpec`); each image stores that metric's numerator and denominator
counts, so any group of images pools exactly as ``quantkit evaluate`` pools a set.

Columns per image (None where the image was not run through the models):

=====================  =======  ====================================================================
column                 type     meaning
=====================  =======  ====================================================================
n_det_fp32, n_det_int8 int      decision items (boxes, text regions, top-1 classes, lines) of each model
max_score_fp32/int8    float    highest item score (0 when there is none)
agree_num, agree_den   float    the primary metric's counts (``MetricSpec.num`` / ``.den``) for this image
agreement              float    the primary metric of this image alone (its ``empty`` value when den is 0)
=====================  =======  ====================================================================
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import numpy as np

SUM_COLUMNS: tuple[str, ...] = ("n_det_fp32", "n_det_int8", "agree_num", "agree_den")
"""Columns whose sums over any group of images give that group's agreement (:func:`aggregate`)."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("n_det_fp32", "int64"), ("n_det_int8", "int64"), ("max_score_fp32", "float64"), ("max_score_int8", "float64"),
    ("agree_num", "float64"), ("agree_den", "float64"), ("agreement", "float64"),
)
"""``(name, pandas/arrow dtype)`` of :meth:`DecisionSummarizer.summarize`'s columns, in order."""


def _metric(primary: Mapping[str, Any]) -> Any:
    from ..tasks import MetricSpec

    return MetricSpec(**{f.name: primary[f.name] for f in dataclasses.fields(MetricSpec) if f.name in primary})


def primary_label(primary: Mapping[str, Any] | str) -> str:
    """Plain name of the primary agreement metric (``primary`` as :attr:`DecisionSummarizer.primary`)."""
    return str(primary.get("label") or primary.get("name")) if isinstance(primary, Mapping) else str(primary)


class DecisionSummarizer:
    """Decides FP32 and INT8 outputs of one image with the deployed threshold set and compares them.

    Args:
        thresholds: the deployed threshold set (``quantkit bind`` output), checked against its quantized folder.
        quantized: the quantized folder holding the calibration record the set is bound to.
        int8_model: the INT8 model file (its digest must be the bound one).
        fp32_model: the FP32 model file; its graph completes the adapter (:meth:`TaskAdapter.with_model`).

    Attributes:
        primary: the task's primary agreement metric as a plain dict (``MetricSpec`` fields plus ``task``,
            the adapter name); stored in the scores so the check pools without the adapter.

    Raises:
        BindingMismatchError: the set was bound to another calibration record or model.
        InputFileError / ConfigError: the set is missing, edited, or names an unknown adapter.
    """

    def __init__(self, thresholds: str | os.PathLike[str], quantized: str | os.PathLike[str], int8_model: str | os.PathLike[str],
                 fp32_model: str | os.PathLike[str] | None = None) -> None:
        from ..artifacts import ThresholdSet
        from ..tasks import make_adapter

        ts = ThresholdSet.load_bound(thresholds, quantized, model_path=int8_model)
        self.int8 = make_adapter(ts.adapter, ts.adapter_options())
        self.fp32 = make_adapter(ts.adapter, ts.adapter_options(fp32=True))
        if fp32_model is not None:
            from ..modelio import load_model

            proto = load_model(fp32_model, load_external_data=False)
            self.int8, self.fp32 = self.int8.with_model(proto), self.fp32.with_model(proto)
        self.task = ts.adapter
        self.fingerprint = ts.fingerprint
        self.metric = self.int8.primary_metric()
        self.primary: dict[str, Any] = {**dataclasses.asdict(self.metric), "task": ts.adapter}

    def summarize(self, fp32_outputs: Mapping[str, np.ndarray], int8_outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Summary columns (:data:`COLUMNS`) of one image from each model's raw outputs (batch 1)."""
        ref = self.fp32.decide(fp32_outputs)
        dec = self.int8.decide(int8_outputs)
        s_ref, s_dec = self.fp32.summary(ref), self.int8.summary(dec)
        counts = self.int8.agreement(ref, dec)
        num, den = float(counts.get(self.metric.num, 0.0)), float(counts.get(self.metric.den, 0.0))
        return {
            "n_det_fp32": int(s_ref["n"]), "n_det_int8": int(s_dec["n"]),
            "max_score_fp32": round(float(np.nan_to_num(s_ref["max_score"], nan=0.0)), 6),
            "max_score_int8": round(float(np.nan_to_num(s_dec["max_score"], nan=0.0)), 6),
            "agree_num": num, "agree_den": den,
            "agreement": round(float(self.metric.value({self.metric.num: num, self.metric.den: den})), 6),
        }


def check_task(thresholds: str | os.PathLike[str], adapter: str) -> None:
    """Refuse a threshold set bound for another task than the scored model's (``models.<name>.task.adapter``).

    Raises:
        ConfigError: the set's adapter differs (names both and the ``quantkit bind`` fix).
        InputFileError: the set is missing or malformed.
    """
    from ..artifacts import ThresholdSet
    from ..errors import ConfigError

    ts = ThresholdSet.load(thresholds)
    if ts.adapter != adapter:
        raise ConfigError(f"{thresholds}: task {ts.adapter!r} differs from the scored model's task.adapter {adapter!r}; "
                          "point fleet.model at the model these thresholds belong to, or re-run 'quantkit bind'")


def aggregate(sums: Mapping[str, float], images: int, primary: Mapping[str, Any]) -> dict[str, float | None]:
    """Agreement of a group of scored images from its :data:`SUM_COLUMNS` sums.

    Returns:
        ``agreement`` (the primary metric: ``factor * sum(num) / sum(den)``, its ``empty`` value when the
        denominator sums to 0), ``det_fp32_per_image``, ``det_int8_per_image``; every value None when
        ``images`` is 0.
    """
    if images <= 0:
        return {"agreement": None, "det_fp32_per_image": None, "det_int8_per_image": None}
    m = _metric(primary)
    return {"agreement": float(m.value({m.num: sums.get("agree_num", 0.0), m.den: sums.get("agree_den", 0.0)})),
            "det_fp32_per_image": sums.get("n_det_fp32", 0) / images, "det_int8_per_image": sums.get("n_det_int8", 0) / images}

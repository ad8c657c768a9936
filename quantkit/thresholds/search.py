"""Operating-point re-derivation: choose a quantized model's thresholds on a reference set.

The task adapter says which thresholds exist, which output each compares and what a search for it maximises
(:class:`quantkit.tasks.ThresholdSpec`). Thresholds other than the primary one that compare an output (e.g.
DB's map binarization threshold) are chosen first by their objective against FP32's decisions; the primary
(score) threshold is then chosen by the mode (``params.yaml: thresholds.operating_point.mode``):

* ``keep_fp32`` (default): maximise the threshold's objective agreement metric with FP32's decisions at
  FP32's own thresholds (e.g. box F1 vs FP32);
* ``fixed_far``: on a negatives-only set (every image labelled with no items), the most sensitive threshold
  whose image-level false-alarm rate (share of images with >= 1 item) is ``<= target_far``; refused when the
  set has fewer than ``ceil(1 / target_far)`` images;
* ``target_recall``: highest precision among thresholds with recall ``>= target_recall`` against ground
  truth; ``best_f1``: highest F1 against ground truth. Both need labels and at least one positive item.

Searches are exhaustive over a grid (``grid_step``) plus the FP32 (and previous) values; ties go to the
value closest to FP32, and a value other than FP32's is taken only when its gain carries over to images the search
did not see: an out-of-bag bootstrap of the search itself puts the gain above zero
(:func:`quantkit.thresholds.stats.pick_significant`). Every metric is then estimated, with a
bootstrap CI, at the chosen, the FP32 and the previous calibration's thresholds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..artifacts.record import SetRef
from ..artifacts.thresholds import Bootstrap, Estimate, OperatingPoint, SearchRecord
from ..errors import CalibrationSetError, ConfigError
from ..tasks import Decision, TaskAdapter, ThresholdSpec
from .config import OperatingPointConfig
from .passes import ModelPass
from .stats import METHOD, bootstrap_ratio, grid, pick, pick_significant


@dataclasses.dataclass(frozen=True, repr=False)
class Derivation:
    """Chosen thresholds and the operating point that documents them."""

    values: dict[str, float]
    operating_point: OperatingPoint

    def __repr__(self) -> str:
        return f"Derivation({self.operating_point.mode}, {self.values})"


def _counts(sweep: Mapping[str, np.ndarray], key: str, shape: tuple[int, int]) -> np.ndarray:
    return sweep.get(key, np.zeros(shape))


def objective_search(task: TaskAdapter, spec: ThresholdSpec, refs: Sequence[Decision | None], outputs: Sequence[Any],
                     cfg: OperatingPointConfig, extra: Sequence[float], *, objective: str | None = None,
                     truth: bool = False) -> tuple[float, SearchRecord]:
    """Best value of threshold ``spec`` for an agreement (or, with ``truth``, accuracy) metric, moved away from
    the current value only on a significant gain. Returns ``(value, record of the search)``."""
    metric = task.metric(objective or spec.objective)
    cands = grid(*spec.search, cfg.grid_step, extra)
    sweep = task.sweep(spec.name, cands, refs, outputs, truth=truth)
    shape = (len(outputs), len(cands))
    num = _counts(sweep, metric.num, shape) * metric.factor
    den = _counts(sweep, metric.den, shape)
    j, sig = pick_significant(num, den, cands, float(getattr(task, spec.name)), higher_is_better=metric.higher_is_better,
                              **cfg.bootstrap_kwargs())
    return float(cands[j]), SearchRecord(len(cands), spec.search, metric.name, sig)


def _alarms(task: TaskAdapter, outputs: Sequence[Any], cands: np.ndarray) -> np.ndarray:
    """``(N, C)`` 1 where the image has at least one item at candidate threshold ``c``."""
    rows = []
    for o in outputs:
        c = task.candidates(o)
        rows.append([bool(task.keep(c.scores, float(t)).any()) for t in cands])
    return np.asarray(rows, np.int64).reshape(len(outputs), len(cands))


def fixed_far(task: TaskAdapter, spec: ThresholdSpec, int8: ModelPass, cfg: OperatingPointConfig,
              extra: Sequence[float]) -> tuple[float, SearchRecord]:
    """The most sensitive value whose false-alarm rate on a negatives-only set is ``<= target_far``.

    Raises:
        CalibrationSetError: the set is not negatives-only, or too small for the target.
    """
    need = math.ceil(1 / cfg.target_far)
    if not int8.negatives_only:
        raise CalibrationSetError(f"mode fixed_far needs a negatives-only reference set (every image labelled with no "
                                  f"'{task.LABELS}'); use one or set thresholds.operating_point.mode")
    if len(int8) < need:
        raise CalibrationSetError(f"mode fixed_far at target_far {cfg.target_far} needs >= {need} negative images, the set has "
                                  f"{len(int8)}; add images or raise target_far")
    cands = grid(*spec.search, cfg.grid_step, extra)
    far = _alarms(task, int8.outputs, cands).mean(0)
    ok = np.flatnonzero(far <= cfg.target_far)
    j = int(ok[0]) if ok.size else len(cands) - 1
    return float(cands[j]), SearchRecord(len(cands), spec.search, f"smallest threshold with false-alarm rate <= {cfg.target_far}")


def target_recall(task: TaskAdapter, spec: ThresholdSpec, int8: ModelPass, cfg: OperatingPointConfig,
                  extra: Sequence[float]) -> tuple[float, SearchRecord]:
    """Highest precision among values with recall ``>= target_recall`` against ground truth.

    Raises:
        CalibrationSetError: no value reaches the recall.
    """
    prec, rec = task.metric("precision"), task.metric("recall")
    cands = grid(*spec.search, cfg.grid_step, extra)
    sweep = task.sweep(spec.name, cands, int8.truth, int8.outputs, truth=True)
    summed = {k: v.sum(0) for k, v in sweep.items()}
    P, R = np.asarray(prec.value(summed)), np.asarray(rec.value(summed))
    ok = np.flatnonzero(R >= cfg.target_recall)
    if not ok.size:
        raise CalibrationSetError(f"mode target_recall: no threshold reaches recall {cfg.target_recall} (best {R.max():.3f}); "
                                  "lower thresholds.operating_point.target_recall")
    j = int(ok[pick(P[ok], cands[ok], float(getattr(task, spec.name)))])
    return float(cands[j]), SearchRecord(len(cands), spec.search, f"precision at recall >= {cfg.target_recall}")


def _check_truth(task: TaskAdapter, int8: ModelPass, mode: str) -> None:
    names = {m.name for m in task.ACCURACY}
    if not {"precision", "recall", "f1"} <= names:
        raise ConfigError(f"mode {mode}: task {task.name!r} has no precision/recall/F1 against ground truth; use keep_fp32 or fixed_far")
    if not int8.labelled:
        raise CalibrationSetError(f"mode {mode} needs ground-truth labels ('{task.LABELS}') on every reference image; label the set "
                                  "or use keep_fp32")
    if sum(len(t) for t in int8.truth if t is not None) == 0:
        raise CalibrationSetError(f"mode {mode}: the reference set has no positive items; precision/recall are undefined, "
                                  "use fixed_far or keep_fp32")


def estimates(task: TaskAdapter, values: Mapping[str, float], refs: Sequence[Decision], int8: ModelPass,
              cfg: OperatingPointConfig) -> tuple[dict[str, Estimate], dict[str, Estimate], Estimate]:
    """Agreement (vs FP32's decisions), accuracy (vs ground truth, when labelled) and false-alarm rate of the
    INT8 outputs at ``values``, each with a bootstrap CI over images."""
    at = task.with_thresholds(values)
    decisions = [at.decide(o) for o in int8.outputs]
    kw = cfg.bootstrap_kwargs()

    def table(specs: Sequence[Any], counts: list[dict[str, float]]) -> dict[str, Estimate]:
        out = {}
        for m in specs:
            num = [c.get(m.num, 0.0) for c in counts]
            den = [c.get(m.den, 0.0) for c in counts]
            out[m.name] = bootstrap_ratio(num, den, empty=m.empty, factor=m.factor, **kw)
        return out

    agree = table(task.AGREEMENT, [task.agreement(r, d) for r, d in zip(refs, decisions)])
    acc = table(task.ACCURACY, [task.accuracy(t, d) for t, d in zip(int8.truth, decisions)]) if int8.labelled else {}
    far = bootstrap_ratio([float(len(d) > 0) for d in decisions], np.ones(len(decisions)), **kw)
    return agree, acc, far


def derive_operating_point(task: TaskAdapter, fp32: ModelPass, int8: ModelPass, cfg: OperatingPointConfig, reference_set: SetRef,
                           *, previous_values: Mapping[str, float] | None = None) -> Derivation:
    """Choose INT8 thresholds on a reference set (see the module docstring for the modes).

    Args:
        task: the adapter at the FP32 thresholds.
        fp32, int8: cached passes of the FP32 and quantized models over the same set.
        previous_values: thresholds in use before (the previous calibration's), also estimated on the new model.

    Raises:
        CalibrationSetError / ConfigError: the set or the task cannot support the mode, or (modes other than
            ``fixed_far``) the FP32 model finds nothing on any reference image.
        ModelError: FP32's decisions show that the task misreads the model's outputs (``task.check_reference``).
    """
    fp32_vals = task.thresholds()
    values = dict(fp32_vals)
    labels: dict[str, dict[str, float]] = {"fp32_thresholds": dict(fp32_vals)}
    if previous_values and set(previous_values) == set(fp32_vals):
        labels["previous_thresholds"] = {k: float(v) for k, v in previous_values.items()}
    refs = [task.decide(o) for o in fp32.outputs]
    task.check_reference(refs)
    search: dict[str, SearchRecord] = {}

    def extra(name: str) -> list[float]:
        return [v[name] for v in labels.values()]

    for spec in task.THRESHOLDS:  # 1) thresholds on outputs other than the primary: by their objective vs FP32
        if spec.name != task.PRIMARY and spec.on_output and spec.objective:
            values[spec.name], search[spec.name] = objective_search(task.with_thresholds(values), spec, refs, int8.outputs, cfg,
                                                                    extra(spec.name))
    at = task.with_thresholds(values)  # 2) the primary threshold by the mode
    pspec = task.spec(task.PRIMARY)
    if cfg.mode == "keep_fp32":
        values[pspec.name], search[pspec.name] = objective_search(at, pspec, refs, int8.outputs, cfg, extra(pspec.name))
    elif cfg.mode == "fixed_far":
        values[pspec.name], search[pspec.name] = fixed_far(at, pspec, int8, cfg, extra(pspec.name))
    else:
        _check_truth(task, int8, cfg.mode)
        if cfg.mode == "best_f1":
            values[pspec.name], search[pspec.name] = objective_search(at, pspec, int8.truth, int8.outputs, cfg, extra(pspec.name),
                                                                      objective="f1", truth=True)
        else:
            values[pspec.name], search[pspec.name] = target_recall(at, pspec, int8, cfg, extra(pspec.name))
    if cfg.mode != "fixed_far" and refs and not any(len(r) or r.top is not None or (r.mask is not None and r.mask.any()) for r in refs):
        raise CalibrationSetError(f"{reference_set.name}: the FP32 model finds nothing on any of its {len(refs)} images at its own thresholds "
                                  f"{dict(fp32_vals)}, so agreement with it cannot be measured (it would read as perfect); check the intake's "
                                  f"preprocessing (export_note.json: scale, mean/std, colour order) and the task's thresholds, or bind on a set "
                                  f"where FP32 finds what it should")
    labels = {"chosen": dict(values), **labels}
    agreement, accuracy, far = {}, {}, {}
    for label, vals in labels.items():
        agreement[label], acc, far[label] = estimates(task, vals, refs, int8, cfg)
        if acc:
            accuracy[label] = acc
    op = OperatingPoint(mode=cfg.mode, images=len(int8), grid_step=cfg.grid_step, primary_metric=task.primary_metric().name,
                        bootstrap=Bootstrap(METHOD, cfg.bootstrap_resamples, cfg.bootstrap_seed, cfg.confidence),
                        reference_set=reference_set, search=search, thresholds={k: dict(sorted(v.items())) for k, v in labels.items()},
                        agreement=agreement, accuracy=accuracy, false_alarm_rate=far if cfg.mode == "fixed_far" else {})
    return Derivation(values, op)

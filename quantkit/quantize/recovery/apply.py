"""Run the enabled recovery techniques in order and record what each did."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...artifacts.record import CalibrationRecord
from ..config import StaticQuantConfig
from ...artifacts.fallback import RecoveryStep
from .config import RecoveryConfig

log = logging.getLogger(__name__)

Measure = Callable[[Any, CalibrationRecord, StaticQuantConfig], "float | None"]
"""``measure(float model, record with ranges, quantization config) -> worst-set metric`` of the all-8-bit model
(None: not measured here)."""


@dataclasses.dataclass
class Recovered:
    """The float model, the record whose ranges it is quantized from, the quantization config, and the steps.

    ``exact``: the model after the function-preserving steps only (folding, equalization): same nodes and names
    as ``model``; a node kept in float takes its inputs from it, since bias correction and AdaRound tune a
    layer's float parameters for its 8-bit weights and would be wrong for the float layer.
    """

    model: Any
    record: CalibrationRecord
    config: StaticQuantConfig
    steps: list[RecoveryStep]
    exact: Any = None


def apply_recovery(model: Any, record: CalibrationRecord, config: StaticQuantConfig, recovery: RecoveryConfig, *,
                   images: Sequence[np.ndarray] = (), input_name: str = "", measure: Measure | None = None,
                   metric_before: float | None = None) -> Recovered:
    """Apply ``recovery``'s techniques to a copy of ``model`` (``onnx.ModelProto``, every node named).

    Args:
        record: the base calibration record (its ``calibrated_ranges`` are the ranges the model is
            quantized from; rewrites that create tensors add theirs).
        config: the base quantization config (range search adds ``tensor_overrides``).
        images: calibration inputs (model input arrays) for the data-driven techniques.
        measure: scores the all-8-bit model after each technique (None: not measured); a step after which the
            score is lower than before it is undone (its ``detail`` gets ``reverted: true``).
        metric_before: the base model's metric (the first step's ``metric_before``).

    Raises:
        ConfigError: a data-driven technique is on and ``images`` is empty.
    """
    from ...errors import ConfigError

    m = type(model)()
    m.CopyFrom(model)
    out = Recovered(m, record, config, [], m)
    if recovery.needs_images and not len(images):
        raise ConfigError("fallback.recovery: equalization, adaround, range_search and bias_correction read calibration images; give the fallback a calibration set")
    before = metric_before
    for name, run in STEPS:
        if not getattr(recovery, name):
            continue
        kept = _Snapshot(out) if measure is not None else None
        if name not in EXACT and out.exact is out.model:
            out.exact = type(out.model)()
            out.exact.CopyFrom(out.model)
        detail = run(out, recovery, images, input_name)
        after = measure(out.model, out.record, out.config) if measure is not None else None
        if kept is not None and after is not None and before is not None and after < before:  # it made the 8-bit model worse: undone
            kept.restore(out)
            detail = {**detail, "reverted": True}
        out.steps.append(RecoveryStep(name=name, detail=detail, metric_before=before, metric_after=after))
        log.info("recovery %s: %s; metric %s -> %s%s", name, detail, before, after, "; reverted (it lowered the metric)" if detail.get("reverted") else "")
        before = before if detail.get("reverted") else after
    return out


class _Snapshot:
    """The state a recovery step starts from, to undo the step (its rewrites change the model in place)."""

    def __init__(self, out: Recovered) -> None:
        self.model = type(out.model)()
        self.model.CopyFrom(out.model)
        self.exact = None
        if out.exact is not out.model and out.exact is not None:
            self.exact = type(out.exact)()
            self.exact.CopyFrom(out.exact)
        self.record, self.config = out.record, out.config

    def restore(self, out: Recovered) -> None:
        out.model, out.record, out.config = self.model, self.record, self.config
        out.exact = self.model if self.exact is None else self.exact


def _adaround(out: Recovered, rc: RecoveryConfig, images: Sequence[np.ndarray], input_name: str) -> dict[str, Any]:
    from .adaround import adaround

    return adaround(out.model, out.config, images[: rc.images], input_name, iterations=rc.adaround_iterations)


def _fold(out: Recovered, rc: RecoveryConfig, images: Sequence[np.ndarray], input_name: str) -> dict[str, Any]:
    from .fold import fold_affine_into_next_conv, fold_conv_affine, hardswish_as_hardsigmoid, new_ranges

    n0 = len(out.model.graph.node)
    affine = fold_conv_affine(out.model)
    opset = _raise_opset_for(out, rc.hardswish_op)
    hswish = hardswish_as_hardsigmoid(out.model, rc.hardswish_op)
    ahead = fold_affine_into_next_conv(out.model)
    ranges = dict(out.record.calibrated_ranges)
    added = new_ranges(out.model, ranges)
    out.record = dataclasses.replace(out.record, calibrated_ranges={**ranges, **added})
    return {"affine_nodes_folded": len(affine), "affine_nodes_folded_ahead": len(ahead), "hardswish_rewritten": len(hswish),
            "hardswish_op": rc.hardswish_op, **({"opset_raised": opset} if opset else {}),
            "nodes_before": n0, "nodes_after": len(out.model.graph.node)}


def _raise_opset_for(out: Recovered, op: str) -> str:
    """Raise the model to ONNX opset 14 (:func:`quantkit.intake.opset.convert_opset`, onnx's version converter) when
    ``op`` is ``HardSwish``, the model imports a lower opset and has a hard-swish chain to rewrite; ``"13 -> 14"``
    then, else ``""``.

    Raises:
        ModelError: the version converter cannot convert the model (one line naming the opsets).
    """
    from ...intake.opset import convert_opset
    from ...modelio import opset_of
    from .fold import has_hardswish_chain

    before = opset_of(out.model)
    if op != "HardSwish" or before >= 14 or not has_hardswish_chain(out.model):
        return ""
    converted, _ = convert_opset(out.model, 14, name=out.model.graph.name or "model")
    out.model.CopyFrom(converted)  # in place: out.exact may be the same object
    return f"{before} -> 14"


def _equalize(out: Recovered, rc: RecoveryConfig, images: Sequence[np.ndarray], input_name: str) -> dict[str, Any]:
    from .activations import iter_activations
    from .equalize import between, equalize_pairs

    pairs = equalize_pairs(out.model)
    moved = between(out.model, pairs)
    lo = {t: np.inf for t in moved}
    hi = {t: -np.inf for t in moved}
    for acts in iter_activations(out.model, moved, images[: rc.images], input_name):
        for t in moved:
            lo[t], hi[t] = min(lo[t], float(acts[t].min())), max(hi[t], float(acts[t].max()))
    # the rescaled channels invalidate the calibrated ranges between the layers: min-max over the images instead
    ranges = {t: (lo[t], hi[t]) for t in moved if np.isfinite(lo[t])}
    out.record = dataclasses.replace(out.record, calibrated_ranges={**out.record.calibrated_ranges, **ranges})
    return {"pairs": len(pairs), "ranges_remeasured": len(ranges), "nodes": [list(p) for p in pairs[:20]]}


def _ranges(out: Recovered, rc: RecoveryConfig, images: Sequence[np.ndarray], input_name: str) -> dict[str, Any]:
    from .ranges import search_ranges

    chosen, counts = search_ranges(out.model, out.record, out.config, images[: rc.images], input_name, rc.range_candidates)
    # the candidates are quantized from the record's calibrated ranges: the chosen ones replace them there
    out.record = dataclasses.replace(out.record, calibrated_ranges={**out.record.calibrated_ranges, **chosen})
    return {"tensors": len(chosen), "chosen": counts}


def _bias(out: Recovered, rc: RecoveryConfig, images: Sequence[np.ndarray], input_name: str) -> dict[str, Any]:
    from .bias import correct_bias

    changed, shift = correct_bias(out.model, out.config, images[: rc.images], input_name)
    return {"convolutions": changed, "mean_abs_shift": shift}


EXACT = frozenset({"fold_affine", "equalization", "range_search"})
"""Steps that leave the float function as it was (range search changes ranges only)."""

STEPS = (("fold_affine", _fold), ("equalization", _equalize), ("adaround", _adaround), ("range_search", _ranges), ("bias_correction", _bias))
"""The techniques in the order they run: ``(RecoveryConfig field, step)``."""

__all__ = ["EXACT", "Measure", "Recovered", "STEPS", "apply_recovery"]

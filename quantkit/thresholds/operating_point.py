"""Operating-point re-derivation: choose a quantized model's thresholds on a reference set, and bind them.

Modes (``thresholds.operating_point.mode`` in params.yaml):

* ``keep_fp32`` (default): maximise agreement with the FP32 model's decisions at its own thresholds.
* ``fixed_far``: on a negatives-only set (every image labelled with no boxes), the most sensitive
  primary threshold whose image-level false-alarm rate (share of images with >= 1 detection) is
  ``<= target_far``; refused when the set has fewer than ``ceil(1 / target_far)`` images.
* ``target_recall``: highest precision among thresholds with recall ``>= target_recall`` vs the
  ground-truth boxes; ``best_f1``: highest F1. Both need labels and at least one positive box.

For map heads (DB) the map threshold (``thresh``) is always chosen first by pixel agreement with the
FP32 binarized map (aggregate IoU = sum of intersections / sum of unions); the mode then moves the
primary threshold (``box_thresh``). Searches are exhaustive over a grid (``grid_step``) plus the FP32
value; ties go to the value closest to FP32, and a value other than FP32's is taken only when a paired
bootstrap shows its gain over FP32's value is above zero (see :func:`_pick_significant`), so a small
reference set cannot move a threshold for a gain within its sampling noise. Model outputs are computed
once per model and cached.

Confidence intervals: percentile bootstrap over images (Efron & Tibshirani, *An Introduction to the
Bootstrap*, 1993, ch. 13), ``bootstrap_resamples`` resamples with a fixed seed, ratio-of-sums statistics.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from .._io import sha256_file
from ..artifacts.record import CalibrationRecord
from ..artifacts.thresholds import Binding, ThresholdSet
from ..config import Config
from ..errors import CalibrationSetError, ConfigError, InputFileError
from ..note import ExportNote, Transform
from ..progress import progress
from .adapters import Adapter, Decision, make_adapter, match_count, polygon_iou
from .binding import QUANT_MODEL, append_history, integer_domain_for

log = logging.getLogger(__name__)

Mode = Literal["keep_fp32", "fixed_far", "target_recall", "best_f1"]
BOOTSTRAP_METHOD = "percentile bootstrap over images (Efron & Tibshirani 1993)"


@dataclasses.dataclass(frozen=True)
class OperatingPointConfig(Config):
    """How thresholds are re-derived. ``grid_step`` in threshold units; ``confidence`` in (0, 1)."""

    mode: Mode = "keep_fp32"
    grid_step: float = 0.01
    target_far: float = 0.05
    target_recall: float = 0.9
    match_iou: float = 0.5
    bootstrap_resamples: int = 1000
    bootstrap_seed: int = 0
    confidence: float = 0.95

    def validate(self) -> None:
        if not 0 < self.grid_step <= 0.5:
            raise ConfigError(f"thresholds.operating_point.grid_step: {self.grid_step} must be in (0, 0.5]")
        for name in ("target_far", "target_recall", "match_iou", "confidence"):
            v = getattr(self, name)
            if not 0 < v < 1 and not (name == "target_recall" and v == 1):
                raise ConfigError(f"thresholds.operating_point.{name}: {v} must be in (0, 1)")
        if self.bootstrap_resamples < 10:
            raise ConfigError(f"thresholds.operating_point.bootstrap_resamples: {self.bootstrap_resamples} must be >= 10")

    def bootstrap_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`bootstrap_ratio` and :func:`_pick_significant` for this config."""
        return {"resamples": self.bootstrap_resamples, "seed": self.bootstrap_seed, "confidence": self.confidence}


@dataclasses.dataclass(frozen=True)
class ThresholdsConfig(Config):
    """``params.yaml: thresholds``. ``options`` are the adapter's settings, its FP32 thresholds included."""

    adapter: str = "db_text"
    options: dict[str, Any] = dataclasses.field(default_factory=lambda: {"thresh": 0.3, "box_thresh": 0.5, "unclip_ratio": 1.6})
    operating_point: OperatingPointConfig = dataclasses.field(default_factory=OperatingPointConfig)

    def validate(self) -> None:
        make_adapter(self.adapter, self.options)

    def fp32_adapter(self) -> Adapter:
        return make_adapter(self.adapter, self.options)


# -- cached model passes -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False)
class ModelPass:
    """Outputs of one model over a set, one image at a time: ``outputs[i]`` is ``{name: array}`` (batch 1)."""

    files: tuple[str, ...]
    outputs: tuple[dict[str, np.ndarray], ...]
    transforms: tuple[Transform, ...]
    latency_ms: tuple[float, ...]
    truth: tuple[np.ndarray | None, ...]  # (B, 4, 2) ground-truth quads in model-input pixels, None if unlabelled

    def __len__(self) -> int:
        return len(self.files)

    def __repr__(self) -> str:
        return f"ModelPass({len(self)} images)"


def truth_in_model_pixels(quads: Any, tf: Transform) -> np.ndarray | None:
    """Ground-truth quads (image pixels) -> ``(B, 4, 2) float32`` model-input pixels; None when unlabelled."""
    if quads is None:
        return None
    q = np.asarray(quads, dtype=np.float32).reshape(-1, 4, 2)
    return q * np.array([tf.scale_x, tf.scale_y], np.float32)


def run_pass(model: str | os.PathLike[str], set_dir: str | os.PathLike[str], note: ExportNote, *, desc: str = "") -> ModelPass:
    """Run ``model`` once per image of the set at ``set_dir`` (batch 1, streaming) and keep the outputs.

    Raises:
        CalibrationSetError: the set is missing, empty or has an unreadable image.
        ModelError: the model cannot be loaded.
    """
    from ..calibset import CalibrationSet
    from ..calibset.reader import CalibrationSetReader
    from ..runner import OrtRunner

    cset = CalibrationSet.load(set_dir)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    files, outs, tfs, lat, truth = [], [], [], [], []
    with OrtRunner(model) as runner:
        for entries, x, transforms in progress(reader.iter_with_transforms(), total=len(reader), desc=desc or Path(model).name):
            out = runner.infer({note.preprocessing.input_name: x})
            files.append(entries[0].file)
            outs.append(out)
            tfs.append(transforms[0])
            lat.append(runner.inference_times[-1] * 1e3)
            truth.append(truth_in_model_pixels(entries[0].text_boxes, transforms[0]))
    return ModelPass(tuple(files), tuple(outs), tuple(tfs), tuple(lat), tuple(truth))


# -- statistics ----------------------------------------------------------------------------------------


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, *, resamples: int, seed: int, confidence: float,
                    empty: float = 1.0) -> dict[str, Any]:
    """Ratio of sums ``sum(num) / sum(den)`` over images with a percentile bootstrap CI.

    ``num``, ``den``: ``(N,)`` per-image counts. Returns ``{"value", "ci": [lo, hi], "n"}``; a zero
    denominator gives ``empty`` (nothing to agree on counts as full agreement).
    """
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    n = len(num)

    def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(b > 0, a / np.where(b > 0, b, 1), empty)

    value = float(ratio(num.sum(keepdims=True), den.sum(keepdims=True))[0])
    if n == 0:
        return {"value": value, "ci": [value, value], "n": 0}
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    stats = ratio(num[idx].sum(1), den[idx].sum(1))
    a = (1 - confidence) / 2
    lo, hi = np.quantile(stats, [a, 1 - a])
    return {"value": round(value, 6), "ci": [round(float(lo), 6), round(float(hi), 6)], "n": n}


def grid(lo: float, hi: float, step: float, extra: Sequence[float] = ()) -> np.ndarray:
    """Sorted candidate thresholds ``lo, lo+step, ..., hi`` (rounded to 6 decimals) plus ``extra``."""
    k = int(math.floor((hi - lo) / step + 1e-9))
    vals = np.round(lo + step * np.arange(k + 1), 6)
    return np.unique(np.concatenate([vals, np.asarray(extra, np.float64)]))


def _pick(scores: np.ndarray, cands: np.ndarray, prefer: float) -> int:
    """Index of the best score; ties (within 1e-12) go to the candidate closest to ``prefer``."""
    best = np.flatnonzero(scores >= scores.max() - 1e-12)
    return int(best[np.argmin(np.abs(cands[best] - prefer))])


def _pick_significant(num: np.ndarray, den: np.ndarray, cands: np.ndarray, prefer: float, *, resamples: int, seed: int,
                      confidence: float) -> tuple[int, dict[str, Any]]:
    """Index of the candidate to use: the best ratio-of-sums score, but only if it beats ``prefer`` significantly.

    ``num``, ``den``: ``(N images, C candidates)`` per-image counts; the score of candidate ``c`` is
    ``num[:, c].sum() / den[:, c].sum()``. A paired percentile bootstrap over images (Efron & Tibshirani
    1993, ch. 13) gives a CI of the gain ``score(best) - score(prefer)``; when its lower bound is not above
    zero the gain is within sampling noise and the preferred (FP32) value is kept. This stops a small
    reference set from moving a threshold for a gain it cannot support.

    Returns:
        ``(index, evidence)`` with evidence ``{"best", "gain", "gain_ci", "moved"}``.
    """
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    scores = num.sum(0) / np.maximum(den.sum(0), 1e-12)
    jb = _pick(scores, cands, prefer)
    j0 = int(np.argmin(np.abs(cands - prefer)))
    evidence: dict[str, Any] = {"best": float(cands[jb]), "gain": round(float(scores[jb] - scores[j0]), 6), "gain_ci": [0.0, 0.0], "moved": False}
    if jb == j0 or len(num) == 0:
        return j0, evidence
    idx = np.random.default_rng(seed).integers(0, len(num), size=(resamples, len(num)))

    def ratio(c: int) -> np.ndarray:
        return num[idx, c].sum(1) / np.maximum(den[idx, c].sum(1), 1e-12)

    gains = ratio(jb) - ratio(j0)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(gains, [a, 1 - a])
    evidence["gain_ci"] = [round(float(lo), 6), round(float(hi), 6)]
    evidence["moved"] = bool(lo > 0)
    return (jb if lo > 0 else j0), evidence


def map_agreement_counts(int8_maps: Sequence[np.ndarray], ref_masks: Sequence[np.ndarray], cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per image and candidate ``t``: intersection and union of ``(map > t)`` with the reference mask.

    One ``searchsorted`` + ``bincount`` per image (no per-candidate pass): ``v > cands[j]`` iff
    ``searchsorted(cands, v, "left") > j``. Returns two ``(N, C) int64`` arrays.
    """
    inter = np.zeros((len(int8_maps), len(cands)), np.int64)
    union = np.zeros_like(inter)
    c32 = cands.astype(np.float32)
    for i, (m, ref) in enumerate(zip(int8_maps, ref_masks)):
        idx = np.searchsorted(c32, m.astype(np.float32).ravel(), side="left")
        r = ref.ravel()
        cin = np.bincount(idx[r], minlength=len(cands) + 1)
        cout = np.bincount(idx[~r], minlength=len(cands) + 1)
        gin = cin[::-1].cumsum()[::-1][1:]  # count with idx > j
        gout = cout[::-1].cumsum()[::-1][1:]
        inter[i] = gin
        union[i] = int(r.sum()) + gout
    return inter, union


def item_counts(cands_dec: Sequence[Decision], refs: Sequence[np.ndarray | None], ref_labels: Sequence[np.ndarray | None],
                adapter: Adapter, cands: np.ndarray, min_iou: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tp, fp, fn ``(N, C)`` of candidate items kept at each primary threshold vs reference polygons."""
    n, c = len(cands_dec), len(cands)
    tp = np.zeros((n, c), np.int64)
    fp = np.zeros_like(tp)
    fn = np.zeros_like(tp)
    for i, (d, ref) in enumerate(zip(cands_dec, refs)):
        ref = np.zeros((0, 4, 2), np.float32) if ref is None else ref
        iou = polygon_iou(d.polygons, ref)
        for j, t in enumerate(cands):
            keep = adapter.keep(d.scores, float(t))
            k = int(keep.sum())
            m = match_count(d.polygons[keep], ref, iou[keep], pred_labels=d.labels[keep], truth_labels=ref_labels[i],
                            min_iou=min_iou) if k and len(ref) else 0
            tp[i, j], fp[i, j], fn[i, j] = m, k - m, len(ref) - m
    return tp, fp, fn


def _f1_stats(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, cfg: OperatingPointConfig) -> dict[str, Any]:
    kw = cfg.bootstrap_kwargs()
    return {"f1": bootstrap_ratio(2 * tp, 2 * tp + fp + fn, **kw),
            "precision": bootstrap_ratio(tp, tp + fp, **kw),
            "recall": bootstrap_ratio(tp, tp + fn, **kw)}


# -- derivation ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False)
class Derivation:
    """Chosen thresholds and the operating point (a JSON-ready dict stored in the ThresholdSet)."""

    values: dict[str, float]
    operating_point: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values), "operating_point": self.operating_point}

    def __repr__(self) -> str:
        return f"Derivation({self.operating_point.get('mode')}, {self.values})"


def derive_operating_point(fp32_adapter: Adapter, fp32: ModelPass, int8: ModelPass, cfg: OperatingPointConfig,
                           *, previous_values: dict[str, float] | None = None, negatives_only: bool = False) -> Derivation:
    """Choose INT8 thresholds on a reference set (see the module docstring for the modes).

    Args:
        fp32_adapter: the adapter at the FP32 thresholds.
        fp32, int8: cached passes of the FP32 and quantized models over the same set.
        previous_values: thresholds in use before (the old set's), also evaluated on the new model.
        negatives_only: the set is labelled and holds no positive boxes (``fixed_far`` requires it).

    Raises:
        CalibrationSetError: the set cannot support the mode (too few negatives, no labels, no positives).
    """
    n = len(int8)
    fp32_vals = fp32_adapter.thresholds()
    values = dict(fp32_vals)
    op: dict[str, Any] = {"mode": cfg.mode, "images": n, "grid_step": cfg.grid_step, "match_iou": cfg.match_iou,
                          "bootstrap": {"method": BOOTSTRAP_METHOD, "resamples": cfg.bootstrap_resamples,
                                        "seed": cfg.bootstrap_seed, "confidence": cfg.confidence}}
    kw = cfg.bootstrap_kwargs()
    ref_dec = [fp32_adapter.decide(o) for o in fp32.outputs]
    evaluated: dict[str, dict[str, float]] = {"chosen": {}, "fp32_thresholds": fp32_vals}
    if previous_values:
        evaluated["previous_thresholds"] = dict(previous_values)

    # 1) map threshold by pixel agreement with FP32's binarized map
    map_spec = next((s for s in fp32_adapter.THRESHOLDS if s.on_output and s.reduction == "none" and s.name != fp32_adapter.PRIMARY), None)
    maps = [fp32_adapter.map_of(o) for o in int8.outputs] if map_spec else []
    pix: dict[str, Any] = {}
    if map_spec and maps and maps[0] is not None:
        t0 = fp32_vals[map_spec.name]
        extra = [t0] + [v[map_spec.name] for v in evaluated.values() if map_spec.name in v]
        cands = grid(*map_spec.search, cfg.grid_step, extra)
        ref_masks = [d.mask for d in ref_dec]
        inter, union = map_agreement_counts(maps, ref_masks, cands)
        j, evidence = _pick_significant(inter, union, cands, t0, **kw)
        values[map_spec.name] = float(cands[j])
        for label, vals in [("chosen", values), *[(k, v) for k, v in evaluated.items() if k != "chosen"]]:
            jj = int(np.flatnonzero(np.isclose(cands, vals[map_spec.name]))[0])
            pix[label] = bootstrap_ratio(inter[:, jj], union[:, jj], **kw)
        op["search"] = {map_spec.name: {"candidates": len(cands), "range": list(map_spec.search), "objective": "pixel IoU vs FP32",
                                        "significance": evidence}}

    # 2) primary threshold by the mode
    prim = fp32_adapter.PRIMARY
    pspec = fp32_adapter.spec(prim)
    at_map = fp32_adapter.with_thresholds({k: v for k, v in values.items() if k != prim})
    cand_dec = [at_map.candidates(o) for o in int8.outputs]
    extra = [fp32_vals[prim]] + [v[prim] for v in evaluated.values() if prim in v]
    cands = grid(*pspec.search, cfg.grid_step, extra)
    op.setdefault("search", {})
    prim_evidence: dict[str, Any] | None = None
    if cfg.mode == "keep_fp32":
        tp, fp, fn = item_counts(cand_dec, [d.polygons for d in ref_dec], [d.labels for d in ref_dec], at_map, cands, cfg.match_iou)
        j, prim_evidence = _pick_significant(2 * tp, 2 * tp + fp + fn, cands, fp32_vals[prim], **kw)
        objective = "decision F1 vs FP32"
    elif cfg.mode == "fixed_far":
        need = math.ceil(1 / cfg.target_far)
        if not negatives_only:
            raise CalibrationSetError("mode fixed_far needs a negatives-only reference set (labelled, no text boxes); "
                                      "use one or set thresholds.operating_point.mode")
        if n < need:
            raise CalibrationSetError(f"mode fixed_far at target_far {cfg.target_far} needs >= {need} negative images, the set has {n}; "
                                      f"add images or raise target_far")
        alarms = np.stack([[bool(at_map.keep(d.scores, float(t)).any()) for t in cands] for d in cand_dec]).astype(np.int64)
        far = alarms.mean(0)
        ok = np.flatnonzero(far <= cfg.target_far)
        j = int(ok[0]) if ok.size else len(cands) - 1
        tp = fp = fn = None
        objective = f"smallest threshold with false-alarm rate <= {cfg.target_far}"
        op["search"][prim] = {"candidates": len(cands), "range": list(pspec.search), "objective": objective}
        values[prim] = float(cands[j])
        op["false_alarm_rate"] = {}
        for label, vals in [("chosen", values), *[(k, v) for k, v in evaluated.items() if k != "chosen"]]:
            jj = int(np.flatnonzero(np.isclose(cands, vals[prim]))[0])
            op["false_alarm_rate"][label] = bootstrap_ratio(alarms[:, jj], np.ones(n), **kw)
    else:
        truth = int8.truth
        if any(t is None for t in truth):
            raise CalibrationSetError(f"mode {cfg.mode} needs ground-truth labels on every reference image; label the set or use keep_fp32")
        if sum(len(t) for t in truth) == 0:  # type: ignore[arg-type]
            raise CalibrationSetError(f"mode {cfg.mode}: the reference set has no positive boxes (single-class); "
                                      "precision/recall are undefined, use fixed_far or keep_fp32")
        tl = [np.zeros(len(t), np.int64) for t in truth]  # type: ignore[arg-type]
        tp, fp, fn = item_counts(cand_dec, list(truth), tl, at_map, cands, cfg.match_iou)
        P = tp.sum(0) / np.maximum(tp.sum(0) + fp.sum(0), 1)
        R = tp.sum(0) / np.maximum(tp.sum(0) + fn.sum(0), 1)
        if cfg.mode == "best_f1":
            j, prim_evidence = _pick_significant(2 * tp, 2 * tp + fp + fn, cands, fp32_vals[prim], **kw)
            objective = "F1 vs ground truth"
        else:
            ok = np.flatnonzero(R >= cfg.target_recall)
            if not ok.size:
                raise CalibrationSetError(f"mode target_recall: no threshold reaches recall {cfg.target_recall} "
                                          f"(best {R.max():.3f}); lower thresholds.operating_point.target_recall")
            j = int(ok[_pick(P[ok], cands[ok], fp32_vals[prim])])
            objective = f"precision at recall >= {cfg.target_recall}"
    if cfg.mode != "fixed_far":
        values[prim] = float(cands[j])
        op["search"][prim] = {"candidates": len(cands), "range": list(pspec.search), "objective": objective}
        if prim_evidence is not None:
            op["search"][prim]["significance"] = prim_evidence
        key = "agreement_vs_fp32" if cfg.mode == "keep_fp32" else "vs_ground_truth"
        op[key] = {}
        for label, vals in [("chosen", values), *[(k, v) for k, v in evaluated.items() if k != "chosen"]]:
            if vals.get(map_spec.name if map_spec else "", None) != values.get(map_spec.name if map_spec else "", None):
                # another map threshold: recount at that map threshold
                other = fp32_adapter.with_thresholds({k: v for k, v in vals.items() if k != prim})
                dec = [other.candidates(o) for o in int8.outputs]
                refs = [d.polygons for d in ref_dec] if cfg.mode == "keep_fp32" else list(int8.truth)
                labs = [d.labels for d in ref_dec] if cfg.mode == "keep_fp32" else [np.zeros(len(t), np.int64) for t in int8.truth]  # type: ignore[arg-type]
                a, b, c = item_counts(dec, refs, labs, other, np.array([vals[prim]]), cfg.match_iou)
                op[key][label] = _f1_stats(a[:, 0], b[:, 0], c[:, 0], cfg)
            else:
                jj = int(np.flatnonzero(np.isclose(cands, vals[prim]))[0])
                op[key][label] = _f1_stats(tp[:, jj], fp[:, jj], fn[:, jj], cfg)  # type: ignore[index]
    if pix:
        op["pixel_iou_vs_fp32"] = pix
    evaluated["chosen"] = dict(values)
    op["thresholds"] = {k: dict(sorted(v.items())) for k, v in evaluated.items()}
    return Derivation(values, op)


# -- bind: the stage -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False)
class BindResult:
    """What :func:`bind` wrote: the threshold set, its path, and the history line (None if unchanged)."""

    threshold_set: ThresholdSet
    path: Path
    history_entry: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "threshold_set": self.threshold_set.to_dict(), "history_entry": self.history_entry}

    def __repr__(self) -> str:
        return f"BindResult({self.path}, {self.threshold_set!r})"


def bind(quant_dir: str | os.PathLike[str], fp32_dir: str | os.PathLike[str], reference_dir: str | os.PathLike[str],
         config: ThresholdsConfig, out: str | os.PathLike[str], *, history: str | os.PathLike[str] | None = None) -> BindResult:
    """Derive thresholds for the quantized model in ``quant_dir`` and bind them to its record.

    Reads ``quant_dir/model_int8.onnx`` + ``record.json``, ``fp32_dir/model.onnx`` +
    ``export_note.json`` and the reference set; runs both models once per image; writes the
    :class:`ThresholdSet` to ``out`` (atomic, canonical JSON) and appends a line to ``history``. Thresholds
    in the previous history line (if any) are also evaluated on the new model (``previous_thresholds``).

    Raises:
        InputFileError / ModelError / CalibrationSetError / ConfigError: missing or bad inputs (one line).
    """
    from ..calibset import CalibrationSet
    from .binding import read_history

    qdir, fdir = Path(quant_dir), Path(fp32_dir)
    qmodel, fmodel = qdir / QUANT_MODEL, fdir / "model.onnx"
    for p, what in [(qmodel, "quantized model (run 'quantkit quantize')"), (fmodel, "FP32 model (run 'quantkit intake')")]:
        if not p.is_file():
            raise InputFileError(f"{p}: {what} not found")
    record = CalibrationRecord.load(qdir)
    note = ExportNote.load(fdir / "export_note.json")
    cset = CalibrationSet.load(reference_dir)
    adapter = config.fp32_adapter()
    # thresholds of the previous calibration: the latest history line bound to another record
    prev = next((h for h in reversed(read_history(history) if history else [])
                 if h.get("record_fingerprint") != record.fingerprint), None)
    prev_vals = prev.get("values") if prev and prev.get("adapter") == config.adapter else None
    fp = run_pass(fmodel, reference_dir, note, desc="bind fp32")
    q = run_pass(qmodel, reference_dir, note, desc=f"bind {qdir.name}")
    negatives_only = all(e.text_boxes is not None and len(e.text_boxes) == 0 for e in cset.entries)
    d = derive_operating_point(adapter, fp, q, config.operating_point, previous_values=prev_vals, negatives_only=negatives_only)
    op = {**d.operating_point, "reference_set": {"name": cset.name, "set_id": cset.set_id, "count": cset.count}}
    integer = integer_domain_for(adapter, d.values, qmodel, record, str(CalibrationRecord.path_in(qdir)))
    ts = ThresholdSet(
        adapter=adapter.name, options=adapter.options(), values=d.values, fp32_values=adapter.thresholds(),
        integer_domain=integer,
        binding=Binding.of(record, sha256_file(qmodel)),
        operating_point=op,
    ).sealed()
    path = ts.save(out)
    entry = append_history(history, ts) if history else None
    log.info("bound %s -> %s (%s)", qdir, path, ts)
    return BindResult(ts, path, entry)

"""The ``evaluate`` stage: FP32 and quantized models on a site set, decisions compared through the task adapter.

Every image is decoded once and each model runs once on it (streaming: one image's outputs in memory).
Variants: ``fp32`` (the task's FP32 thresholds from params), ``<role>`` (the role's bound threshold set) and
``<role>@fp32-thresholds`` (the same INT8 outputs at the FP32 thresholds: what happens when thresholds are not
re-derived). Threshold sets are checked against their records and model files first
(:meth:`quantkit.artifacts.ThresholdSet.check_binding`); a mismatch refuses before any inference.

Output folder (written atomically): ``summary.json`` (:class:`quantkit.artifacts.EvalSummary`), ``per_image.csv``
(image, variant, n_detections, the primary metric of the image, then every count behind the task's metrics),
``score_hist.json`` (``{bin_edges (1001 over [0, 1]), counts{model}, source}``: what the task's
``histogram_values`` are, accumulated per model) and ``detections.json`` (per image and variant, the decision in
source-image pixels). ``summary.json`` also holds, per role whose primary threshold has an integer form, the
decisions near the line (:class:`quantkit.artifacts.evaluation.NearLine`, :mod:`quantkit.thresholds.near_line`). Nothing machine-dependent is written (no timings), so the same inputs give the same bytes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_output_dir, atomic_write_json, atomic_write_text, sha256_file
from .._overwrite import check_output_dir
from ..artifacts.evaluation import EvalSummary, EvaluatedModel, MetricInfo, VariantSummary
from ..artifacts.record import SetRef
from ..artifacts.thresholds import ThresholdSet
from ..errors import CalibrationSetError, ConfigError, InputFileError
from ..note import ExportNote
from ..progress import progress
from ..tasks import TaskAdapter, make_adapter
from ..artifacts.record import CalibrationRecord
from ..thresholds.binding import QUANT_MODEL
from ..thresholds.causes import LikelyCause, causes_hint, likely_causes
from ..thresholds.config import ThresholdsConfig
from ..thresholds.near_line import near_line, primary_counter

log = logging.getLogger(__name__)

HIST_BINS = 1000
FP32_SUFFIX = "@fp32-thresholds"


@dataclasses.dataclass(frozen=True, repr=False)
class EvalResult:
    """What :func:`evaluate` wrote: the folder and the summary; ``low_agreement``: for each role whose primary
    agreement with FP32 at its own thresholds is below ``min_agreement``, the likely causes, most likely first
    (:func:`quantkit.thresholds.causes.likely_causes`; not written to the folder, the record is their source)."""

    path: Path
    summary: EvalSummary
    low_agreement: dict[str, tuple[LikelyCause, ...]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), **self.summary.to_dict(),
                "low_agreement": {r: [c.to_dict() for c in cs] for r, cs in sorted(self.low_agreement.items())}}

    def __repr__(self) -> str:
        return f"EvalResult({self.path}, {self.summary!r})"


def _fp32_dir(fp32_dir: str | os.PathLike[str]) -> Path:
    fdir = Path(fp32_dir)
    if fdir.is_file():
        raise InputFileError(f"{fdir}: --fp32 expects the intake folder (model.onnx + export_note.json), not a model file")
    if not (fdir / "model.onnx").is_file():
        raise InputFileError(f"{fdir / 'model.onnx'}: FP32 model not found; --fp32 expects the intake folder "
                             "(model.onnx + export_note.json): run 'quantkit intake' first")
    return fdir


def _roles(quantized: Mapping[str, tuple[str | os.PathLike[str], str | os.PathLike[str]]], task: TaskAdapter,
           fp32_digest: str) -> dict[str, tuple[Path, ThresholdSet]]:
    """Load and check every role's threshold set against its record, model file, task and FP32 model."""
    roles: dict[str, tuple[Path, ThresholdSet]] = {}
    for role, (qdir, tpath) in quantized.items():
        if role == "fp32" or FP32_SUFFIX in role:
            raise ConfigError(f"role name {role!r} is reserved; use e.g. deployed or candidate")
        qmodel = Path(qdir) / QUANT_MODEL
        if not qmodel.is_file():
            raise InputFileError(f"{qmodel}: quantized model not found; run 'quantkit quantize' first")
        ts = ThresholdSet.load_bound(tpath, qdir, model_path=qmodel)
        if ts.adapter != task.name:
            raise ConfigError(f"{tpath}: task {ts.adapter!r} differs from params task.adapter {task.name!r}; re-run 'quantkit bind'")
        if ts.binding.model_digest != fp32_digest:
            raise InputFileError(f"{tpath}: bound to FP32 model {ts.binding.model_digest[:12]} but --fp32 holds {fp32_digest[:12]}; "
                                 f"pass the intake folder the model was quantized from, or re-run quantize and bind")
        if ts.fp32_values != task.thresholds():
            log.warning("%s: FP32 thresholds %s differ from params %s; using params for the fp32 variants", tpath, ts.fp32_values, task.thresholds())
        roles[role] = (qmodel, ts)
    return roles


def image_row(image: str, variant: str, n_detections: int, counts: Mapping[str, float], primary: Any) -> dict[str, Any]:
    """One ``per_image.csv`` row: the image's item count, its primary metric (empty when undefined) and its counts."""
    value = primary.value(counts) if counts.get(primary.den, 0) > 0 else ""
    return {"image": image, "variant": variant, "n_detections": n_detections,
            f"{primary.name}": round(value, 6) if value != "" else "", **{k: round(float(v), 6) for k, v in counts.items()}}


def summarize_rows(rows: list[dict[str, Any]], variants: list[str], task: TaskAdapter, labelled: bool) -> dict[str, VariantSummary]:
    out: dict[str, VariantSummary] = {}
    keys = sorted({k for r in rows for k in r} - {"image", "variant", "n_detections", task.primary_metric().name})
    for v in variants:
        rs = [r for r in rows if r["variant"] == v]
        det = np.array([r["n_detections"] for r in rs], np.float64)
        counts = {k: round(float(sum(float(r[k]) for r in rs if r.get(k, "") != "")), 6) for k in keys}
        agreement = {m.name: round(float(m.value(counts)), 6) for m in task.AGREEMENT if v != "fp32"}
        accuracy = {m.name: round(float(m.value(counts)), 6) for m in task.ACCURACY} if labelled else {}
        out[v] = VariantSummary(images=len(rs), detections_per_image=round(float(det.mean()), 6) if len(rs) else 0.0,
                                alarm_rate=round(float((det > 0).mean()), 6) if len(rs) else 0.0,
                                agreement=agreement, accuracy=accuracy, counts=counts)
    return out


def rows_csv(rows: list[dict[str, Any]], primary: str) -> str:
    keys = sorted({k for r in rows for k in r} - {"image", "variant", "n_detections", primary})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["image", "variant", "n_detections", primary, *keys], lineterminator="\n", restval="")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def evaluate(site_dir: str | os.PathLike[str], fp32_dir: str | os.PathLike[str],
             quantized: Mapping[str, tuple[str | os.PathLike[str], str | os.PathLike[str]]],
             task: TaskAdapter, out: str | os.PathLike[str], *, min_agreement: float = 0.5,
             near_line_steps: int = ThresholdsConfig.near_line_steps) -> EvalResult:
    """Evaluate FP32 and quantized models on a site set and write the evaluation folder ``out``.

    Args:
        site_dir: a set folder (``images/`` + ``manifest.json``); labels the task reads are used when present.
        fp32_dir: the intake folder (``model.onnx`` + ``export_note.json``).
        quantized: role (``deployed``, ``candidate``) -> (quantized folder, threshold set JSON).
        task: the task adapter at the FP32 thresholds (``params.yaml: task``).
        out: output folder, replaced whole on success, untouched on failure.
        min_agreement: a role whose primary agreement with FP32 (at its own thresholds, over the set) is below this
            gets its likely causes in ``EvalResult.low_agreement`` and a warning (``thresholds.min_agreement``,
            the floor bind refuses under).
        near_line_steps: the wider band of "decisions near the line" (``thresholds.near_line_steps``): per role whose
            primary threshold has an integer form, FP32's decisions within 1 and within this many integer steps of
            it are counted and set against the threshold set's reference-set baseline (``summary.near_line``,
            :mod:`quantkit.thresholds.near_line`).

    Raises:
        BindingMismatchError: a threshold set does not belong to its quantized folder's record/model.
        InputFileError / ModelError / CalibrationSetError / ConfigError: bad inputs (one line each); ``out`` is,
            holds or lies inside an input, or is a folder another command wrote.
    """
    from ..calibset import CalibrationSet
    from ..calibset.reader import CalibrationSetReader
    from ..runner import OrtRunner

    from ..modelio import check_one_image_batch, load_model

    inputs = [site_dir, fp32_dir, *(p for pair in quantized.values() for p in pair)]
    check_output_dir(out, "evaluate", inputs=inputs)  # now, not after the models ran
    fdir = _fp32_dir(fp32_dir)
    fmodel = fdir / "model.onnx"
    fp32_digest = sha256_file(fmodel)
    note = ExportNote.load(fdir / "export_note.json")
    proto = load_model(fmodel, load_external_data=False)
    check_one_image_batch(proto, note.preprocessing.input_name, fmodel, batch_axis=note.preprocessing.batch_axis)
    task = task.with_model(proto)
    roles = _roles(quantized, task, fp32_digest)
    cset = CalibrationSet.load(site_dir, verify=True)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    variants = ["fp32"] + list(roles) + [r + FP32_SUFFIX for r in roles]
    tasks = {"fp32": task, **{r: make_adapter(ts.adapter, ts.adapter_options()).with_model(proto) for r, (_, ts) in roles.items()}, **{r + FP32_SUFFIX: task for r in roles}}
    edges = np.linspace(0.0, 1.0, HIST_BINS + 1)
    hist = {m: np.zeros(HIST_BINS, np.int64) for m in ["fp32", *roles]}
    rows: list[dict[str, Any]] = []
    detections: dict[str, dict[str, Any]] = {}
    primary = task.primary_metric()
    counters = {r: c for r, (_, ts) in roles.items() if (c := primary_counter(task, ts.integer_domain)) is not None}
    runners = {"fp32": OrtRunner(fmodel, name="fp32"), **{r: OrtRunner(m, name=r) for r, (m, _) in roles.items()}}
    labelled = True
    for r in runners.values():
        r.activate()
    try:
        for entries, x, tfs in progress(reader.iter_with_transforms(), total=len(reader), desc=f"evaluate {cset.name}"):
            e, tf = entries[0], tfs[0]
            feed = {note.preprocessing.input_name: x}
            outputs = {m: r.infer(feed) for m, r in runners.items()}
            if not rows:
                for m, o in outputs.items():
                    task.check_outputs({k: list(v.shape) for k, v in o.items()})
            try:
                truth = task.truth(e.labels, tf)
            except (TypeError, ValueError, KeyError, IndexError) as err:  # a label the task cannot read: name the image
                raise CalibrationSetError(f"{Path(cset.root) / e.file}: its labels {dict(e.labels or {})} are not what the {task.name} task "
                                          f"reads ({type(err).__name__}: {err}); fix them in the set's labels and register it as a new version") from None
            if truth is None and e.labels and labelled:  # labels present but not the task's key: say so once, not a silent no-accuracy
                log.warning("%s: %s has labels %s but no %r, the key the %s task reads; accuracy against the labels is left out",
                            cset.name, e.file, sorted(e.labels), task.LABELS, task.name)
            labelled = labelled and truth is not None
            decs = {v: tasks[v].decide(outputs[v.split("@")[0]]) for v in variants}
            for m in hist:
                hist[m] += np.histogram(np.clip(tasks[m].histogram_values(outputs[m]), 0, 1), edges)[0]
            if counters:
                near = task.near_line_values(outputs["fp32"])  # FP32's decisions, one decode for every role
                for c in counters.values():
                    c.add(near)
            detections[e.file] = {}
            for v in variants:
                counts = dict(task.agreement(decs["fp32"], decs[v])) if v != "fp32" else {}
                if truth is not None:
                    counts.update(task.accuracy(truth, decs[v]))
                rows.append(image_row(e.file, v, len(decs[v]), counts, primary))
                detections[e.file][v] = decs[v].to_json(tf)
    finally:
        for r in runners.values():
            r.deactivate()
    summary = EvalSummary(
        site_set=SetRef(path=Path(cset.root).as_posix(), set_id=cset.set_id, name=cset.name, camera=cset.camera, lighting=cset.lighting, count=cset.count),
        fp32_model_digest=fp32_digest, task=task.name, task_options=task.options(), primary_metric=primary.name,
        metrics=tuple([MetricInfo(m.name, m.label, "agreement", m.higher_is_better, m.description) for m in task.AGREEMENT]
                      + [MetricInfo(m.name, m.label, "accuracy", m.higher_is_better, m.description) for m in task.ACCURACY]),
        item=task.ITEM, scores=task.SCORES, labelled=labelled, images=len(detections), fp32_thresholds=task.thresholds(),
        variants=summarize_rows(rows, variants, task, labelled),
        models={r: EvaluatedModel(ts.binding.record_fingerprint, ts.binding.quantized_model_digest, ts.binding.calibration_set_name,
                                  ts.fingerprint, dict(ts.values), dict(ts.fp32_values),
                                  {k: v.decision_value for k, v in ts.integer_domain.items()}) for r, (_, ts) in roles.items()},
        near_line={r: near_line(c.result(), roles[r][1].near_line, near_line_steps,
                                roles[r][1].operating_point.reference_set.name if roles[r][1].operating_point else "")
                   for r, c in counters.items()},
    )
    with atomic_output_dir(out, command="evaluate", inputs=inputs) as tmp:
        atomic_write_text(tmp / "per_image.csv", rows_csv(rows, primary.name))
        atomic_write_json(tmp / "score_hist.json", {"bin_edges": [round(float(v), 6) for v in edges],
                                                    "counts": {k: v.tolist() for k, v in hist.items()}, "source": task.SCORES})
        atomic_write_json(tmp / "detections.json", {"coordinates": "source image pixels", "images": detections})
        summary.save(tmp / EvalSummary.FILENAME)
    return EvalResult(Path(out), summary, _low_agreement(summary, quantized, primary, min_agreement))


def _low_agreement(summary: EvalSummary, quantized: Mapping[str, tuple[str | os.PathLike[str], str | os.PathLike[str]]],
                   primary: Any, floor: float) -> dict[str, tuple[LikelyCause, ...]]:
    """The likely causes for each role below ``floor`` on the primary agreement metric (logged as warnings)."""
    out: dict[str, tuple[LikelyCause, ...]] = {}
    for role, (qdir, _) in quantized.items():
        value = summary.variants[role].agreement.get(primary.name)
        if value is None or value >= floor:
            continue
        out[role] = likely_causes(CalibrationRecord.load(qdir), summary.site_set)
        log.warning("%s: %s %.3f vs FP32 on %s is below thresholds.min_agreement %g; %s", role, primary.label, value,
                    summary.site_set.name, floor, causes_hint(out[role]))
    return out

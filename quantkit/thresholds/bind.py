"""The ``bind`` stage: derive a quantized model's thresholds on a reference set and bind them to its record."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from .._io import sha256_file
from .._overwrite import check_output_file
from ..artifacts.record import CalibrationRecord, SetRef
from ..artifacts.thresholds import Binding, ThresholdSet
from ..errors import AgreementError, InputFileError
from ..modelio import check_one_image_batch, load_model
from ..note import ExportNote
from ..tasks import TaskAdapter
from .binding import QUANT_MODEL, append_history, integer_domain_for, read_history
from .causes import causes_hint, likely_causes
from .config import ThresholdsConfig
from .near_line import near_line_counts
from .passes import run_pass
from .search import derive_operating_point

log = logging.getLogger(__name__)


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


def _previous_values(history: str | os.PathLike[str] | None, record: CalibrationRecord, task: TaskAdapter) -> dict[str, float] | None:
    """Thresholds of the previous calibration: the latest history line bound to another record, same task."""
    prev = next((h for h in reversed(read_history(history) if history else []) if h.get("record_fingerprint") != record.fingerprint), None)
    return prev.get("values") if prev and prev.get("adapter") == task.name else None


def _refuse_disagreement(ts: ThresholdSet, task: TaskAdapter, config: ThresholdsConfig, qdir: Path, record: CalibrationRecord,
                         reference: SetRef) -> None:
    """Raise :class:`AgreementError` when the primary agreement is below ``config.min_agreement``, with the likely
    causes in order (:func:`.causes.likely_causes`)."""
    op = ts.operating_point
    est = op.primary() if op else None
    if est is None or est.value >= config.min_agreement:
        return
    metric = task.primary_metric()
    raise AgreementError(
        f"{qdir}: the quantized model's decisions do not agree with FP32's: {metric.label} {est} on {est.n} reference images "
        f"is below thresholds.min_agreement {config.min_agreement:g}; no thresholds written; "
        + causes_hint(likely_causes(record, reference)))


def bind(quant_dir: str | os.PathLike[str], fp32_dir: str | os.PathLike[str], reference_dir: str | os.PathLike[str],
         task: TaskAdapter, config: ThresholdsConfig, out: str | os.PathLike[str], *,
         history: str | os.PathLike[str] | None = None) -> BindResult:
    """Derive thresholds for the quantized model in ``quant_dir`` and bind them to its record.

    Reads ``quant_dir/model_int8.onnx`` + ``record.json``, ``fp32_dir/model.onnx`` + ``export_note.json`` and
    the reference set; runs both models once per image; writes the :class:`ThresholdSet` to ``out`` (atomic,
    canonical JSON) and appends a line to ``history``. FP32's decisions on the reference set are counted near the
    bound primary threshold (``near_line``: the baseline of "decisions near the line",
    :mod:`quantkit.thresholds.near_line`). The previous calibration's thresholds (last history
    line bound to another record) are estimated on the new model too.

    Raises:
        BindingMismatchError: ``fp32_dir`` holds another model than the one ``quant_dir`` was quantized from.
        AgreementError: the primary agreement metric at the chosen thresholds is below ``config.min_agreement``
            (nothing is written); the message lists the likely causes, most likely first, each with its params fix.
        ThresholdRangeError: a threshold's integer form lies outside its output tensor's codes (it could never
            fire, or always fires); the message names the representable float range and the fix.
        InputFileError / ModelError / CalibrationSetError / ConfigError: missing or bad inputs (one line); ``out``
            is an input, lies inside an input folder, or is an existing file that is not a threshold set.
    """
    from ..calibset import CalibrationSet

    qdir, fdir = Path(quant_dir), Path(fp32_dir)
    check_output_file(ThresholdSet.path_in(out), ThresholdSet.file_kind(), inputs=[qdir, fdir, reference_dir, history])
    qmodel, fmodel = qdir / QUANT_MODEL, fdir / "model.onnx"
    for p, what in [(qmodel, "quantized model (run 'quantkit quantize')"), (fmodel, "FP32 model (run 'quantkit intake')")]:
        if not p.is_file():
            raise InputFileError(f"{p}: {what} not found")
    record = CalibrationRecord.load(qdir)
    note = ExportNote.load(fdir / "export_note.json")
    fproto = load_model(fmodel, load_external_data=False)
    check_one_image_batch(fproto, note.preprocessing.input_name, fmodel, batch_axis=note.preprocessing.batch_axis)
    record.check_quantized_from(fmodel, CalibrationRecord.path_in(qdir))
    cset = CalibrationSet.load(reference_dir, verify=True)
    task = task.with_model(fproto)
    fp = run_pass(fmodel, reference_dir, note, task, desc="bind fp32")
    q = run_pass(qmodel, reference_dir, note, task, desc=f"bind {qdir.name}")
    ref = SetRef(set_id=cset.set_id, name=cset.name, camera=cset.camera,
                 lighting=cset.lighting, count=cset.count)
    d = derive_operating_point(task, fp, q, config.operating_point, ref, previous_values=_previous_values(history, record, task))
    integer_domain = integer_domain_for(task, d.values, qmodel, record, str(CalibrationRecord.path_in(qdir)))
    ts = ThresholdSet(
        adapter=task.name, options=task.options(), values=d.values, fp32_values=task.thresholds(),
        integer_domain=integer_domain, binding=Binding.of(record, sha256_file(qmodel)), operating_point=d.operating_point,
        near_line=near_line_counts(task, fp.outputs, integer_domain),
    ).sealed()
    _refuse_disagreement(ts, task, config, qdir, record, ref)
    path = ts.save(out)
    entry = append_history(history, ts) if history else None
    log.info("bound %s -> %s (%s)", qdir, path, ts)
    return BindResult(ts, path, entry)

"""What every quantization engine shares around its own call: the intake read, the model prepared, the quantized file
finished (note embedded, loaded and run by ONNX Runtime at its deployment level) and the record assembled.

ORT's engine (:mod:`.engine`) and NNCF's (:mod:`.nncf_engine`) both go through these, so their files and records are
checked and built the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..artifacts.record import CalibrationRecord, SetRef, TensorScale
from ..calibset import CalibrationSet
from ..errors import ConfigError, ModelError, TargetSupportError
from ..modelio import load_model
from ..note import ExportNote
from ..versions import CORE, tool_versions
from .runtime_check import check_runs, combination_fix

MODEL_FILE = "model_int8.onnx"
RECORD_FILE = "record.json"


def load_intake(intake: str | Path) -> tuple[Path, Any, ExportNote]:
    """Resolve an intake folder (or a model file) to ``(model_path, ModelProto, ExportNote)``.

    Raises:
        ModelError: model missing, not ONNX, or without a note.
    """
    p = Path(intake)
    model_path = p / "model.onnx" if p.is_dir() else p
    if not model_path.is_file():
        raise ModelError(f"{model_path}: model not found; run 'quantkit intake MODEL --out {p}' first")
    model = load_model(model_path)
    sidecar = model_path.parent / "export_note.json"
    note = ExportNote.load(sidecar) if sidecar.is_file() else ExportNote.from_model(model, path=str(model_path))
    return model_path, model, note


def constants_to_initializers(model: Any) -> int:
    """Move ``Constant`` nodes with a tensor ``value`` into the initializer list, in place; returns how many."""
    import onnx

    keep, moved = [], 0
    for n in model.graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            model.graph.initializer.append(t)
            moved += 1
        else:
            keep.append(n)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return moved


def finish(tmp_model: Path, note: ExportNote, dest: Path, config: Any) -> tuple[Any, bytes]:
    """Embed the note, write the model to ``dest`` (inside the output's temporary folder) and check the runtime
    loads and runs it at its deployment level; returns (ModelProto, bytes).

    Raises:
        TargetSupportError: it cannot; ``dest`` is removed (the caller's output folder is discarded anyway).
    """
    import onnx

    q = onnx.load(str(tmp_model))
    note.embed(q)
    data = q.SerializeToString()
    dest.write_bytes(data)
    try:
        check_runs(dest, name=dest.name, fix=combination_fix(config))
    except TargetSupportError:
        dest.unlink()
        raise
    return q, data


def load_set(calibration_set: Any) -> Any:
    """The calibration set, every image re-hashed: a set whose image was overwritten after registration must
    not be calibrated under its old set id (the record would then name content it was not calibrated on)."""
    if calibration_set is None:
        raise ConfigError("static quantization needs --calibration-set DIR (or use --dynamic)")
    if isinstance(calibration_set, (str, Path)):
        return CalibrationSet.load(calibration_set, verify=True)
    calibration_set.verify()
    return calibration_set


def make_record(tensors: tuple[TensorScale, ...], model_digest: str, qdigest: str, cs_info: SetRef | None, config: Any,
                opset_before: int, opset_after: int, mode: str, calib: dict[str, Any], packages: tuple[str, ...] = CORE) -> CalibrationRecord:
    """The record of a written model (fingerprint sealed); ``packages``: whose versions it names (:func:`quantkit.versions.tool_versions`)."""
    set_id = cs_info.set_id if cs_info else None
    chash = config.config_hash()
    return CalibrationRecord(
        fingerprint=CalibrationRecord.compute_fingerprint(tensors, model_digest, set_id, chash), model_digest=model_digest,
        quantized_model_digest=qdigest, calibration_set=cs_info, config=config.to_dict(), config_hash=chash,
        opset_before=opset_before, opset_after=opset_after, versions=tool_versions(packages), tensors=tensors, mode=mode,
        calibration=calib)


def set_ref(cset: CalibrationSet) -> SetRef:
    """A record's reference to the calibration set ``cset``."""
    return SetRef(path=str(cset.root), set_id=cset.set_id, name=cset.name, camera=cset.camera, lighting=cset.lighting, count=cset.count)

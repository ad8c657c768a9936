"""Promote a model's candidate to deployed (``quantkit models promote``): the last step of the recalibration loop.

The main job's candidate (dvc.yaml ``compose_candidate`` .. ``bind_candidate``) is calibrated on a set composed from
the model's own pool (``work/models/<model>/calibsets/candidate``) with the ``quantize_candidate`` settings. Promoting
it copies that composed set into the model's ``sets.calibration`` folder as a registered set of its own (the work
folder is a stage output: ``dvc repro`` may rewrite it), points ``sets.deployed.calibration`` at it, and writes the
candidate's calibration settings that differ from the deployed ones under ``models.<model>.quantize``. The next
``dvc repro`` recalibrates the deployed model on it, re-binds its thresholds (the history file keeps both versions)
and rebuilds every target runtime's bundle.

What a recalibration does not reproduce is said, not hidden: nodes the precision fallback kept in float and its recovery
steps (``fallback.json``) belong to the candidate's own file; ship exactly that file with ``quantkit bundle``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from ..artifacts.fallback import FallbackResult
from ..artifacts.record import CalibrationRecord
from ..errors import BindingMismatchError, InputFileError
from ..paramsfile import set_model_keys
from .manifest import IMAGES, MANIFEST, CalibrationSet, register_set
from .model_sets import model_sets

SETTINGS = ("method", "percentile", "calibration_symmetric", "symmetric_activations", "num_bins", "num_quantized_bins",
            "distribution_scenario", "moving_average", "averaging_constant", "per_channel", "activation_type", "weight_type",
            "symmetric_weights", "reduce_range")
"""The calibration settings a promotion carries from the candidate's record to ``models.<model>.quantize`` (what
calibrates; placement, format and engine stay the deployed model's, as its target runtimes need them): each one whose
value in the candidate's record differs from the deployed record's."""


@dataclasses.dataclass(frozen=True)
class Promotion:
    """What :func:`promote_candidate` did: the registered set (``path``, ``name``, ``set_id``), the params keys it
    wrote (dotted under ``models.<model>``) and what a recalibration does not reproduce (plain sentences)."""

    model: str
    path: Path
    name: str
    set_id: str
    written: dict[str, Any]
    not_reproduced: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "path": self.path.as_posix(), "name": self.name, "set_id": self.set_id,
                "written": dict(self.written), "not_reproduced": list(self.not_reproduced)}


def promote_candidate(params: str | Path, model: str, work: str | Path = "work/models") -> Promotion:
    """Make ``model``'s candidate its deployed calibration (see the module docstring); edits ``params`` in place.

    Args:
        params: the params file (``models.<model>.sets`` names the calibration folder).
        model: a model under ``models``.
        work: the folder of the models' work folders (the pipeline's ``work/models``).

    Raises:
        InputFileError: the candidate or its composed set is missing (run ``dvc repro`` first), or a different set of
            that name already lies in the calibration folder.
        BindingMismatchError: the candidate's record was calibrated on another set than the composed one.
        ConfigError: the model or its sets are missing in params.
    """
    sets = model_sets(params, model)
    w = Path(work) / model
    record_dir, composed = w / "quantize" / "candidate", w / "calibsets" / "candidate"
    if not (record_dir / "record.json").is_file() or not (composed / MANIFEST).is_file():
        raise InputFileError(f"{w}: no candidate to promote (quantize/candidate/record.json and calibsets/candidate/); run 'dvc repro' first")
    record = CalibrationRecord.load(record_dir)
    cset = CalibrationSet.load(composed, verify=True)
    if record.calibration_set is None or record.calibration_set.set_id != cset.set_id:
        raise BindingMismatchError(f"{record_dir}: the candidate was calibrated on set {record.calibration_set.set_id[:12] if record.calibration_set else 'none'}, "
                                   f"not on {composed} ({cset.set_id[:12]}); run 'dvc repro' so they belong together")
    name = f"candidate-{cset.set_id[:8]}"
    dest = Path(params).resolve().parent / sets.folder("calibration") / name
    if dest.exists():
        if not (dest / MANIFEST).is_file() or CalibrationSet.load(dest).set_id != cset.set_id:
            raise InputFileError(f"{dest}: exists and is not this candidate's set; move it away first")
    else:  # the same images, registered under the name params will use (its set_id is the composed set's: same content)
        tmp = dest.with_name(f".{name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(composed / IMAGES, tmp / IMAGES)
        labels = {e.file: dict(e.labels) for e in cset.entries if e.labels}
        register_set(tmp, name=name, kind="calibration", camera=cset.camera, lighting=cset.lighting, site=cset.site,
                     captured_at={e.file: e.captured_at for e in cset.entries if e.captured_at}, labels=labels or None,
                     generator=cset.generator)
        tmp.rename(dest)
    deployed = CalibrationRecord.load(w / "quantize" / "deployed").config if (w / "quantize" / "deployed" / "record.json").is_file() else {}
    written: dict[str, Any] = {"sets.deployed.calibration": name}
    written.update({f"quantize.{k}": record.config[k] for k in SETTINGS if k in record.config and record.config[k] != deployed.get(k)})
    set_model_keys(params, model, written)
    return Promotion(model, dest, name, cset.set_id, written, _not_reproduced(record_dir))


def _not_reproduced(record_dir: Path) -> tuple[str, ...]:
    """Sentences on what a recalibration on the promoted set will not reproduce of the candidate's file."""
    path = record_dir / FallbackResult.FILENAME
    if not path.is_file():
        return ()
    fb = FallbackResult.load(record_dir)
    out = []
    if fb.kept:
        out.append(f"the candidate keeps {len(fb.kept)} nodes in float (precision fallback): a recalibration quantizes them")
    if fb.recovery:
        out.append(f"the candidate's recovery steps ({', '.join(s.name for s in fb.recovery)}) are not part of a recalibration")
    if out:
        out.append(f"to ship exactly the candidate's file, bundle {record_dir} with 'quantkit bundle' and verify it on each target runtime")
    return tuple(out)

"""The ``params.yaml`` sections quantkit reads, by name: the data under the params reference (:mod:`quantkit.params`)
and the misspelt-section check of :func:`quantkit.config.load_params`, both of which import it."""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any

from .errors import ConfigError

log = logging.getLogger(__name__)

SECTIONS: dict[str, str] = {
    "demo": "quantkit.demo.synth:DemoConfig",
    "intake": "quantkit.intake.prepare:IntakeConfig",
    "quantize": "quantkit.quantize.config:StaticQuantConfig",
    "quantize.dynamic": "quantkit.quantize.config:DynamicQuantConfig",
    "quantize_candidate": "quantkit.quantize.config:StaticQuantConfig",
    "fallback": "quantkit.quantize.fallback.config:FallbackConfig",
    "task": "quantkit.tasks.config:TaskConfig",
    "task.options (db_text)": "quantkit.tasks.maps:DBTextAdapter",
    "task.options (box_detector)": "quantkit.tasks.boxes:BoxDetectorAdapter",
    "task.options (classifier)": "quantkit.tasks.classify:ClassifierAdapter",
    "task.options (ctc_text)": "quantkit.tasks.ctc:CTCTextAdapter",
    "task.options (segmentation)": "quantkit.tasks.segmentation:SegmentationAdapter",
    "thresholds": "quantkit.thresholds.config:ThresholdsConfig",
    "drift": "quantkit.drift.config:DriftConfig",
    "report": "quantkit.report.config:ReportConfig",
    "measure": "quantkit.report.measure:MeasureConfig",
    "bundle": "quantkit.bundle.build:BundleConfig",
    "bundle.verify": "quantkit.bundle.verify:VerifyConfig",
    "verify": "quantkit.bundle.deployment:DeploymentVerifyConfig",
    "export": "quantkit.export.config:TorchExportConfig",
    "fleet": "quantkit.fleet.config:FleetConfig",
    "sets": "quantkit.calibset.model_sets:ModelSets",
    "candidate": "quantkit.calibset.model_sets:CandidateConfig",
}
"""``params.yaml`` section (dotted for a nested one) -> ``"module:ConfigClass"`` read from it."""

NOT_CONFIG = {
    "models": "the main job's models: ``{name: {source: demo|file, file: PATH, intake: {...}, task: {...}}}`` (``source: file``, the "
              "default: your own file, a dependency no stage writes; ``demo``: written by the demo_model stage); every stage of "
              "dvc.yaml runs for each, on the model's own image sets (``sets``); `quantkit <cmd> --model NAME` reads "
              "``models.NAME.<section>`` merged key by key over the top-level section (`quantkit params show --model NAME`)",
    "targets": "``{runtime: {recipes: [NAME, ...]}}`` or ``{runtime: {placement: NAME}}``: the target runtimes of each model's "
               "deployed INT8 (dvc.yaml ``place`` .. ``verify``), one file per runtime, bound, bundled to ``dist/<model>/<runtime>/`` "
               "and verified on that runtime. ``recipes``: each built from the deployed calibration set (a placement of the deployed "
               "record's ranges, ``nncf`` = NNCF's own file, ``nncf:<placement>`` = NNCF's ranges in that placement, ``fallback`` = only when none of the "
               "others meets, the precision fallback from the most agreeing fast file), judged on the runtime (agreement on the deployed reference set, speed against its best float run) and the one chosen written with "
               "``choice.json`` (:mod:`quantkit.quantize.recipes`; `quantkit quantize --ranges-from RECORD --role deployed --model NAME "
               "--target RUNTIME`). ``placement``: that one placement of the deployed record's ranges (:mod:`quantkit.quantize.placement`); "
               "with ``quantize.engine: nncf`` ``nncf`` and ``openvino`` give NNCF's own file (:func:`quantkit.quantize.placement.target_engine`)",
}
"""Top-level ``params.yaml`` keys that are not a config section (listed in the reference as they are)."""


def known_top_level() -> set[str]:
    """Every top-level ``params.yaml`` key quantkit reads: the first part of each :data:`SECTIONS` name and
    :data:`NOT_CONFIG`'s keys."""
    return {name.split(" ")[0].split(".")[0] for name in SECTIONS} | set(NOT_CONFIG)


MODEL_SOURCES = ("demo", "file")
"""``models.<name>.source``: ``demo`` (the demo_model stage writes ``file`` from a wheel) or ``file`` (the user's own
file: a dependency of the model's intake, never a stage's output). The default is ``file``."""


MODEL_ONLY = ("sets",)
"""Sections that belong to one model: written under ``models.<name>`` only (a top-level one is refused)."""

NOT_PER_MODEL = ("demo", "fleet", "models", "candidate")
"""Top-level keys a model's entry cannot override (they are the pipeline's, not one model's)."""

MOVED = {
    "calibrations": "models.<name>.sets.calibration (a folder of sets) and models.<name>.sets.deployed",
    "site_sets": "models.<name>.sets.site (a folder of site sets)",
    "calibration_set": "models.<name>.sets.calibration (a folder of sets) and models.<name>.sets.deployed.calibration",
    "reference_set": "models.<name>.sets.reference (a folder of sets) and models.<name>.sets.deployed.reference",
    "reference_sets": "models.<name>.sets.reference (a folder of sets)",
    "pool": "models.<name>.sets.calibration (every set in it is the candidate's pool)",
}
"""Set keys written where quantkit does not read them -> where they go (``config._check_keys`` refuses them there)."""


def check_keys(path: Path, data: Any) -> None:
    """Refuse a misspelt section: a top-level key (or a key of ``models.<name>``) that is not a known section but
    reads like one (difflib ratio >= 0.75, e.g. ``reprot``, ``quantise``). A known name plus ``_suffix``
    (``quantize_night``, ``export_kw``) is a named variant a command reads with ``--section``; other unknown
    top-level keys may belong to the user's own DVC stages: both are logged at debug level, not refused. Under
    ``models.<name>`` every key must be ``source`` (``demo`` or ``file``), ``file`` or a section a model may override
    (not ``demo``, ``fleet``, ``candidate``). A set key where quantkit does not read it (``calibrations``, ``site_sets``,
    ``pool``, at the top or in a model; :data:`quantkit.sections.MOVED`) and a model's own section at the top
    (``sets``) are refused, naming where they go.

    Raises:
        ConfigError: naming the key and the section it resembles.
    """
    if not isinstance(data, dict):
        return
    known = known_top_level()
    for key in data:
        if key in MOVED:
            raise ConfigError(f"{path}: top-level {key!r} is not read: each model has its own sets; write {MOVED[key]} "
                              "('quantkit params sets' lists the keys)")
        if key in MODEL_ONLY:
            raise ConfigError(f"{path}: top-level {key!r} is not read: it belongs to one model; move it under models.<name>.{key}")
        if key in known or any(str(key).startswith(k + "_") for k in known):  # a named variant read with --section
            continue
        near = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.75)
        if near:
            raise ConfigError(f"{path}: unknown section {key!r}; did you mean {near[0]!r}? ('quantkit params' lists every section)")
        log.debug("%s: top-level key %r is not a quantkit section (left to other DVC stages)", path, key)
    models = data.get("models")
    if isinstance(models, dict):
        allowed = (known - set(NOT_PER_MODEL)) | {"file", "source"}
        for name, entry in models.items():
            for key in entry if isinstance(entry, dict) else ():
                if key in MOVED:
                    raise ConfigError(f"{path}: models.{name}.{key} is not read; write {MOVED[key].replace('<name>', str(name))} "
                                      "('quantkit params sets' lists the keys)")
                if key in NOT_PER_MODEL:
                    raise ConfigError(f"{path}: models.{name}.{key} is not read: {key!r} is the pipeline's, not one model's; "
                                      f"set it at the top level")
                if key not in allowed:
                    near = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.6)
                    hint = f"did you mean {near[0]!r}?" if near else "a model takes 'source', 'file' and per-model sections (intake, task, ...)"
                    raise ConfigError(f"{path}: models.{name}: unknown key {key!r}; {hint}")
            source = entry.get("source", "file") if isinstance(entry, dict) else "file"
            if source not in MODEL_SOURCES:
                raise ConfigError(f"{path}: models.{name}.source: {source!r} is not one of {', '.join(MODEL_SOURCES)}")

"""The ``params.yaml`` sections quantkit reads, by name: the data under the params reference (:mod:`quantkit.params`)
and the misspelt-section check of :func:`quantkit.config.load_params`, both of which import it."""

from __future__ import annotations

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
}
"""``params.yaml`` section (dotted for a nested one) -> ``"module:ConfigClass"`` read from it."""

NOT_CONFIG = {
    "models": "the main job's models: ``{name: {source: demo|file, file: PATH, intake: {...}, task: {...}}}`` (``source: file``, the "
              "default: your own file, a dependency no stage writes; ``demo``: written by the demo_model stage); every stage of "
              "dvc.yaml runs for each; `quantkit <cmd> --model NAME` reads "
              "``models.NAME.<section>`` first, then the top-level section (``intake`` and ``task`` as above)",
    "calibrations": "``{role: {calibration_set: DIR, reference_set: DIR}}`` for the deployed role (dvc.yaml, "
                    "and `quantkit quantize/bind --role ROLE`); the candidate is built by the candidate stages (``candidate``)",
    "candidate": "read by dvc.yaml only (compose_candidate .. bind_candidate): ``images_per_set`` (of the deployed set and of "
                 "each pool set), ``pool`` (``{pool: [SET, ...]}``: sets covering the conditions drift flags), ``reference_sets``, "
                 "and their renderings as `quantkit fallback` / `calibset compose` flags (``reference_args``, ``reference_union``)",
    "targets": "``{runtime: {placement: NAME}}``: the target runtimes of each model's deployed INT8 (dvc.yaml ``place`` .. "
               "``verify``): one file per runtime from the deployed record's ranges with that runtime's Q/DQ placement "
               "(`quantkit quantize --ranges-from RECORD --target RUNTIME`), bound, bundled to ``dist/<model>/<runtime>/`` "
               "and verified on that runtime; placements in :mod:`quantkit.quantize.placement`",
    "site_sets": "the site set names (folders under ``site_sets/``) evaluated, verified and reported (dvc.yaml, "
                 "`quantkit verify --site-sets-from`)",
}
"""Top-level ``params.yaml`` keys that are not a config section (listed in the reference as they are)."""


def known_top_level() -> set[str]:
    """Every top-level ``params.yaml`` key quantkit reads: the first part of each :data:`SECTIONS` name and
    :data:`NOT_CONFIG`'s keys."""
    return {name.split(" ")[0].split(".")[0] for name in SECTIONS} | set(NOT_CONFIG)


MODEL_SOURCES = ("demo", "file")
"""``models.<name>.source``: ``demo`` (the demo_model stage writes ``file`` from a wheel) or ``file`` (the user's own
file: a dependency of the model's intake, never a stage's output). The default is ``file``."""

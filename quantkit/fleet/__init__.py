"""A fleet of cameras: per-camera drift and INT8 agreement over many site images, scored on Dask.

* :mod:`.manifest`: the fleet manifest (Parquet/CSV), built from a folder tree or checked;
* :mod:`.score`: ``score_fleet`` — a Dask graph over shards (camera x time window) of paths; workers
  (:mod:`.scorer`) keep their ONNX Runtime sessions; mergeable summaries (:mod:`.summaries`);
* :mod:`.check`: ``check_fleet`` — each camera against its own reference windows (:mod:`.camera`,
  :mod:`.effects`), rollups, ranked cameras, plain-words reasons; :mod:`.truth` scores planted events;
* :mod:`.report`: ``write_fleet_report`` — one self-contained HTML page;
* :mod:`.decisions`: the one module that talks to the task adapter.
"""

from .check import CameraCheck, FleetCheck, check_fleet
from .config import FleetCheckConfig, FleetConfig, FleetReportConfig, FleetScoreConfig, load_fleet_config
from .manifest import FleetManifest, ManifestCheck, check_manifest, load_manifest, register_tree
from .report import write_fleet_report
from .score import ScoreResult, score_fleet

__all__ = [
    "CameraCheck", "FleetCheck", "FleetCheckConfig", "FleetConfig", "FleetManifest", "FleetReportConfig", "FleetScoreConfig", "ManifestCheck",
    "ScoreResult", "check_fleet", "check_manifest", "load_fleet_config", "load_manifest", "register_tree", "score_fleet", "write_fleet_report",
]

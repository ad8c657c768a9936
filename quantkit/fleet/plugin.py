"""The Dask worker plugin that gives each worker its own :class:`~quantkit.fleet.scorer.Scorer` (imports distributed)."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from .scorer import Scorer, ScoringSpec


class ScorerPlugin(WorkerPlugin):
    """Builds one :class:`Scorer` per Dask worker when the worker starts (and again on a restarted one),
    after giving OpenCV's thread pool the worker's cores (as ONNX Runtime's intra-op threads)."""

    def __init__(self, spec: ScoringSpec) -> None:
        self.spec = spec
        self.name = spec.plugin_name
        self.scorer: Scorer | None = None

    def setup(self, worker: Any) -> None:
        import cv2

        cv2.setNumThreads(self.spec.ort_threads)
        self.scorer = Scorer(self.spec)

    def teardown(self, worker: Any) -> None:
        if self.scorer is not None:
            self.scorer.close()
            self.scorer = None

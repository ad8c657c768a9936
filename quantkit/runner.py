"""ONNX Runtime runners in Polygraphy's shape: a context manager with ``activate / infer / deactivate``.

The base class checks state and times calls; subclasses fill in the ``*_impl`` methods. Layer-wise
comparison is "mark tensors as outputs" on an ordinary run (:func:`with_outputs`), not a second path.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import ModelError


class Runner:
    """Base runner. Use as ``with runner: runner.infer({...})``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_active = False
        self.inference_times: list[float] = []

    def activate(self) -> "Runner":
        if self.is_active:
            raise RuntimeError(f"{self.name} is already active")
        self.activate_impl()
        self.is_active = True
        return self

    def deactivate(self) -> None:
        if self.is_active:
            self.deactivate_impl()
            self.is_active = False

    def infer(self, feed: dict[str, np.ndarray], output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Run one inference; returns ``{output name: array}`` and records the wall time in seconds."""
        if not self.is_active:
            raise RuntimeError(f"{self.name} must be activated before infer()")
        t0 = time.perf_counter()
        out = self.infer_impl(feed, output_names)
        self.inference_times.append(time.perf_counter() - t0)
        return out

    def __enter__(self) -> "Runner":
        return self.activate()

    def __exit__(self, *exc: Any) -> None:
        self.deactivate()

    def activate_impl(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def deactivate_impl(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def infer_impl(self, feed: dict[str, np.ndarray], output_names: Sequence[str] | None) -> dict[str, np.ndarray]:  # pragma: no cover
        raise NotImplementedError


class OrtRunner(Runner):
    """Runs a model with ONNX Runtime.

    Args:
        model: path to an ``.onnx`` file or serialized model bytes.
        providers: execution providers in priority order (default CPU).
        graph_optimization_level: ``"disable" | "basic" | "extended" | "all"`` (ORT's levels).
        intra_op_num_threads: 0 lets ORT choose; ``QUANTKIT_THREADS`` overrides when set.
    """

    _LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes,
        *,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        graph_optimization_level: str = "all",
        intra_op_num_threads: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(name or (Path(model).name if not isinstance(model, bytes) else "model"))
        if graph_optimization_level not in self._LEVELS:
            raise ValueError(f"graph_optimization_level must be one of {sorted(self._LEVELS)}")
        self.model = model
        self.providers = tuple(providers)
        self.graph_optimization_level = graph_optimization_level
        self.intra_op_num_threads = int(os.environ.get("QUANTKIT_THREADS", intra_op_num_threads))
        self.session: Any = None

    def activate_impl(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self._LEVELS[self.graph_optimization_level])
        opts.intra_op_num_threads = self.intra_op_num_threads
        opts.log_severity_level = 3
        src: bytes | str = self.model if isinstance(self.model, bytes) else os.fspath(self.model)
        if isinstance(src, str) and not Path(src).is_file():
            raise ModelError(f"{src}: model file not found; check the path or run the stage that writes it")
        try:
            self.session = ort.InferenceSession(src, sess_options=opts, providers=list(self.providers))
        except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"{self.name}: ONNX Runtime cannot load the model ({first}); run 'quantkit inspect' on it") from None

    def deactivate_impl(self) -> None:
        self.session = None

    def infer_impl(self, feed: dict[str, np.ndarray], output_names: Sequence[str] | None) -> dict[str, np.ndarray]:
        names = list(output_names) if output_names else [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feed)))

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.session.get_inputs()]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]


def with_outputs(model: Any, tensor_names: Sequence[str]) -> Any:
    """Return a copy of an ``onnx.ModelProto`` whose graph also outputs ``tensor_names``.

    Types are left unset (ORT infers them); names already outputs are skipped. This is Polygraphy's
    ``ModifyOutputs``: layer-wise comparison reuses ordinary inference.
    """
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in tensor_names:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    return m

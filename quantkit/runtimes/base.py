"""The runtime interface: one small class per inference runtime, in Polygraphy's runner shape.

A :class:`Runtime` is a context manager with ``activate / infer / deactivate``. The base class checks
state, exposes chosen intermediate tensors as graph outputs (:func:`with_outputs`, Polygraphy's
``ModifyOutputs``) and times every call; a plug-in fills in the ``*_impl`` methods and says who it is
(:meth:`Runtime.info`), how it executed each node (:meth:`Runtime.node_precisions`) and whether it can
run a model at all (:meth:`Runtime.probe_support`). Only a plug-in module imports its runtime's Python
package; everything else in quantkit talks to this interface (STYLE.md habit 13).

Exposing a tensor as an output is an ordinary run of a *modified* model: a runtime that fuses nodes
(OpenVINO's CPU plugin, ORT above level ``disable``) may compile it differently from the unmodified
model. Localisation on the target therefore cuts the graph instead (:mod:`quantkit.runtimes.localize`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import ConfigError, ModelError

#: numpy dtype name -> the short precision names runtimes print (OpenVINO's element type names).
PRECISION_NAMES = {"float32": "f32", "float": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                   "uint8": "u8", "int8": "i8", "uint16": "u16", "int16": "i16", "int32": "i32", "int64": "i64",
                   "int4": "i4", "uint4": "u4", "bool": "boolean"}
INTEGER_PRECISIONS = frozenset({"u8", "i8", "u4", "i4", "u16", "i16"})
"""Precisions that count as integer (quantized) execution of a Conv/MatMul."""


@dataclasses.dataclass(frozen=True)
class RuntimeInfo:
    """Who ran a model, and with which settings that change numbers.

    name: registry name (``onnxruntime``, ``openvino``). version: the installed package's version.
    device: execution provider or device, with the CPU's name where the runtime reports it.
    inference_precision: the precision float operations are computed in (``f32``; OpenVINO's CPU plugin
        would use ``bf16`` on CPUs with AVX-512 BF16/AMX unless pinned). options: every setting quantkit
        passed (optimization level, threads, precision hint), as strings.
    """

    name: str
    version: str
    device: str
    inference_precision: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """Short name for tables: ``onnxruntime[all]``, ``openvino[CPU f32]``."""
        opts = dict(self.options)
        if "graph_optimization_level" in opts:
            return f"{self.name}[{opts['graph_optimization_level']}]"
        return f"{self.name}[{self.device.split(' ')[0]} {self.inference_precision}]"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "device": self.device,
                "inference_precision": self.inference_precision, "options": dict(self.options), "label": self.label}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RuntimeInfo":
        return cls(str(d["name"]), str(d["version"]), str(d["device"]), str(d["inference_precision"]),
                   tuple(sorted((str(k), str(v)) for k, v in dict(d.get("options") or {}).items())))


@dataclasses.dataclass(frozen=True)
class NodePrecision:
    """How the runtime executed one of its (possibly fused) nodes.

    node: the runtime's node name. op_type: the runtime's kernel or layer type (``QLinearConv``,
    ``Convolution``). precision: short name of the data type it computed in (:data:`PRECISION_NAMES`).
    original: the ONNX nodes it covers (best effort; empty when the runtime does not say).
    time_ms: measured execution time of one inference, where the runtime profiles it.
    """

    node: str
    op_type: str
    precision: str
    original: tuple[str, ...] = ()
    time_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "original": list(self.original)}


@dataclasses.dataclass(frozen=True)
class NodeIssue:
    """Something a runtime refused: a node (or ``<model>``), its op type, and the runtime's own words.

    kind: ``load`` (the runtime refused to read or compile the model), ``unsupported_op`` (the runtime says
    it has no implementation), ``run`` (inference failed).
    """

    node: str
    op_type: str
    kind: str
    detail: str


@dataclasses.dataclass(frozen=True)
class SupportProbe:
    """What a runtime did with a model: which nodes it refused while loading and compiling (its own account),
    and whether one inference on the probe inputs then ran (``run_error`` = its first line, else "").

    A run failure on probe inputs is not evidence that an operator is unsupported (data-dependent inputs such
    as shapes or axes may be invalid when random), so it is reported apart from ``issues``.
    """

    runtime: RuntimeInfo | None
    loaded: bool
    issues: tuple[NodeIssue, ...]
    how: str
    run_error: str = ""


#: The most ``QUANTKIT_THREADS`` threads per CPU core :func:`env_threads` accepts (more only adds scheduling).
MAX_THREADS_PER_CPU = 4


def env_threads(default: int) -> int:
    """The thread count ``QUANTKIT_THREADS`` pins (it overrides every runtime's own), else ``default``.

    Raises:
        ConfigError: ``QUANTKIT_THREADS`` is set to something other than a non-negative integer, or to more than
            :data:`MAX_THREADS_PER_CPU` threads per CPU core (every runtime would start that many threads, each
            with its own stack and scratch memory: 99999 took 16 GB and never finished).
    """
    raw = os.environ.get("QUANTKIT_THREADS", "").strip()
    if not raw:
        return int(default)
    if not raw.isdigit():
        raise ConfigError(f"QUANTKIT_THREADS={raw!r}: not a thread count; set a whole number (0 = the runtime chooses) or unset it")
    return checked_thread_count("QUANTKIT_THREADS", raw, int(raw), "or 0 for the runtime's choice")


def checked_thread_count(var: str, raw: str, n: int, alternative: str = "") -> int:
    """``n``, the thread count environment variable ``var`` (set to ``raw``) asks for.

    Raises:
        ConfigError: more than :data:`MAX_THREADS_PER_CPU` threads per CPU core.
    """
    cores = os.cpu_count() or 1
    if n > MAX_THREADS_PER_CPU * cores:
        raise ConfigError(f"{var}={raw!r}: more than {MAX_THREADS_PER_CPU} threads per CPU core ({cores} here); "
                          f"set at most {MAX_THREADS_PER_CPU * cores}{', ' + alternative if alternative else ''}")
    return n


def first_line(e: BaseException | str) -> str:
    """The informative part of a runtime's multi-line C++ message, on one line: ``Exception from <file>`` lines
    are dropped and ``Check 'x' failed at <file>:<line>:`` becomes ``Check 'x' failed:``."""
    lines = []
    for ln in str(e).splitlines():
        ln = ln.strip()
        if not ln or re.match(r"^Exception from \S+:\d+:?$", ln):
            continue
        lines.append(re.sub(r" at \S+:\d+:?$", ":", ln))
    text = " ".join(lines)
    return text[:300] if text else type(e).__name__ if isinstance(e, BaseException) else "no message"


def as_model_bytes(model: Any, outputs: Sequence[str] = ()) -> tuple[bytes | str, str]:
    """``(path or serialized bytes, display name)`` of a model, with ``outputs`` added as graph outputs.

    Raises:
        ModelError: a path that does not exist, or a file that is not ONNX when outputs must be added.
    """
    import onnx

    if isinstance(model, onnx.ModelProto):
        return with_outputs(model, outputs).SerializeToString() if outputs else model.SerializeToString(), model.graph.name or "model"
    if isinstance(model, (bytes, bytearray)):
        if not outputs:
            return bytes(model), "model"
        return with_outputs(onnx.load_from_string(bytes(model)), outputs).SerializeToString(), "model"
    path = Path(os.fspath(model))
    if not path.is_file():
        raise ModelError(f"{path}: model file not found; check the path or run the stage that writes it")
    if not outputs:
        return str(path), path.name
    try:
        proto = onnx.load(str(path))
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends
        raise ModelError(f"{path}: not a readable ONNX model ({first_line(e)}); re-run the stage that writes it") from None
    return with_outputs(proto, outputs).SerializeToString(), path.name


def onnx_node_names(model: Any) -> dict[str, str]:
    """``{name a runtime may use for a node: ONNX node name}``: each node's name and each of its output tensor
    names (OpenVINO names an operation after the output tensor when that tensor is a graph output).
    Unnamed nodes are ``<op_type>_<index>``."""
    out: dict[str, str] = {}
    for i, n in enumerate(model.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        for o in n.output:
            if o:
                out.setdefault(o, name)
        out[name] = name
    return out


def with_outputs(model: Any, tensor_names: Sequence[str]) -> Any:
    """A copy of an ``onnx.ModelProto`` whose graph also outputs ``tensor_names``.

    Types are left unset (the runtime infers them); names already outputs are skipped. This is
    Polygraphy's ``ModifyOutputs``: layer-wise comparison reuses ordinary inference.
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


class Runtime:
    """Base of every runtime plug-in. Use as ``with make_runtime(...) as rt: rt.infer({...})``.

    Subclasses set :attr:`NAME` and implement ``activate_impl``, ``deactivate_impl``, ``infer_impl``,
    ``input_names_impl``, ``output_names_impl``, ``info_impl``, and the class methods ``version`` and
    ``is_available``; ``node_precisions_impl`` and ``probe_support`` where the runtime can tell.

    Args:
        model: ``.onnx`` path, serialized bytes or ``onnx.ModelProto``.
        outputs: intermediate tensors to expose as extra graph outputs (changes what a fusing runtime compiles).
        name: display name in messages (default: the file name).
    """

    NAME: ClassVar[str] = ""

    def __init__(self, model: Any, *, outputs: Sequence[str] = (), name: str | None = None) -> None:
        self.model = model
        self.outputs = tuple(outputs)
        src_name = Path(os.fspath(model)).name if isinstance(model, (str, os.PathLike)) else "model"
        self.name = name or src_name
        self.is_active = False
        self.inference_times: list[float] = []
        #: a runtime that keeps compiled models for reuse in this process (OpenVINO) does not add this one to its
        #: cache when False (a cached one is still used): set it for one-shot models (localization's cut models,
        #: pattern cases) so they do not evict the ones a command activates again
        self.cache_compiled = True

    # -- lifecycle (Polygraphy's shape) ---------------------------------------------------------------
    def activate(self) -> "Runtime":
        """Load and compile the model.

        Raises:
            ModelError: the runtime refuses the model (message names the model and the runtime's reason).
        """
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
        """Run one inference: ``{input name: array}`` -> ``{output name: array}`` (all outputs, or ``output_names``).

        The wall time of the call (seconds) is appended to :attr:`inference_times`.
        """
        self._need_active("infer()")
        t0 = time.perf_counter()
        out = self.infer_impl(feed, output_names)
        self.inference_times.append(time.perf_counter() - t0)
        return out

    def __enter__(self) -> "Runtime":
        return self.activate()

    def __exit__(self, *exc: Any) -> None:
        self.deactivate()

    def _need_active(self, what: str) -> None:
        if not self.is_active:
            raise RuntimeError(f"{self.name} must be activated before {what}")

    # -- what the runtime tells ----------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        self._need_active("input_names")
        return self.input_names_impl()

    @property
    def output_names(self) -> list[str]:
        self._need_active("output_names")
        return self.output_names_impl()

    def info(self) -> RuntimeInfo:
        """Name, version, device, inference precision and options of the active runtime."""
        self._need_active("info()")
        return self.info_impl()

    def node_precisions(self, feed: dict[str, np.ndarray]) -> tuple[NodePrecision, ...]:
        """Run ``feed`` once and return the runtime's own account of each executed node's precision
        (empty when the runtime does not tell)."""
        self._need_active("node_precisions()")
        return tuple(self.node_precisions_impl(feed))

    # -- plug-in hooks --------------------------------------------------------------------------------
    @classmethod
    def version(cls) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def is_available(cls) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def probe_support(cls, model: Any, feed: dict[str, np.ndarray], **options: Any) -> SupportProbe:  # pragma: no cover
        """Load ``model`` (an ``onnx.ModelProto``) with ``options`` and run ``feed``; name what was refused."""
        raise NotImplementedError

    def activate_impl(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def deactivate_impl(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def infer_impl(self, feed: dict[str, np.ndarray], output_names: Sequence[str] | None) -> dict[str, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def input_names_impl(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def output_names_impl(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def info_impl(self) -> RuntimeInfo:  # pragma: no cover - abstract
        raise NotImplementedError

    def node_precisions_impl(self, feed: dict[str, np.ndarray]) -> list[NodePrecision]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, active={self.is_active})"

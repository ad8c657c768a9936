"""OpenVINO plug-in: the ONNX file read by OpenVINO's ONNX frontend and compiled for a device (CPU).

OpenVINO executes a QDQ model's quantized groups with integer kernels (its "low precision
transformations"); the compiled model's runtime graph (``CompiledModel.get_runtime_model()``) says, per
executed node, which original layers it covers (``originalLayersNames``), its layer type and the precision
it ran in (``runtimePrecision``); with ``PERF_COUNT`` it also gives each node's time (``execTimeMcs``).

**Inference precision is pinned.** The CPU plugin's default ``INFERENCE_PRECISION_HINT`` is ``bf16`` on CPUs
with AVX-512 BF16 or AMX, so the same model gives different numbers on different CPU generations. quantkit
compiles with ``INFERENCE_PRECISION_HINT=f32`` unless told otherwise and records both the requested pin and
the precision the compiled model reports (:meth:`RuntimeInfo.options`).

Support (:meth:`OpenVinoRuntime.probe_support`): ``Core.read_model`` refuses ONNX operators the frontend
cannot convert and names them ("No conversion rule found for operations: ..."); ``Core.query_model`` maps
each operation to a device (operations left out are unsupported there); then the model is compiled and
run once. ``query_model`` can list every operation as supported while the numbers are still wrong: that
is what ``quantkit verify`` and the pattern suite are for.

**Compiled models are reused.** ``compile_model`` costs 0.3-1.5 s per model on a 2-core CPU, and one ``verify``
activates the same file several times (outputs, decisions, latency): the last :data:`COMPILED_CACHE_SIZE`
compiled models are kept per process, keyed by the SHA-256 of the model bytes, the exposed outputs, the
device and the compile configuration. Each :class:`OpenVinoRuntime` creates its own infer request from the
shared ``CompiledModel`` (OpenVINO's compiled models are thread-safe; requests are not); the support probe
shares the cache. Models with external data are compiled afresh.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import re
import threading
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError, ModelError
from .base import NodeIssue, NodePrecision, Runtime, RuntimeInfo, SupportProbe, as_model_bytes, env_threads, first_line, onnx_node_names

PRECISIONS = ("f32", "bf16", "f16", "default")
"""``default`` sets no ``INFERENCE_PRECISION_HINT``: the plugin's own choice (bf16 on CPUs with AVX-512 BF16 / AMX), how a user
who compiles the FP32 file without options runs it; :meth:`OpenVinoRuntime.info` reports what it chose."""
_UNCONVERTED = re.compile(r"(?:No conversion rule found for operations|Conversion is failed for):\s*([^\n]+)")
COMPILED_CACHE_SIZE = 4
_COMPILED: "collections.OrderedDict[tuple, tuple[Any, Any]]" = collections.OrderedDict()
_COMPILED_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _core() -> Any:
    import openvino as ov

    return ov.Core()


class OpenVinoRuntime(Runtime):
    """Runs a model with OpenVINO.

    Args:
        model: ``.onnx`` path, serialized bytes or ``onnx.ModelProto``.
        device: OpenVINO device name (``CPU``).
        inference_precision: ``INFERENCE_PRECISION_HINT`` (``f32`` default, pinned; ``bf16`` / ``f16`` to
            reproduce what the plugin would choose on its own; ``default``: no hint, the plugin chooses).
        num_threads: ``INFERENCE_NUM_THREADS`` (0 = the plugin chooses; ``QUANTKIT_THREADS`` overrides).
        outputs: intermediate tensors to expose as extra graph outputs (changes what the plugin compiles).
        name: display name in messages.

    Raises:
        ConfigError: an unknown precision.
    """

    NAME = "openvino"

    def __init__(self, model: Any, *, device: str = "CPU", inference_precision: str = "f32", num_threads: int = 0,
                 outputs: Sequence[str] = (), name: str | None = None) -> None:
        super().__init__(model, outputs=outputs, name=name)
        if inference_precision not in PRECISIONS:
            raise ConfigError(f"inference_precision: {inference_precision!r} is not one of {', '.join(PRECISIONS)}")
        self.device = device
        self.inference_precision = inference_precision
        self.num_threads = env_threads(num_threads)
        self.compiled: Any = None
        self.request: Any = None
        self.ov_model: Any = None
        self._out_index: dict[str, int] = {}
        self._out_names: list[str] = []

    @classmethod
    def version(cls) -> str:
        import openvino as ov

        return str(ov.__version__).split("-")[0]

    @classmethod
    def is_available(cls) -> bool:
        try:
            import openvino  # noqa: F401
        except ImportError:
            return False
        return True

    @classmethod
    def default_inference_precision(cls, device: str = "CPU") -> str:
        """The precision ``device``'s plugin would choose without a hint (``bf16`` on CPUs with AVX-512 BF16 / AMX)."""
        got = _core().get_property(device, "INFERENCE_PRECISION_HINT")
        return got.get_type_name() if hasattr(got, "get_type_name") else str(got)

    def _config(self, perf_count: bool = False) -> dict[str, str]:
        cfg = {} if self.inference_precision == "default" else {"INFERENCE_PRECISION_HINT": self.inference_precision}
        if self.num_threads:
            cfg["INFERENCE_NUM_THREADS"] = str(self.num_threads)
        if perf_count:
            cfg["PERF_COUNT"] = "YES"
        return cfg

    def _read(self) -> Any:
        src, _ = as_model_bytes(self.model, self.outputs)
        try:
            return _core().read_model(model=src)
        except Exception as e:  # noqa: BLE001 - OpenVINO raises RuntimeError with the frontend's report
            self.load_error = str(e)
            raise ModelError(f"{self.name}: OpenVINO cannot read the model ({_unconverted(str(e)) or first_line(e)}); run 'quantkit support --target openvino' on it") from None

    def _compile(self, perf_count: bool = False) -> Any:
        try:
            return _core().compile_model(self.ov_model, self.device, self._config(perf_count))
        except Exception as e:  # noqa: BLE001
            self.load_error = str(e)
            raise ModelError(f"{self.name}: OpenVINO cannot compile the model for {self.device} ({first_line(e)})") from None

    def activate_impl(self) -> None:
        self.load_error = ""
        self._load()
        self.request = self.compiled.create_infer_request()
        self._out_index, self._out_names = _output_index(self.compiled, self.model, self.outputs)

    def _load(self) -> None:
        """Set :attr:`ov_model` and :attr:`compiled`, from the compiled-model cache when this model, outputs, device
        and configuration were compiled before in this process (an already read :attr:`ov_model` is kept)."""
        key = self._cache_key()
        with _COMPILED_LOCK:
            hit = _COMPILED.get(key) if key else None
            if hit:
                _COMPILED.move_to_end(key)
        if hit:
            if self.ov_model is None:
                self.ov_model = hit[0]
            self.compiled = hit[1]
            return
        if self.ov_model is None:
            self.ov_model = self._read()
        self.compiled = self._compile()
        if key and self.cache_compiled:
            with _COMPILED_LOCK:
                _COMPILED[key] = (self.ov_model, self.compiled)
                while len(_COMPILED) > COMPILED_CACHE_SIZE:
                    _COMPILED.popitem(last=False)

    def _cache_key(self) -> tuple | None:
        """``(sha256 of the model, outputs, device, config)``, or None for what is not cached (external data)."""
        model = self.model
        if isinstance(model, (bytes, bytearray)):
            data = bytes(model)
        elif hasattr(model, "SerializeToString"):
            data = model.SerializeToString()
        else:
            path = os.fspath(model)
            try:
                data = open(path, "rb").read()
            except OSError:
                return None  # _read names the missing file
            if b"location" in data and _uses_external_data(path):
                return None
        return (hashlib.sha256(data).hexdigest(), tuple(self.outputs), self.device, tuple(sorted(self._config().items())))

    def deactivate_impl(self) -> None:
        self.request = self.compiled = self.ov_model = None

    def infer_impl(self, feed: dict[str, np.ndarray], output_names: Sequence[str] | None) -> dict[str, np.ndarray]:
        self.request.infer(feed)
        names = list(output_names) if output_names else self.output_names_impl()
        out = {}
        for n in names:
            if n not in self._out_index:
                raise ModelError(f"{self.name}: {n!r} is not an output of the compiled model; expose it with outputs=[...]")
            out[n] = np.array(self.request.get_output_tensor(self._out_index[n]).data, copy=True)
        return out

    def input_names_impl(self) -> list[str]:
        return [p.get_any_name() for p in self.compiled.inputs]

    def output_names_impl(self) -> list[str]:
        return list(self._out_names)

    def info_impl(self) -> RuntimeInfo:
        core = _core()
        got = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        got_name = got.get_type_name() if hasattr(got, "get_type_name") else str(got)
        try:
            device = f"{self.device} ({core.get_property(self.device, 'FULL_DEVICE_NAME')})"
        except Exception:  # noqa: BLE001 - a device without that property
            device = self.device
        threads = self.compiled.get_property("INFERENCE_NUM_THREADS")
        return RuntimeInfo(self.NAME, self.version(), device, got_name,
                           (("INFERENCE_PRECISION_HINT", self.inference_precision), ("compiled_inference_precision", got_name),
                            ("INFERENCE_NUM_THREADS", str(threads)), ("device", self.device)))

    def node_precisions_impl(self, feed: dict[str, np.ndarray]) -> list[NodePrecision]:
        compiled = self._compile(perf_count=True)
        request = compiled.create_infer_request()
        request.infer(feed)
        out = []
        for op in compiled.get_runtime_model().get_ordered_ops():
            rt = op.get_rt_info()

            def get(key: str, rt: Any = rt) -> str:
                return rt[key].astype(str) if key in rt else ""

            layers = tuple(n for n in get("originalLayersNames").split(",") if n)
            t = get("execTimeMcs")
            out.append(NodePrecision(op.get_friendly_name(), get("layerType"), get("runtimePrecision"), layers,
                                     float(t) / 1000.0 if t.lstrip("-").isdigit() and int(t) >= 0 else None))
        return out

    @classmethod
    def probe_support(cls, model: Any, feed: dict[str, np.ndarray], *, device: str = "CPU", inference_precision: str = "f32", **_: Any) -> SupportProbe:
        """``read_model`` (unconverted operators named), ``query_model`` (operations the device lacks), compile
        at ``inference_precision``, run ``feed`` once."""
        how = f"openvino {cls.version()} {device}: read_model, query_model, compiled ({inference_precision}) and ran"
        rt = cls(model.SerializeToString(), device=device, inference_precision=inference_precision, name=model.graph.name or "model")
        try:
            rt.ov_model = rt._read()
        except ModelError:
            return SupportProbe(None, False, tuple(_unconverted_issues(rt.load_error, model)), how)
        try:
            placed = _core().query_model(rt.ov_model, device)
        except Exception as e:  # noqa: BLE001 - a plugin transformation can throw while placing (seen on a QDQ classifier)
            return SupportProbe(None, False, (NodeIssue("<model>", "", "load", f"query_model failed: {first_line(e)}"),), how)
        nodes = onnx_node_names(model)
        missing = [op for op in rt.ov_model.get_ordered_ops() if op.get_friendly_name() not in placed]
        if missing:
            issues = tuple(NodeIssue(nodes.get(op.get_friendly_name(), op.get_friendly_name()), op.get_type_name(), "unsupported_op",
                                     f"query_model places {op.get_type_name()} on no {device} plugin") for op in missing)
            return SupportProbe(None, True, issues, how)
        try:
            rt._load()
        except ModelError:
            return SupportProbe(None, False, (NodeIssue("<model>", "", "load", first_line(rt.load_error)),), how)
        rt.request = rt.compiled.create_infer_request()
        rt._out_index, rt._out_names = _output_index(rt.compiled, model, ())
        rt.is_active = True
        try:
            info = rt.info()
            try:
                rt.request.infer(feed)
            except Exception as e:  # noqa: BLE001
                return SupportProbe(info, True, (), how, first_line(e))
        finally:
            rt.deactivate()
        return SupportProbe(info, True, (), how)


def _output_index(compiled: Any, model: Any, extra: Sequence[str]) -> tuple[dict[str, int], list[str]]:
    """``({output name: port index}, [name per port])``: the ports' tensor names, and the ONNX graph output names in
    order, which are the names reported (a port carries several names, e.g. the producing node's output too)."""
    import onnx

    index: dict[str, int] = {}
    for i, port in enumerate(compiled.outputs):
        for n in port.get_names():
            index.setdefault(n, i)
    if isinstance(model, onnx.ModelProto):
        graph_outputs = [o.name for o in model.graph.output]
    elif isinstance(model, (bytes, bytearray)):
        graph_outputs = [o.name for o in onnx.load_from_string(bytes(model)).graph.output]
    else:
        graph_outputs = [o.name for o in onnx.load(os.fspath(model), load_external_data=False).graph.output]
    names = graph_outputs + [n for n in extra if n not in graph_outputs]
    if len(names) != len(compiled.outputs):
        return index, [p.get_any_name() for p in compiled.outputs]
    for i, n in enumerate(names):
        index.setdefault(n, i)
    return index, names


def _uses_external_data(path: str) -> bool:
    import onnx
    from onnx.external_data_helper import uses_external_data

    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - not ONNX: _read reports it
        return True
    return any(uses_external_data(t) for t in proto.graph.initializer)


def clear_compiled_cache() -> None:
    """Drop every cached compiled model (frees their memory)."""
    with _COMPILED_LOCK:
        _COMPILED.clear()


def _unconverted(message: str) -> str:
    m = _UNCONVERTED.search(message)
    return f"unconverted: {m.group(1).strip()}" if m else ""


def _unconverted_issues(message: str, model: Any) -> list[NodeIssue]:
    """One issue per ONNX node whose operator the frontend named as unconverted (``domain.Op`` or ``Op-version``)."""
    issues: list[NodeIssue] = []
    for m in _UNCONVERTED.finditer(message):
        for raw in m.group(1).split(","):
            op = re.sub(r"-\d+$", "", raw.strip())
            op_type = op.rsplit(".", 1)[-1]
            hits = [n for n in model.graph.node if n.op_type == op_type]
            for i, n in enumerate(hits):
                issues.append(NodeIssue(n.name or f"{n.op_type}_{i}", n.op_type, "unsupported_op", f"OpenVINO's ONNX frontend: no conversion for {raw.strip()}"))
            if not hits:  # e.g. an op inside a function body
                issues.append(NodeIssue("<model>", op_type, "unsupported_op", f"OpenVINO's ONNX frontend: no conversion for {raw.strip()}"))
    return issues or [NodeIssue("<model>", "", "load", " ".join(message.split())[:400])]

"""ONNX Runtime plug-in: one ``InferenceSession`` per runtime, at a named graph optimization level.

Levels are ORT's own (``GraphOptimizationLevel``): ``disable`` runs the graph as written (the QDQ
simulation: every QuantizeLinear/DequantizeLinear pair executed, float kernels in between), ``basic``
folds constants, ``extended`` and ``all`` fuse QDQ groups into integer kernels (``QLinearConv``,
``QLinearMatMul``) and, at ``all``, switch to the NCHWc layout. ``all`` is ORT's default and the level a
deployed model runs at. Threads: ``intra_op_num_threads`` (0 = ORT chooses; ``QUANTKIT_THREADS``
overrides).

Per-node precision comes from ORT's own profiler (``SessionOptions.enable_profiling``): each executed
kernel's event names its op type and input types; a node's precision is its first input's type.
The kernel registry and operator schemas of the installed build (``onnxruntime.capi._pybind_state``)
are read here too, for support checks of execution providers that are not installed.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError, ModelError
from .base import PRECISION_NAMES, NodeIssue, NodePrecision, Runtime, RuntimeInfo, SupportProbe, as_model_bytes, env_threads, first_line

LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
EXECUTION_ORDERS = {"default": "DEFAULT", "priority_based": "PRIORITY_BASED"}
DEPLOYMENT_LEVEL = "all"
"""The level a deployed model runs at: ORT's default (``SessionOptions.graph_optimization_level``)."""
_NODE_NAME = re.compile(r"node with name '([^']*)'|in node \(([^)]*)\)|In Node, \(\"([^\"]*)\", ")
_OP_NAME = re.compile(r"implementation for (\w+)\((\d+)\)|of operator \((\w+)\)|:(\w+)\(-?\d+\) is not a registered function/op|In Node, \(\"[^\"]*\", (\w+),")
_DYNAMIC_INTEGER = frozenset({"MatMulIntegerToFloat", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM"})
_SUFFIX = re.compile(r"(_token_\d+|_nchwc|_fused\w*|_quant)$")


class OrtRuntime(Runtime):
    """Runs a model with ONNX Runtime.

    Args:
        model: ``.onnx`` path, serialized bytes or ``onnx.ModelProto``.
        providers: execution providers in priority order (default CPU).
        graph_optimization_level: ``"disable" | "basic" | "extended" | "all"`` (ORT's levels).
        intra_op_num_threads: 0 lets ORT choose; ``QUANTKIT_THREADS`` overrides when set.
        outputs: intermediate tensors to expose as extra graph outputs.
        name: display name in messages.
        allow_spinning: ORT's ``session.intra_op.allow_spinning`` (its default, True: idle intra-op threads
            busy-wait for the next work). False where several sessions take turns on the same cores, as in
            interleaved timing (:mod:`quantkit.runtimes.latency`): there one session's spinning threads take the
            cores from the next one's run.
        execution_order: ORT's ``SessionOptions.execution_order``: ``"default"`` or ``"priority_based"``
            (Kahn's order: measured on ORT 1.32, a node that only reads a tensor runs soon after the tensor is
            written, where the default order may run it at the end and keep the tensor alive until then;
            :class:`quantkit.quantize.calibration.tap.ExtremaSession`).

    Raises:
        ConfigError: an unknown optimization level or execution order.
    """

    NAME = "onnxruntime"

    def __init__(self, model: Any, *, providers: Sequence[str] = ("CPUExecutionProvider",), graph_optimization_level: str = DEPLOYMENT_LEVEL,
                 intra_op_num_threads: int = 0, outputs: Sequence[str] = (), name: str | None = None, allow_spinning: bool = True,
                 execution_order: str = "default") -> None:
        super().__init__(model, outputs=outputs, name=name)
        self.allow_spinning = allow_spinning
        if graph_optimization_level not in LEVELS:
            raise ConfigError(f"graph_optimization_level: {graph_optimization_level!r} is not one of {', '.join(LEVELS)}")
        if execution_order not in EXECUTION_ORDERS:
            raise ConfigError(f"execution_order: {execution_order!r} is not one of {', '.join(EXECUTION_ORDERS)}")
        self.execution_order = execution_order
        self.providers = tuple(providers)
        self.graph_optimization_level = graph_optimization_level
        self.intra_op_num_threads = env_threads(intra_op_num_threads)
        self.session: Any = None
        self.load_error = ""

    @classmethod
    def version(cls) -> str:
        import onnxruntime

        return str(onnxruntime.__version__)

    @classmethod
    def is_available(cls) -> bool:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return False
        return True

    def _options(self, profile_prefix: str | None = None) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[self.graph_optimization_level])
        opts.intra_op_num_threads = self.intra_op_num_threads
        opts.log_severity_level = 3
        opts.execution_order = getattr(ort.ExecutionOrder, EXECUTION_ORDERS[self.execution_order])
        if not self.allow_spinning:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if profile_prefix:
            opts.enable_profiling = True
            opts.profile_file_prefix = profile_prefix
        return opts

    def _session(self, profile_prefix: str | None = None) -> Any:
        import onnxruntime as ort

        missing = [p for p in self.providers if p not in ort.get_available_providers()]
        if missing:  # ORT would print a warning and fall back to CPU silently
            raise ModelError(f"{self.name}: execution provider {missing[0]} is not in this onnxruntime build "
                             f"(available: {', '.join(ort.get_available_providers())}); install the build that has it")
        src, _ = as_model_bytes(self.model, self.outputs)
        try:
            return ort.InferenceSession(src, sess_options=self._options(profile_prefix), providers=list(self.providers))
        except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            self.load_error = str(e)
            fix = ("the file is not an ONNX model (corrupt or cut short): write it again" if "Protobuf parsing failed" in str(e)
                   else "run 'quantkit support' on it")
            raise ModelError(f"{self.name}: ONNX Runtime cannot load the model ({first_line(e)}); {fix}") from None

    def activate_impl(self) -> None:
        self.session = self._session()

    def deactivate_impl(self) -> None:
        self.session = None

    def infer_impl(self, feed: dict[str, np.ndarray], output_names: Sequence[str] | None) -> dict[str, np.ndarray]:
        names = list(output_names) if output_names else [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, feed)))

    def input_names_impl(self) -> list[str]:
        return [i.name for i in self.session.get_inputs()]

    def output_names_impl(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]

    def info_impl(self) -> RuntimeInfo:
        used = self.session.get_providers()
        return RuntimeInfo(self.NAME, self.version(), used[0] if used else ",".join(self.providers), "f32",
                           (("graph_optimization_level", self.graph_optimization_level),
                            ("intra_op_num_threads", str(self.intra_op_num_threads)), ("providers", ",".join(used))))

    def node_precisions_impl(self, feed: dict[str, np.ndarray]) -> list[NodePrecision]:
        with tempfile.TemporaryDirectory(prefix="quantkit-ort-profile-") as tmp:
            sess = self._session(str(Path(tmp) / "profile"))
            sess.run(None, feed)
            events = json.loads(Path(sess.end_profiling()).read_text(encoding="utf-8"))
        out = []
        for e in events:
            args = e.get("args") or {}
            if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
                continue
            node = str(e["name"])[: -len("_kernel_time")]
            types = [next(iter(d)) for d in args.get("input_type_shape") or [] if isinstance(d, dict) and d]
            prec = PRECISION_NAMES.get(types[0], types[0]) if types else "?"
            if args.get("op_name") in _DYNAMIC_INTEGER:  # float input, quantized inside the kernel
                prec = "u8"
            out.append(NodePrecision(node, str(args.get("op_name", "")), prec, (original_name(node),), float(e.get("dur", 0)) / 1000.0))
        return out

    @classmethod
    def probe_support(cls, model: Any, feed: dict[str, np.ndarray], *, graph_optimization_level: str = DEPLOYMENT_LEVEL,
                      providers: Sequence[str] = ("CPUExecutionProvider",), **_: Any) -> SupportProbe:
        """Load ``model`` at ``graph_optimization_level`` (ORT assigns every kernel here) and run ``feed`` once; the
        runtime's refusal, if any, becomes one :class:`NodeIssue` naming the node and op type ORT names."""
        how = f"onnxruntime {cls.version()} {','.join(providers)}: loaded and ran at graph optimization level {graph_optimization_level}"
        rt = cls(model.SerializeToString(), providers=providers, graph_optimization_level=graph_optimization_level, name=model.graph.name or "model")
        try:
            rt.activate()
        except ModelError as e:
            return SupportProbe(None, False, (_issue_from(rt.load_error or str(e), model, "load"),), how)
        try:
            info = rt.info()
            try:
                rt.session.run(None, feed)
            except Exception as e:  # noqa: BLE001 - ORT's RuntimeException / Fail types
                return SupportProbe(info, True, (), how, " ".join(str(e).split())[:400])
        finally:
            rt.deactivate()
        return SupportProbe(info, True, (), how)


def original_name(runtime_node: str) -> str:
    """The ONNX node an ORT kernel came from: ORT names fused nodes ``<node>_token_<n>`` (QDQ fusion) or
    ``<node>_nchwc`` (layout); the suffixes are stripped."""
    name = runtime_node
    while True:
        stripped = _SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


def _issue_from(message: str, model: Any, kind: str) -> NodeIssue:
    """ORT's error as a :class:`NodeIssue`: the node it names (and that node's op type), else ``<model>``."""
    text = " ".join(message.split())
    node = _NODE_NAME.search(text)
    op = _OP_NAME.search(text)
    name = next((g for g in node.groups() if g), "<model>") if node else "<model>"
    op_type = next((g for g in op.groups()[:1] + op.groups()[2:] if g), "") if op else ""
    if name == "<model>" and op_type:  # "com.acme:FancyAct(-1) is not a registered function/op": the first such node
        name = next(((n.name or f"{n.op_type}_{i}") for i, n in enumerate(model.graph.node) if n.op_type == op_type), name)
    op_type = op_type or next((n.op_type for n in model.graph.node if n.name == original_name(name)), "")
    if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text or "is not a registered function/op" in text:
        kind = "unsupported_op"
    elif "Type Error" in text:
        kind = "dtype"
    return NodeIssue(name, op_type, kind, text[:400])


# -- the installed build's registry (support checks for execution providers that cannot be run here) --

def available_providers() -> list[str]:
    """Execution providers compiled into the installed onnxruntime."""
    import onnxruntime as ort

    return list(ort.get_available_providers())


@functools.lru_cache(maxsize=1)
def operator_schemas() -> dict[tuple[str, str], list[Any]]:
    """``{(domain, op): [OpSchema ...]}`` sorted by ``since_version``, ORT's contrib domains included."""
    from onnxruntime.capi import _pybind_state as C

    out: dict[tuple[str, str], list[Any]] = {}
    for s in C.get_all_operator_schema():
        out.setdefault((s.domain, s.name), []).append(s)
    for v in out.values():
        v.sort(key=lambda s: s.since_version)
    return out


def max_opsets() -> dict[str, int]:
    """``{domain: highest since_version}`` over the installed onnxruntime's operator schemas (``ai.onnx`` for "")."""
    out: dict[str, int] = {}
    for (domain, _), schemas in operator_schemas().items():
        d = domain or "ai.onnx"
        out[d] = max(out.get(d, 0), int(schemas[-1].since_version))
    return out


def kernel_defs(provider: str) -> dict[tuple[str, str], list[Any]]:
    """``{(domain, op): [KernelDef ...]}`` of ``provider`` in the installed build (or a registered plugin EP).

    Raises:
        ConfigError: the build has no kernels for ``provider``.
    """
    from onnxruntime.capi import _pybind_state as C

    kernels = [k for k in C.get_all_opkernel_def() if k.provider == provider]
    if not kernels:
        try:
            kernels = list(C.get_registered_ep_kernel_defs(provider))
        except Exception:  # noqa: BLE001 - not a registered plugin EP
            kernels = []
    if not kernels:
        have = sorted({k.provider for k in C.get_all_opkernel_def()})
        raise ConfigError(f"--target {provider}: the installed onnxruntime has no kernels for it (has {', '.join(have)}); "
                          "install the matching onnxruntime build or use a profile (tensorrt, npu-generic)")
    out: dict[tuple[str, str], list[Any]] = {}
    for k in kernels:
        out.setdefault((k.domain, k.op_name), []).append(k)
    return out

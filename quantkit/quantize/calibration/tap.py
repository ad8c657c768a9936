"""Reading every calibrated tensor of one inference: the tap model run with output binding.

The tap model is the float model with every calibrated tensor also marked as a graph output (what ONNX
Runtime's histogram calibrators run; :func:`quantkit.quantize.ort_bridge.calibration_plan` writes it). Layer-wise
reading is an ordinary run with more outputs (Polygraphy's ``ModifyOutputs``), here through ORT's
``IOBinding`` into buffers allocated once, so that an image's few hundred intermediate outputs (about 700 MB
for the PP-OCR detector at 640x640) are not allocated, page-faulted and freed again for every image.

* Tensors whose shape the model declares in full get a preallocated buffer, reused from image to image.
* Tensors whose shape depends on the data (NonZero -> GatherND, a dynamic ``TopK``) are bound without a
  buffer, again before every run (ORT would otherwise reuse the previous run's value as a preallocated output
  and fail on a new size): ORT allocates them at their size each time. Should a declared shape be wrong after all, the run
  is repeated with every output bound that way (logged), so a shape change never fails calibration.
* A calibrated tensor that is also a graph input is taken from the feed (ORT does not write it into a
  bound buffer).

:class:`ExtremaSession` reads less: each tensor reduced inside the session to its minimum and maximum (MinMax,
:func:`write_extrema_model`), or to those and the rows holding its tails (Percentile, :class:`Cut`).

The session runs with graph optimizations off, as ORT's calibrator does, so every tensor holds bit for bit
the values ORT's calibrator reads (``calibration_graph: exact``). (On a tapped graph ORT's ``basic`` and
``extended`` levels change no node, since every tensor they could fuse away is a graph output; ``all`` changes
the convolution kernels, so values differ in the last bits, measured up to 1.4e-5 relative on the PP-OCR
detector: ``calibration_graph: optimized``.)
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...runner import OrtRunner

log = logging.getLogger(__name__)

_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


class TapSession:
    """Runs the tap model and returns the calibrated tensors of each inference.

    Args:
        model_path: the tap model (``.onnx`` file).
        names: the calibrated tensors, in the order :meth:`run` returns them.
        threads: ORT intra-op threads (0: ORT's default, one per core; ``QUANTKIT_THREADS`` overrides).
        level: ORT graph optimization level (``disable``: ORT's calibrators'; ``all``: ``calibration_graph:
            optimized``).
        execution_order: ORT's node order (:class:`quantkit.runtimes.ort.OrtRuntime`); it changes no value.

    Use as a context manager; :meth:`run` returns arrays valid until the next call.

    Raises:
        ModelError: ORT cannot load the tap model (one line).
    """

    def __init__(self, model_path: str | os.PathLike[str], names: list[str], *, threads: int = 0, level: str = "disable",
                 execution_order: str = "default") -> None:
        self.runner = OrtRunner(model_path, graph_optimization_level=level, intra_op_num_threads=threads,
                                name=Path(model_path).name, execution_order=execution_order)
        self.names = list(names)
        self._input_shapes: dict[str, tuple[int, ...]] | None = None
        self._binding: Any = None
        self._buffers: dict[str, np.ndarray] = {}
        self._dynamic: list[str] = []  # bound without a buffer, in binding order
        self._all_dynamic = False
        self.dynamic_names: set[str] = set()  # tensors ever bound without a buffer (variable shape)

    def __enter__(self) -> TapSession:
        self.runner.activate()
        sess = self.runner.session
        self._inputs = {i.name for i in sess.get_inputs()}
        self._declared = {o.name: (o.shape, o.type) for o in sess.get_outputs()}
        return self

    def __exit__(self, *exc: Any) -> None:
        self.runner.deactivate()
        self._binding, self._buffers = None, {}

    def _static(self, name: str) -> bool:
        shape, _ = self._declared.get(name, (None, None))
        return not self._all_dynamic and shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)

    def _bind(self, feed: dict[str, np.ndarray], outs: dict[str, np.ndarray]) -> None:
        """(Re)make the binding for inputs shaped like ``feed``; ``outs``: one plain run's outputs."""
        sess = self.runner.session
        self._binding = sess.io_binding()
        self._buffers, self._dynamic = {}, []
        self._bound = [n for n in self.names if n not in self._inputs]
        for name in self._bound:
            if self._static(name) and tuple(self._declared[name][0]) == outs[name].shape:
                o = outs[name]  # the plain run's own array becomes the buffer: one copy of every tensor, not two
                buf = o if o.flags.c_contiguous and o.flags.writeable and o.flags.owndata else np.empty_like(o)
                self._binding.bind_output(name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
                self._buffers[name] = buf
            else:
                self._binding.bind_output(name, "cpu")
                self._dynamic.append(name)
        self.dynamic_names.update(self._dynamic)

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One inference; the calibrated tensors in ``names`` order."""
        feed = {k: np.ascontiguousarray(v) for k, v in feed.items()}
        if all(n in self._inputs for n in self.names):  # only graph inputs (e.g. a recount of the input alone): nothing to run
            return [feed[n] for n in self.names]
        shapes = {k: v.shape for k, v in feed.items()}
        if shapes != self._input_shapes:  # first call, or a shorter last batch: buffers for these shapes
            out_names = [n for n in self.names if n not in self._inputs]
            outs = dict(zip(out_names, self.runner.session.run(out_names, feed)))
            self._bind(feed, outs)
            self._input_shapes = shapes
            return [feed[n] if n in self._inputs else outs[n] for n in self.names]
        for k, v in feed.items():
            self._binding.bind_cpu_input(k, v)
        for name in self._dynamic:  # after a run ORT keeps the value it allocated; unbound, it allocates anew
            self._binding.bind_output(name, "cpu")
        try:
            self.runner.session.run_with_iobinding(self._binding)
        except Exception as e:  # a declared shape was wrong: bind everything without buffers from now on
            if self._all_dynamic:
                raise
            log.info("a calibrated tensor changed shape (%s); reading every tensor without preallocated buffers",
                     (str(e).strip().splitlines() or ["?"])[0][:200])
            self._all_dynamic, self._input_shapes = True, None
            return self.run(feed)
        dyn = {}
        if self._dynamic:  # get_outputs() lists every bound output in binding order, buffered ones included
            got = self._binding.get_outputs()
            dyn = {n: got[i].numpy() for i, n in enumerate(self._bound) if n not in self._buffers}
        return [feed[n] if n in self._inputs else (self._buffers[n] if n in self._buffers else dyn[n]) for n in self.names]


#: Suffixes of the outputs :func:`write_extrema_model` adds (``<tensor>__qk_min``, ``__qk_max``, ``__qk_shape``; for a
#: tensor read by its tails, ``__qk_rows`` and ``__qk_amin``).
MIN_SUFFIX, MAX_SUFFIX, SHAPE_SUFFIX, ROWS_SUFFIX, AMIN_SUFFIX = "__qk_min", "__qk_max", "__qk_shape", "__qk_rows", "__qk_amin"
#: Elements per row of a tensor read by its tails (:class:`Cut`): the most of 64, 32, ..., 1 that divides its size.
#: Measured on the PP-OCR detector at 640x640 (cut-offs at 1e-3 of the first image per side): rows of 64 keep 6 % of
#: the elements; rows of 128 keep 12 % and rows of 16, with 4x the row extremes to write and compare, ran slower.
TAIL_ROW = 64


@dataclasses.dataclass(frozen=True)
class Cut:
    """Cut-offs of a tensor read by its tails: its elements ``<= lo`` or ``>= hi`` (``lo`` None: ``|x| >= hi``).
    ``amin``: also reduce ``min |x|`` (``ReduceMin(Abs(x))``): ORT's absolute histogram starts at the smallest ``|x|`` of
    all images, and every edge moves with it. Tried and not kept: reading it on the first image only (and where an
    image has one sign) ran 0.92x the wall time (PP-OCR detector at 640x640, 32 images, 4 runs each in turn) but moved
    101 of 331 percentile ranges off ORT's, up to 0.86 of an ORT bin."""

    lo: float | None
    hi: float
    amin: bool = False


@dataclasses.dataclass(frozen=True)
class Tails:
    """One inference's reading of a tensor read by its tails: ``rows`` (float32 ``[k, row]``), the rows of the
    tensor (in order, ``row`` elements each) that hold an element beyond the cut-offs, the others dropped inside the
    session; ``size``: the tensor's element count; ``amin``: ``min |x|`` (0-d float32) when asked, else None."""

    rows: np.ndarray
    size: int
    amin: np.ndarray | None


def declared_shape(value_info: Any) -> tuple[int, ...] | None:
    """The shape a graph output's ``ValueInfoProto`` declares, or None unless every dimension is a number."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return None if any(d is None for d in dims) else tuple(int(d) for d in dims)


def _row(shape: tuple[int, ...] | None) -> int | None:
    size = int(np.prod(shape)) if shape is not None else 0
    return next((r for r in (TAIL_ROW >> k for k in range(TAIL_ROW.bit_length())) if size % r == 0), None) if size else None


def _tail_nodes(name: str, cut: Cut, row: int, opset: int, g: Any) -> list[Any]:
    """Nodes that read ``name`` as rows of ``row`` elements: row extremes, the tensor's ``min``/``max`` from them, the
    rows holding an element beyond ``cut`` (``Compress``), and ``min |x|`` when asked; their constants go to ``g``."""
    from onnx import TensorProto, helper, numpy_helper

    def t(suffix: str) -> str:
        return f"{name}__qk_{suffix}"

    g.initializer.extend([numpy_helper.from_array(np.array([-1, row], np.int64), t("row_shape")),
                          numpy_helper.from_array(np.array(cut.hi, np.float32), t("hi")),
                          numpy_helper.from_array(np.array(-cut.hi if cut.lo is None else cut.lo, np.float32), t("lo"))])
    if opset >= 18:  # ReduceMin/ReduceMax take their axes as an input from opset 18
        g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), t("axis")))

    def per_row(op: str, out: str, src: str = t("as_rows")) -> Any:  # over each row: ORT spreads rows over its threads
        if opset >= 18:
            return helper.make_node(op, [src, t("axis")], [out], name=out, keepdims=0)
        return helper.make_node(op, [src], [out], name=out, keepdims=0, axes=[1])

    nodes = [helper.make_node("Reshape", [name, t("row_shape")], [t("as_rows")], name=t("as_rows")),
             per_row("ReduceMin", t("row_min")), per_row("ReduceMax", t("row_max")),
             helper.make_node("ReduceMin", [t("row_min")], [name + MIN_SUFFIX], name=name + MIN_SUFFIX, keepdims=0),
             helper.make_node("ReduceMax", [t("row_max")], [name + MAX_SUFFIX], name=name + MAX_SUFFIX, keepdims=0),
             helper.make_node("LessOrEqual", [t("row_min"), t("lo")], [t("below")], name=t("below")),
             helper.make_node("GreaterOrEqual", [t("row_max"), t("hi")], [t("above")], name=t("above")),
             helper.make_node("Or", [t("below"), t("above")], [t("beyond")], name=t("beyond")),
             helper.make_node("Compress", [t("as_rows"), t("beyond")], [name + ROWS_SUFFIX], name=name + ROWS_SUFFIX, axis=0)]
    g.output.append(helper.make_tensor_value_info(name + ROWS_SUFFIX, TensorProto.FLOAT, None))
    if cut.amin:
        nodes += [helper.make_node("Abs", [t("as_rows")], [t("abs")], name=t("abs")), per_row("ReduceMin", t("row_amin"), t("abs")),
                  helper.make_node("ReduceMin", [t("row_amin")], [name + AMIN_SUFFIX], name=name + AMIN_SUFFIX, keepdims=0)]
        g.output.append(helper.make_tensor_value_info(name + AMIN_SUFFIX, TensorProto.FLOAT, []))
    return nodes


def write_extrema_model(tap_model: str | os.PathLike[str], names: list[str], full: set[str], dest: str | os.PathLike[str],
                        graph_outputs: Sequence[str] = (), cuts: Mapping[str, Cut] | None = None,
                        ) -> tuple[list[str], list[str], dict[str, tuple[int, ...] | None], dict[str, int]]:
    """Write ``dest``: the tap model whose outputs are, for each float32 tensor of ``names`` not in ``full`` nor
    ``graph_outputs``, its ``ReduceMin`` and ``ReduceMax`` over every element (``keepdims=0``: a 0-d float32); every
    other tensor of ``names`` (``full``, another dtype, or a graph input) whole; then the ``graph_outputs`` not
    among them, whole. ORT's ``MinMaxCalibrater`` adds the same reductions (``keepdims=1``; the value is the same).
    A reduced tensor whose shape the model declares in full also gets a ``Shape`` output, to see whether it holds.

    ``cuts`` (the percentile's tails, :class:`Cut`): only the tensors it names are reduced, and only those whose
    shape is declared in full and not empty; each is read as rows of :data:`TAIL_ROW` elements (or the largest power
    of two below that divides its size): its minimum and maximum come from the rows' (still exact), and the rows
    holding an element beyond the cut-offs leave the session (``__qk_rows``); the other tensors are output whole.

    Returns ``(reduced, whole, declared, rows)``: the reduced names; the names output whole in output order
    (``graph_outputs`` last); each reduced tensor's declared shape (None: not declared in full); the row length
    of each tensor read by its tails.

    Each tensor's reductions follow the node that writes it (the node order :class:`ExtremaSession`'s
    ``priority_based`` execution order keeps), so they run while the tensor is in cache and it need not stay
    alive; no tensor leaves the session: for the PP-OCR detector at 640x640, 329 tensors (687 MB per image read
    out whole; 139 tensors and 262 MB once the derived ranges are known) become two numbers each.
    """
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load(str(tap_model))
    g = m.graph
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
    declared = {o.name: o for o in g.output}
    skip = set(full) | {i.name for i in g.input} | set(graph_outputs)
    reduced = [n for n in names if n not in skip and n in declared and declared[n].type.tensor_type.elem_type == TensorProto.FLOAT]
    rows: dict[str, int] = {}
    if cuts is not None:
        rows = {n: r for n in reduced if n in cuts and (r := _row(declared_shape(declared[n]))) is not None}
        reduced = [n for n in reduced if n in rows]
    kept = set(reduced)
    whole = [n for n in names if n not in kept]
    listed = set(whole)
    whole += [n for n in graph_outputs if n not in listed and n in declared]
    del g.output[:]
    g.output.extend([declared[n] for n in whole if n in declared])
    shapes = {n: declared_shape(declared[n]) for n in reduced}
    readers: dict[str, list[Any]] = {n: [] for n in reduced}
    for n in reduced:
        if n in rows:
            assert cuts is not None
            readers[n] += _tail_nodes(n, cuts[n], rows[n], opset, g)
        else:
            readers[n] += [helper.make_node(op, [n], [n + sfx], name=n + sfx, keepdims=0) for op, sfx in (("ReduceMin", MIN_SUFFIX), ("ReduceMax", MAX_SUFFIX))]
        g.output.extend([helper.make_tensor_value_info(n + sfx, TensorProto.FLOAT, []) for sfx in (MIN_SUFFIX, MAX_SUFFIX)])
    for n in reduced:
        if shapes[n] is not None:
            readers[n].append(helper.make_node("Shape", [n], [n + SHAPE_SUFFIX], name=n + SHAPE_SUFFIX))
            g.output.append(helper.make_tensor_value_info(n + SHAPE_SUFFIX, TensorProto.INT64, [len(shapes[n])]))
    nodes: list[Any] = []
    for node in g.node:  # each tensor's readers right after the node that writes it
        nodes.append(node)
        nodes += [r for o in node.output for r in readers.pop(o, [])]
    nodes += [r for rs in readers.values() for r in rs]  # tensors no node writes (an initializer marked as output)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, str(dest))
    return reduced, whole, shapes, rows


class ExtremaSession:
    """Runs the extrema model (:func:`write_extrema_model`): per calibrated tensor either its ``(min, max)`` over
    one inference or the tensor itself, and the graph outputs whole.

    Args:
        tap_model: the tap model (``.onnx``); the extrema model is written beside it.
        names: the calibrated tensors to read.
        full: tensors wanted whole (e.g. the graph outputs whose channels are measured).
        graph_outputs: the model's own outputs, read whole as well (to see a NaN that reached them).
        threads: ORT intra-op threads (0: one per core; ``QUANTKIT_THREADS`` overrides).
        level: ORT graph optimization level, as :class:`TapSession`'s.
        cuts: read the tensors it names by their tails (:func:`write_extrema_model`), every other tensor whole.

    :meth:`run` returns ``(extremes, whole, tails)``: ``{tensor: (min, max)}`` as float32 0-d arrays,
    ``{tensor: array}`` for the tensors read whole, and ``{tensor: Tails}`` for those read by their tails (their
    extremes are in ``extremes`` too). ``dynamic_names``, as :class:`TapSession`'s: the tensors of variable shape
    (not declared in full, or found at another shape than declared). At level ``disable`` every reduction sees the
    values ORT's calibrator reads, and a minimum or maximum is an exact operation: the ranges equal ORT's bit for bit.
    NaN (ORT 1.32, measured): ``ReduceMin`` gives NaN when the first element is NaN and otherwise may skip
    values after a NaN (``[1, NaN, 5, 0]`` -> 1); ``+inf`` / ``-inf`` for an empty tensor.

    Raises:
        ModelError: ORT cannot load the model (one line).
    """

    def __init__(self, tap_model: str | os.PathLike[str], names: list[str], *, full: set[str] = frozenset(),  # type: ignore[assignment]
                 graph_outputs: Sequence[str] = (), threads: int = 0, level: str = "disable", cuts: Mapping[str, Cut] | None = None) -> None:
        path = Path(tap_model).with_name("extrema_model.onnx")
        self.reduced, self.whole, self.declared, self.rows = write_extrema_model(tap_model, names, set(full), path, graph_outputs, cuts)
        self.tap = TapSession(path, list(self.whole), threads=threads, level=level, execution_order="priority_based")
        self.shaped = [n for n in self.reduced if self.declared[n] is not None]
        self.tailed = [n for n in self.reduced if n in self.rows]
        self.amin = [n for n in self.tailed if cuts is not None and cuts[n].amin]
        self.outputs = ([n + s for n in self.reduced for s in (MIN_SUFFIX, MAX_SUFFIX)] + [n + SHAPE_SUFFIX for n in self.shaped]
                        + [n + ROWS_SUFFIX for n in self.tailed] + [n + AMIN_SUFFIX for n in self.amin])
        self.tap.names = self.whole + self.outputs
        self.variable = {n for n in self.reduced if self.declared[n] is None}
        self._whole = set(self.whole)

    def __enter__(self) -> ExtremaSession:
        self.tap.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.tap.__exit__(*exc)

    @property
    def dynamic_names(self) -> set[str]:
        """The calibrated tensors seen at a variable shape (not this model's own outputs, e.g. the tails' rows)."""
        return (self.tap.dynamic_names & self._whole) | self.variable

    def run(self, feed: dict[str, np.ndarray]) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray], dict[str, Tails]]:
        outs = self.tap.run(feed)
        w, r, s, t = len(self.whole), 2 * len(self.reduced), len(self.shaped), len(self.tailed)
        whole = dict(zip(self.whole, outs[:w]))
        red = outs[w:w + r]
        shapes = {n: tuple(int(d) for d in shape) for n, shape in zip(self.shaped, outs[w + r:w + r + s])}
        for n, shape in shapes.items():
            if n not in self.variable and shape != self.declared[n]:
                self.variable.add(n)
        amin = dict(zip(self.amin, outs[w + r + s + t:]))
        tails = {n: Tails(rows, int(np.prod(shapes[n])), amin.get(n)) for n, rows in zip(self.tailed, outs[w + r + s:w + r + s + t])}
        return {n: (red[2 * i], red[2 * i + 1]) for i, n in enumerate(self.reduced)}, whole, tails

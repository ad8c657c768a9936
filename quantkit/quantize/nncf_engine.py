"""``quantize.engine: nncf``: NNCF's post-training quantization (``nncf.quantize`` on the ONNX model, NNCF's ONNX
backend) as a second engine beside ONNX Runtime's, writing the same two files. The one module that imports ``nncf``
(the optional ``nncf`` extra), as :mod:`.ort_bridge` is the one that imports ``onnxruntime.quantization``.

What NNCF is given (:func:`nncf_arguments` is the one translation of a :class:`StaticQuantConfig` into its arguments):

* the intake model prepared as ORT's engine prepares it (``Constant`` nodes moved to initializers) with every node
  named (unnamed ones ``<op_type>_<index>``, :func:`.fallback.graph.named_copy`), so the record can match NNCF's
  weight ``DequantizeLinear`` nodes to the float weights by node name (:func:`.scales.qdq_scales`);
* the calibration set's images read exactly as ORT's engine reads them (:class:`~quantkit.calibset.CalibrationSetReader`,
  batch 1, the export note's preprocessing): one ``{input name: float32 [1, C, H, W]}`` per image in manifest
  order, read again on each of NNCF's passes (:class:`CalibrationItems`: memory does not grow with the set);
* ``preset``: ``mixed`` (asymmetric activations) for ``symmetric_activations: false``, ``performance`` (activations
  with zero point 0) for true; weights symmetric int8 per channel in both; NNCF's ONNX backend writes an activation
  whose range has negative values as int8 and the others as uint8, whatever the preset;
  ``target_device``: CPU; ``subset_size``: ``max_images``, else the whole set (NNCF's own default, 300, would cap a
  larger set without saying so); ``fast_bias_correction``: NNCF's default (true); ``ignored_scope``: the config's
  three exclusion lists resolved to node names and op types, each checked to match the model as ORT's engine checks.

Why ``activation_type: uint8`` (the default) rewrites NNCF's activations: NNCF writes every activation whose range has
negative values as int8 (zero point 0 with ``performance``, another with ``mixed``), and OpenVINO
2026.4's CPU plugin computes an int8 Conv that reads a Concat of int8 pairs as if their scale were 1 (the inputs rounded
and clipped to [-128, 127]); ONNX Runtime and the ONNX reference compute it as written. NNCF puts exactly that in
PP-OCR's DB neck (four FPN maps, scale 16.95, into the head's 3x3 Conv), which collapsed the detector on OpenVINO
(pixel IoU 0.001 against FP32; 0.98 on ORT). :func:`activations_to_uint8` rewrites each per-tensor int8 activation pair
as uint8 on the same grid (zero point + 128: every code and every dequantized value is unchanged), which OpenVINO
computes correctly (pixel IoU 0.985 / 0.963 on the day / night references, as on ORT). Per-channel activation pairs
(NNCF writes some, e.g. before PP-OCR's depthwise Convs) stay int8: as uint8, ONNX Runtime 1.32 fuses such a pair after a
Conv into a QLinearConv and then refuses its per-channel output zero point at run time. The patterns
``concat_int8_conv`` and ``concat_zero_points_conv`` (:mod:`quantkit.patterns`, ``quantkit doctor``) check every
installed runtime for this.

What is written (:func:`quantize_nncf`): ``model_int8.onnx`` (note embedded, loaded and run by ONNX Runtime at its
deployment level like ORT's engine's, :func:`.files.finish`) and ``record.json``: every scale and zero point read
back from NNCF's Q/DQ nodes, the config (``engine: nncf``), NNCF's version beside the core tools', and in
``calibration`` the arguments NNCF was called with, the images it read and the graph outputs. NNCF prints its
progress bars and log lines; they go to stderr while it runs, so a command's ``--json`` stays the only stdout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .._io import sha256_bytes, sha256_file
from ..artifacts.record import CalibrationRecord
from ..calibset import CalibrationSetReader
from ..errors import ModelError, QuantkitError, UnsupportedOptionError
from ..extras import require
from ..modelio import opset_of
from ..note import ExportNote
from ..progress import progress
from ..versions import CORE
from . import outputs
from .config import StaticQuantConfig
from .engines import Engine, StaticJob, register_engine
from .fallback.graph import named_copy
from .files import (
    MODEL_FILE,
    constants_to_initializers,
    finish,
    load_set,
    make_record,
    set_ref,
)
from .scales import qdq_scales
from .._io import scratch_dir

log = logging.getLogger(__name__)

PACKAGES = (*CORE, "nncf")
"""The tool versions an NNCF record names."""


def require_nncf(what: str = "quantize.engine: nncf") -> Any:
    """The ``nncf`` module, or :class:`~quantkit.errors.MissingExtraError` naming the extra to install."""
    return require("nncf", "nncf", what)


@dataclasses.dataclass(frozen=True)
class NncfArguments:
    """What ``nncf.quantize`` is called with (the module docstring gives each choice and its reason).

    Fields: ``preset`` (``mixed`` | ``performance``), ``subset_size`` (images NNCF reads), ``ignored_names`` /
    ``ignored_types`` (its ``IgnoredScope``), ``target_device`` (``CPU``), ``fast_bias_correction``.
    """

    preset: str
    subset_size: int
    ignored_names: tuple[str, ...] = ()
    ignored_types: tuple[str, ...] = ()
    target_device: str = "CPU"
    fast_bias_correction: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    def kwargs(self, nncf: Any) -> dict[str, Any]:
        """Keyword arguments of ``nncf.quantize`` (and ``quantize_with_accuracy_control``)."""
        scope = nncf.IgnoredScope(names=list(self.ignored_names), types=list(self.ignored_types)) \
            if self.ignored_names or self.ignored_types else None
        return {"preset": nncf.QuantizationPreset.PERFORMANCE if self.preset == "performance" else nncf.QuantizationPreset.MIXED,
                "target_device": getattr(nncf.TargetDevice, self.target_device), "subset_size": self.subset_size,
                "fast_bias_correction": self.fast_bias_correction, "ignored_scope": scope}


def nncf_arguments(config: StaticQuantConfig, model: Any, images: int) -> NncfArguments:
    """Translate ``config`` (``engine: nncf``, checked by :func:`.config.check_engine`) for ``model`` calibrated on
    ``images`` images.

    Raises:
        UnsupportedOptionError: an exclusion that matches nothing in the model (NNCF would refuse it with a traceback).
    """
    names = [n.name for n in model.graph.node]
    excluded = list(config.nodes_to_exclude)
    for n in excluded:
        if n not in names:
            raise UnsupportedOptionError(f"nodes_to_exclude: node {n!r} is not in the model; check the name with 'quantkit inspect'")
    for p in config.node_patterns_to_exclude:
        hits = [n for n in names if n and re.fullmatch(p, n)]
        if not hits:
            raise UnsupportedOptionError(f"node_patterns_to_exclude: {p!r} matches no node of the model; fix the pattern")
        excluded += [h for h in hits if h not in excluded]
    ops = {n.op_type for n in model.graph.node}
    for t in config.op_types_to_exclude:
        if t not in ops:
            raise UnsupportedOptionError(f"op_types_to_exclude: the model has no {t!r} node; remove it")
    subset = images if config.max_images is None else min(config.max_images, images)
    return NncfArguments(preset="performance" if config.symmetric_activations else "mixed", subset_size=subset,
                         ignored_names=tuple(sorted(excluded)), ignored_types=tuple(sorted(config.op_types_to_exclude)))


class CalibrationItems:
    """The images of a set as NNCF data items, ``{input name: float32 [1, C, H, W]}``, read through the set's reader at
    each iteration (NNCF iterates several times: statistics, then bias correction). ``len()``: the images read."""

    def __init__(self, reader: CalibrationSetReader, input_name: str, desc: str = "nncf") -> None:
        self.reader, self.input_name, self.desc = reader, input_name, desc
        self.passes = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """One pass over the images, reported by :func:`quantkit.progress.progress` (a count on a terminal, a line about
        every 30 s in logs): NNCF's own bars go to stderr and say nothing in a log file."""
        self.passes += 1
        batches = self.reader.iter_batches()
        for _, x in progress(batches, total=len(self.reader), desc=f"{self.desc}: pass {self.passes} over the calibration images"):
            yield {self.input_name: x}

    def __len__(self) -> int:
        return len(self.reader)


@contextlib.contextmanager
def _nncf_output_to_stderr() -> Iterator[None]:
    """While NNCF runs, its log handler and progress bars (``rich``, printing to ``sys.stdout``) write to stderr."""
    handlers = [h for h in logging.getLogger("nncf").handlers if isinstance(h, logging.StreamHandler)]
    streams = [h.stream for h in handlers]
    for h in handlers:
        h.setStream(sys.stderr)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for h, s in zip(handlers, streams):
            h.setStream(s)


def call_nncf(fn: Callable[[Any], Any], source: Path) -> Any:
    """``fn(nncf)`` with NNCF's output on stderr; an error NNCF raises becomes one :class:`ModelError` line naming
    ``source`` (the intake model). Returns what ``fn`` returns."""
    nncf = require_nncf()
    try:
        with _nncf_output_to_stderr():
            return fn(nncf)
    except QuantkitError:
        raise
    except Exception as e:  # NNCF raises its own ValidationError, RuntimeError, ... on models it cannot handle
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelError(f"{source}: NNCF could not quantize the model ({type(e).__name__}: {first}); "
                         "exclude the failing nodes (quantize.nodes_to_exclude) or use engine: ort") from None


def prepare(model: Any) -> Any:
    """The intake model as NNCF gets it: a copy with ``Constant`` nodes as initializers and every node named."""
    prepared = type(model)()
    prepared.CopyFrom(model)
    moved = constants_to_initializers(prepared)
    if moved:
        log.info("moved %d Constant nodes to initializers before quantization", moved)
    return named_copy(prepared)[0]


def quantize_nncf(model: Any, model_path: Path, note: ExportNote, config: StaticQuantConfig, calibration_set: Any,
                  out: Path) -> CalibrationRecord:
    """``nncf.quantize`` on the intake ``model`` with ``calibration_set``'s images; writes ``out/model_int8.onnx``
    (``out``: the output's temporary folder) and returns the record (the caller saves it).

    Raises:
        MissingExtraError: nncf is not installed. ModelError: NNCF refused the model. CalibrationSetError: an image
        is missing or changed. TargetSupportError: ONNX Runtime cannot load or run NNCF's file.
    """
    require_nncf()
    cset = load_set(calibration_set)
    prepared = prepare(model)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    args = nncf_arguments(config, prepared, len(reader))
    reader.set_range(0, args.subset_size)
    items = CalibrationItems(reader, note.preprocessing.input_name)
    q = call_nncf(lambda n: n.quantize(prepared, n.Dataset(items), **args.kwargs(n)), model_path)
    q, data, calib = write_nncf_model(q, note, config, out)
    return nncf_record(q, prepared, sha256_file(model_path), sha256_bytes(data), set_ref(cset), config, opset_of(model),
                       {"engine": "nncf", "images": args.subset_size, "nncf": args.to_dict(), **calib})


def write_nncf_model(q: Any, note: ExportNote, config: StaticQuantConfig, out: Path) -> tuple[Any, bytes, dict[str, Any]]:
    """Write NNCF's model ``q`` to ``out/model_int8.onnx``: activations rewritten as uint8 when ``config.activation_type``
    is uint8 (:func:`activations_to_uint8`), note embedded, loaded and run by ONNX Runtime (:func:`.files.finish`).

    Returns:
        ``(ModelProto, bytes, record calibration entries)``: ``activations_to_uint8``, the tensors rewritten.

    Raises:
        TargetSupportError: ONNX Runtime cannot load or run it.
    """
    import onnx

    rewritten = activations_to_uint8(q) if config.activation_type == "uint8" else []
    with scratch_dir("nncf") as work:
        raw = Path(work) / "quantized.onnx"
        onnx.save(q, str(raw))
        q, data = finish(raw, note, out / MODEL_FILE, config)
    return q, data, ({"activations_to_uint8": rewritten} if rewritten else {})


def activations_to_uint8(model: Any) -> list[str]:
    """Rewrite every per-tensor int8 activation ``QuantizeLinear``/``DequantizeLinear`` pair of ``model`` in place as
    uint8 on the same grid: zero point ``z + 128`` (``q_u8 = q_s8 + 128`` for every value, so the dequantized values,
    ``(q - z) * scale``, are unchanged; ONNX QuantizeLinear). Weights (integer initializers), per-channel pairs and zero
    points shared with anything else are left as they are.

    Returns:
        The activations rewritten (the tensors the pairs quantize), sorted.
    """
    from onnx import TensorProto, numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    users: dict[str, list[Any]] = {}
    for n in g.node:
        for k, x in enumerate(n.input):
            users.setdefault(x, []).append((n, k))
    done, q_outputs = [], set()
    for z, uses in users.items():
        t = inits.get(z)
        if t is None or t.data_type != TensorProto.INT8 or len(t.dims) > 1 or (t.dims and t.dims[0] != 1):
            continue
        if any(n.op_type not in ("QuantizeLinear", "DequantizeLinear") or k != 2 or n.input[0] in inits for n, k in uses):
            continue  # a weight's, or not only a zero point
        qs = [n for n, _ in uses if n.op_type == "QuantizeLinear"]
        if not qs:
            continue
        t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t).astype("int16") + 128).astype("uint8"), z))
        q_outputs |= {n.output[0] for n in qs}
        done += [n.input[0] for n in qs]
    for v in g.value_info:
        if v.name in q_outputs:
            v.type.tensor_type.elem_type = TensorProto.UINT8
    return sorted(set(done))


def nncf_record(q: Any, prepared: Any, model_digest: str, qdigest: str, cs_info: Any, config: StaticQuantConfig,
                opset_before: int, calib: dict[str, Any]) -> CalibrationRecord:
    """The record of NNCF's written model ``q`` (scales from its Q/DQ nodes, calibrator ``nncf``) quantized from
    ``prepared``; ``calib`` goes into ``calibration`` with the graph outputs added."""
    tensors = qdq_scales(q, prepared, calibrator="nncf")
    calib = {**calib, "outputs": outputs.output_summary(prepared, tensors, {}, q)}
    return make_record(tensors, model_digest, qdigest, cs_info, config, opset_before, opset_of(q), "static", calib, PACKAGES)


class NncfEngine(Engine):
    """``quantize.engine: nncf``: :func:`quantize_nncf` (NNCF reads the set itself: no checkpoint)."""

    name = "nncf"

    def check(self, config: Any, calibration_set: Any, checkpoint: Any) -> None:
        if checkpoint is not None:
            raise UnsupportedOptionError("--checkpoint: NNCF's engine keeps no calibration checkpoint; drop it or set engine: ort")

    def write(self, job: StaticJob) -> CalibrationRecord:
        return quantize_nncf(job.model, job.model_path, job.note, job.config, job.calibration_set, job.out)


register_engine(NncfEngine())

__all__ = ["CalibrationItems", "NncfEngine", "NncfArguments", "activations_to_uint8", "call_nncf", "nncf_arguments", "nncf_record", "prepare",
           "quantize_nncf", "require_nncf", "write_nncf_model"]

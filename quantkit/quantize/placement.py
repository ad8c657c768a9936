"""Q/DQ placement recipes: which tensors of a model get a QuantizeLinear/DequantizeLinear pair, per target runtime.

ORT's quantizer (the ``ort`` recipe) puts a Q/DQ pair on the inputs and outputs of every op type its registries
know. That suits ONNX Runtime, whose QDQ transformers turn each quantized group into an integer kernel, but not
OpenVINO: its CPU plugin fuses ``Conv + activation chain + FakeQuantize`` into one integer convolution only when
no Q/DQ pair sits between the Conv and its activation (``Relu``, ``Clip``, ``Sigmoid -> Mul`` (SiLU),
``HardSigmoid -> Mul`` (HardSwish), ``x * Clip(x + 3, 0, 6) / 6`` ...). Where one does, the chain runs as a
separate element-wise ``Subgraph`` node after each Conv, which measured about as long as the integer convolutions
saved (``shared/notes/openvino_int8_profile.md``).

The ``openvino`` recipe follows NNCF's CPU setup (``openvinotoolkit/nncf``: ``src/nncf/common/hardware/setups/cpu.py``
and the ONNX fused patterns ``src/nncf/onnx/hardware/fused_patterns.py``): Q/DQ on the activation inputs and the
weights of ``Conv``, ``ConvTranspose``, ``Gemm`` and ``MatMul`` only; no op's output quantized for its own sake (a
tensor is quantized where a quantized op reads it, so graph outputs stay float) except ``ConvTranspose``'s; unsigned
8-bit activations, per tensor except the inputs of depthwise convolutions, per channel (:mod:`.depthwise`); symmetric
signed 8-bit per-channel weights (zero point 0). ``ConvTranspose`` keeps its
output pair because OpenVINO's integer deconvolution with a float output was slow: on PP-OCRv4 det 640 (OpenVINO
2026.4, 1 thread, ``PERF_COUNT``, two alternating runs) ``ConvolutionBackpropData`` took 9.1 / 7.9 ms without the
pair and 3.5 / 3.1 ms with it, the layer sum 46.8 / 42.9 against 42.3 / 35.3 ms.

``openvino-eltwise`` adds Q/DQ on the inputs of ``Add``/``Mul`` whose two inputs are activations of the same shape
(a residual sum) and neither is computed from the other by an activation chain (that Mul *is* the activation). It
was measured and not kept as ``openvino``: on the demo detectors (OpenVINO 2026.4, default precision, a loaded 2-core
Zen 4, interleaved medians, ``bench/bench_placement.py``, three runs) it was as fast or slower than without in 11 of 12
comparisons, ms with / without: PP-OCRv4 det 640 at 1 / 2 threads 92.7/92.5, 78.7/59.4; 53.1/42.6, 75.2/59.0;
60.2/56.2, 46.8/45.7; ddddocr det 416: 41.6/30.3, 23.5/20.1; 26.7/26.6, 44.0/42.0; 36.9/36.2, 22.2/24.4 (the one
faster), at equal or lower agreement. A likely cause (not verified in OpenVINO's graph): a pair on the Conv branch of a
residual Add keeps the CPU plugin from fusing the Add into the Conv as a sum post-op.

A recipe is data (:class:`PlacementRecipe`); :func:`plan_placement` applies one to a model and returns the op types,
the nodes to keep out and the op types whose outputs stay float, which :mod:`.ort_bridge` hands to ORT as
``op_types_to_quantize``, ``nodes_to_exclude`` and ``OpTypesToExcludeOutputQuantization``. Every recipe shares the
calibrated ranges of one calibration: calibration always covers the ``ort`` recipe's tensors (a superset).
This module reads the ONNX graph only; it imports neither ONNX Runtime nor OpenVINO.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError

#: Ops that are part of an activation chain after a Conv (OpenVINO fuses them into the convolution as post-ops).
ACTIVATION_OPS = frozenset({"Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
                            "Selu", "Softplus", "Mish", "Gelu", "Erf", "Add", "Sub", "Mul", "Div"})
#: How many nodes an activation chain may span from its input to the Mul that closes it (x * Clip(x + 3, 0, 6) / 6: 2).
CHAIN_DEPTH = 4


@dataclasses.dataclass(frozen=True)
class PlacementRecipe:
    """Where Q/DQ pairs go, as named fields.

    Fields:
        name: the recipe's name (``quantize.placement``).
        op_types: op types whose activation inputs and weights are quantized; empty = every op type ORT's QDQ and
            QLinear registries know (ORT's own placement).
        paired_eltwise: element-wise op types quantized only where both inputs are activations of the same shape
            and neither is computed from the other by an activation chain (:func:`is_paired_eltwise`).
        quantize_outputs: whether ops quantize their own outputs (ORT's default); False = a tensor gets Q/DQ only
            where a quantized op reads it (``OpTypesToExcludeOutputQuantization`` = every quantized op type).
        per_channel_weights: the recipe needs per-channel weights (``quantize.per_channel: true``).
        symmetric_weights: the recipe needs symmetric weights, zero point 0 (``WeightSymmetric``); None = ORT's default.
        activation_type: the activation type the recipe needs, or None for any.
        output_op_types: op types whose outputs are quantized even when ``quantize_outputs`` is False.
        engine: the quantization engine that applies the recipe (``quantize.engine``): ``ort`` for the recipes
            :func:`plan_placement` hands to ONNX Runtime; ``nncf`` for NNCF's own placement, which NNCF decides.
        float_decode: keep the decoding tail in float (:func:`decode_tail`): every node between the last
            Conv/ConvTranspose/Gemm/MatMul and a graph output, so no graph output is quantized and box decoding
            (split, sigmoid, distribution softmax, the concat of boxes and scores) reads float values.
        per_channel_depthwise: quantize each depthwise ``Conv``'s input per channel (axis 1), as NNCF's CPU setup does, from
            the record's per-channel ranges (:func:`quantkit.quantize.depthwise.per_channel_inputs`): one scale flattens
            its narrow channels (PicoDet CDLA box F1 0.969 -> 0.710, the PP-OCR detector pixel IoU 0.979 -> 0.924 in NNCF's
            file made per-tensor, ``bench/bench_depthwise.py``). OpenVINO runs it; ONNX Runtime's ``QLinearConv`` cannot.
    """

    name: str
    op_types: tuple[str, ...] = ()
    paired_eltwise: tuple[str, ...] = ()
    quantize_outputs: bool = True
    per_channel_weights: bool = False
    symmetric_weights: bool | None = None
    activation_type: str | None = None
    output_op_types: tuple[str, ...] = ()
    engine: str = "ort"
    float_decode: bool = False
    per_channel_depthwise: bool = False


ORT = PlacementRecipe("ort")
ORT_FLOAT_DECODE = PlacementRecipe("ort-float-decode", float_decode=True)
"""ORT's placement with the decoding tail in float (:func:`decode_tail`). On YOLOv8n (DocLayNet, channels head
``[1, 15, 21504]``: pixel boxes up to 1024 concatenated with 0-1 scores) box F1 vs FP32 went 0.000 -> 0.944 on 8
rendered pages (``bench/bench_heads.py``); the scores no longer share one grid with the box coordinates."""
OPENVINO = PlacementRecipe("openvino", op_types=("Conv", "ConvTranspose", "Gemm", "MatMul"), quantize_outputs=False,
                          per_channel_weights=True, symmetric_weights=True, activation_type="uint8", output_op_types=("ConvTranspose",),
                          per_channel_depthwise=True)
OPENVINO_ELTWISE = dataclasses.replace(OPENVINO, name="openvino-eltwise", paired_eltwise=("Add", "Mul"))
NNCF = PlacementRecipe("nncf", per_channel_weights=True, symmetric_weights=True, engine="nncf")
"""NNCF's own placement (its CPU hardware config and fused patterns), decided by ``nncf.quantize``, not by this module."""

PLACEMENTS: dict[str, PlacementRecipe] = {r.name: r for r in (ORT, ORT_FLOAT_DECODE, OPENVINO, OPENVINO_ELTWISE, NNCF)}
"""Recipes by name; :func:`register_placement` adds one (a benchmark's variant, a user's own)."""


def register_placement(recipe: PlacementRecipe) -> None:
    """Make ``recipe`` selectable as ``quantize.placement: <recipe.name>``.

    Raises:
        ConfigError: the name is taken by a different recipe.
    """
    old = PLACEMENTS.get(recipe.name)
    if old is not None and old != recipe:
        raise ConfigError(f"placement {recipe.name!r} is already registered with other fields; pick another name")
    PLACEMENTS[recipe.name] = recipe


def placement_recipe(name: str) -> PlacementRecipe:
    """The recipe registered as ``name``.

    Raises:
        ConfigError: no such recipe.
    """
    if name not in PLACEMENTS:
        raise ConfigError(f"placement: {name!r} is not a known recipe; use one of {', '.join(sorted(PLACEMENTS))}")
    return PLACEMENTS[name]


#: Placements an engine other than ``ort`` applies itself: with ``engine: nncf``, ``nncf`` and ``openvino`` (quantkit's
#: ``openvino`` recipe follows NNCF's CPU setup, so NNCF's own file is that placement) give NNCF's file.
OWN_PLACEMENTS: dict[str, frozenset[str]] = {"nncf": frozenset({"nncf", "openvino"})}


def target_engine(engine: str, runtime: str, placement: str) -> tuple[str, str]:
    """``(engine, placement)`` of the file for runtime ``runtime`` (``targets.<runtime>.placement``) when the model's
    ``quantize.engine`` is ``engine``: the engine's own file for a placement it applies itself (:data:`OWN_PLACEMENTS`),
    else ORT's quantizer with that placement on the engine's ranges (:func:`quantkit.quantize.reuse.quantize_with_ranges`).

    Raises:
        ConfigError: an unknown placement, or one only another engine applies (the message names the one key to change).
    """
    recipe = PLACEMENTS.get(placement)
    if recipe is None:
        raise ConfigError(f"targets.{runtime}.placement: {placement!r} is not a known recipe; use one of {', '.join(sorted(PLACEMENTS))}")
    if placement in OWN_PLACEMENTS.get(engine, ()):
        return engine, engine
    if recipe.engine != "ort":
        raise ConfigError(f"targets.{runtime}.placement: {placement} is engine {recipe.engine}'s own placement and quantize.engine is "
                          f"{engine}; set quantize.engine: {recipe.engine} (for one model: models.<name>.quantize.engine)")
    return "ort", placement


@dataclasses.dataclass(frozen=True)
class PlacementPlan:
    """A recipe applied to one model: what ORT is told.

    op_types: ``op_types_to_quantize`` (sorted); nodes_to_exclude: nodes kept in float, the config's own first
    (sorted); no_output_op_types: ``OpTypesToExcludeOutputQuantization`` (sorted, empty = ORT's default).
    """

    op_types: tuple[str, ...]
    nodes_to_exclude: tuple[str, ...]
    no_output_op_types: tuple[str, ...] = ()


def _constants(model: Any) -> set[str]:
    g = model.graph
    return {i.name for i in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}


def _shapes(model: Any) -> dict[str, tuple[Any, ...]]:
    g = model.graph
    out: dict[str, tuple[Any, ...]] = {}
    for v in (*g.value_info, *g.input, *g.output):
        dims = v.type.tensor_type.shape.dim
        out[v.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims)
    return out


def _chain_reaches(start: str, target: str, producers: dict[str, Any], constants: set[str], depth: int) -> bool:
    """Whether ``start`` is computed from ``target`` by at most ``depth`` activation ops (each with one
    activation input, the others constants)."""
    t = start
    for _ in range(depth):
        node = producers.get(t)
        if node is None or node.op_type not in ACTIVATION_OPS:
            return False
        live = [i for i in node.input if i and i not in constants]
        if len(live) != 1:
            return False
        if live[0] == target:
            return True
        t = live[0]
    return False


def is_paired_eltwise(node: Any, producers: dict[str, Any], constants: set[str], shapes: dict[str, tuple[Any, ...]]) -> bool:
    """An ``Add``/``Mul`` OpenVINO can run on two integer inputs: both inputs are activations (no constant), of one
    known shape (no broadcast: an SE block's channel ``Mul`` is left alone), and neither is computed from the other
    by an activation chain of at most :data:`CHAIN_DEPTH` ops (``x * Sigmoid(x)`` is SiLU, part of the Conv's chain)."""
    ins = [i for i in node.input if i]
    if len(ins) != 2 or any(i in constants for i in ins):
        return False
    a, b = ins
    sa, sb = shapes.get(a), shapes.get(b)
    if sa is None or sa != sb or any(not isinstance(d, int) for d in sa):
        return False
    return not (_chain_reaches(a, b, producers, constants, CHAIN_DEPTH) or _chain_reaches(b, a, producers, constants, CHAIN_DEPTH))


#: Ops that compute features; a decoding tail ends at the last of them (:func:`decode_tail`).
COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def decode_tail(model: Any) -> tuple[str, ...]:
    """The nodes between the last compute op (:data:`COMPUTE_OPS`) and the graph outputs (sorted names): what a head
    does after its last convolution (Split, Sigmoid, Softmax, Reshape, Transpose, Concat, the box arithmetic). ORT's
    quantizer gives Split/Reshape/Transpose/Concat outputs their input's scale, so a tensor there is represented on
    the grid of a wider one (a YOLOv8 output's 0-1 scores on the grid of pixel box coordinates); in float they are not.
    A node whose output feeds no graph output through such ops is not part of the tail."""
    producers = {o: n for n in model.graph.node for o in n.output}
    tail: dict[str, Any] = {}
    stack = [o.name for o in model.graph.output]
    while stack:
        node = producers.get(stack.pop())
        if node is None or node.op_type in COMPUTE_OPS or node.name in tail:
            continue
        tail[node.name] = node
        stack += [i for i in node.input if i]
    return tuple(sorted(tail))


def plan_placement(recipe: PlacementRecipe, model: Any, op_types: Iterable[str], nodes_to_exclude: Iterable[str]) -> PlacementPlan:
    """Apply ``recipe`` to ``model`` (shape-inferred, so element-wise input shapes are known).

    Args:
        op_types: the op types the config allows (``resolve_exclusions``: ORT's registries minus ``op_types_to_exclude``).
        nodes_to_exclude: the nodes the config keeps in float.
    """
    if recipe.engine != "ort":
        raise ConfigError(f"placement {recipe.name!r} is applied by engine {recipe.engine}, not by ONNX Runtime's quantizer; set engine: {recipe.engine}")
    allowed = set(op_types)
    excluded = list(nodes_to_exclude)
    if not recipe.op_types and not recipe.paired_eltwise:
        quantized = sorted(allowed)
    else:
        wanted = set(recipe.op_types) | set(recipe.paired_eltwise)
        quantized = sorted(wanted & allowed)
        if not model.graph.value_info:  # element-wise input shapes are needed; intake's models carry them
            import onnx

            model = onnx.shape_inference.infer_shapes(model)
        producers = {o: n for n in model.graph.node for o in n.output}
        constants, shapes = _constants(model), _shapes(model)
        unpaired = sorted(n.name for n in model.graph.node if n.op_type in recipe.paired_eltwise and n.op_type not in recipe.op_types
                          and n.name not in excluded and not is_paired_eltwise(n, producers, constants, shapes))
        if any(not n for n in unpaired):
            raise ConfigError(f"placement {recipe.name!r}: the model has unnamed element-wise nodes; run 'quantkit intake' to name them")
        excluded += unpaired
    if recipe.float_decode:
        tail = decode_tail(model)
        if any(not n for n in tail):
            raise ConfigError(f"placement {recipe.name!r}: the model's head has unnamed nodes; run 'quantkit intake' to name them")
        excluded += tail
    present = {n.op_type for n in model.graph.node}
    quantized = [t for t in quantized if t in present]
    no_out = () if recipe.quantize_outputs else tuple(t for t in quantized if t not in recipe.output_op_types)
    return PlacementPlan(tuple(quantized), tuple(sorted(set(excluded))), no_out)


__all__ = ["ACTIVATION_OPS", "COMPUTE_OPS", "NNCF", "OPENVINO", "OPENVINO_ELTWISE", "ORT", "ORT_FLOAT_DECODE", "OWN_PLACEMENTS", "PLACEMENTS", "decode_tail", "PlacementPlan", "PlacementRecipe", "is_paired_eltwise", "placement_recipe",
           "plan_placement", "register_placement", "target_engine"]

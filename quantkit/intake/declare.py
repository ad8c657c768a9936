"""A model's ``params.yaml: models.<name>`` entry, read from the model itself (``quantkit models add``).

:func:`probe_io` fixes the model's single image input at the input size (given, or the input's own static
height and width) and reads every output's shape there: ONNX shape inference first (:func:`.graph.infer_shapes`),
one ONNX Runtime run on zeros where inference leaves a dimension unknown. :func:`plan_model_entry` adds the task
adapter (given, or guessed from the outputs by :func:`quantkit.tasks.guess.guess_adapter`) and the preprocessing
contract, and checks the whole entry with the configs intake and every later stage read it with
(:class:`~.prepare.IntakeConfig`, :class:`~quantkit.tasks.TaskConfig` and the adapter's ``check_outputs``), so a
written entry is one ``quantkit intake`` accepts. Writing it is :func:`quantkit.paramsfile.set_model_entry`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError, ModelError
from ..modelio import load_model
from ..note import Preprocessing
from ..tasks import TaskConfig
from ..tasks.guess import guess_adapter
from .graph import fix_input_shape, infer_shapes
from .prepare import IntakeConfig


PREPROCESSING_KEYS = ("color_order", "scale", "mean", "std", "resize_policy", "resize_short", "pad_value", "pad_input")
OPTIONAL_KEYS = ("resize_short", "pad_input")
"""Written only when given (their defaults mean "not used": the note leaves them out too)."""
"""Preprocessing keys a user passes (``--color-order`` ...); ``input_name``, ``layout``, ``channels`` and
``batch_axis`` are read from the model's input."""


@dataclasses.dataclass(frozen=True)
class ModelIO:
    """The model's input and outputs at a fixed input size.

    ``input_shape``: the input fixed at ``input_size`` ``(H, W)`` (pixels), batch 1; ``layout``: ``NCHW`` or
    ``NHWC`` (where the channel axis of 1, 3 or 4 entries is); ``outputs``: ``{name: shape}`` in graph order;
    ``shapes_from``: ``shape inference`` or ``one ONNX Runtime run`` (zeros in, float32).
    """

    input_name: str
    input_shape: tuple[int, ...]
    input_size: tuple[int, int]
    layout: Literal["NCHW", "NHWC"]
    channels: int
    batch_axis: bool
    outputs: dict[str, tuple[int | None, ...]]
    shapes_from: str


@dataclasses.dataclass(frozen=True)
class ModelEntryPlan:
    """What ``models add`` would write: ``entry`` (the ``models.<name>`` mapping), the probe, and how the task was
    chosen: ``guessed`` (True when the adapter is the guess, not ``--adapter``) with the guess's one-phrase
    ``reason``; ``defaulted``: preprocessing keys not passed, written with the contract's defaults."""

    name: str
    entry: dict[str, Any]
    io: ModelIO
    adapter: str
    guessed: bool
    reason: str
    defaulted: tuple[str, ...]


def _layout(dims: list[int | None], path: str, name: str) -> tuple[Literal["NCHW", "NHWC"], int, bool]:
    """``(layout, channels, batch_axis)`` of an image input from where its 1/3/4-entry channel axis is."""
    if len(dims) not in (3, 4):
        raise ModelError(f"{path}: input {name!r} has rank {len(dims)}; quantkit takes image inputs of rank 4 (N,C,H,W / N,H,W,C) or 3 (C,H,W / H,W,C)")
    batch = len(dims) == 4
    first, last = dims[1 if batch else 0], dims[-1]
    if first in (1, 3, 4):
        return "NCHW", int(first), batch
    if last in (1, 3, 4):
        return "NHWC", int(last), batch
    raise ModelError(f"{path}: input {name!r} {dims} has no channel axis of 1, 3 or 4 entries first or last; "
                     "export the model with a fixed channel dimension")


def probe_io(model_path: str | os.PathLike[str], input_size: tuple[int, int] | None = None) -> ModelIO:
    """Fix the single image input at ``input_size`` (default: the input's static H, W) and read the output shapes.

    Raises:
        ModelError: not a readable ONNX model, not one image input, no static size and none given, or the
            model cannot be run at that size (one line naming the file and the fix).
    """
    path = str(model_path)
    model = load_model(model_path, load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in init]
    if len(inputs) != 1:
        raise ModelError(f"{path}: has {len(inputs)} inputs {[v.name for v in inputs]}; quantkit handles single-image-input models only")
    vi = inputs[0]
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in vi.type.tensor_type.shape.dim]
    layout, channels, batch = _layout(dims, path, vi.name)
    hw_axes = (1, 2) if layout == "NHWC" else (2, 3)
    hw_axes = hw_axes if batch else tuple(a - 1 for a in hw_axes)
    static = tuple(dims[a] for a in hw_axes)
    if input_size is None:
        if any(d is None for d in static):
            raise ModelError(f"{path}: input {vi.name!r} has a dynamic height or width; pass --input-size H W (the size the model is deployed at)")
        input_size = (int(static[0]), int(static[1]))  # type: ignore[arg-type]
    shape = [channels, *input_size] if layout == "NCHW" else [*input_size, channels]
    shape = [1, *shape] if batch else shape
    fixed = infer_shapes(fix_input_shape(model, vi.name, tuple(shape), path=path), path)
    outputs: dict[str, tuple[int | None, ...]] = {}
    for o in fixed.graph.output:
        tt = o.type.tensor_type
        outputs[o.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim) if tt.HasField("shape") else ()
    shapes_from = "shape inference"
    if any(not s or None in s for s in outputs.values()):
        outputs, shapes_from = _run_once(load_model(model_path), vi.name, tuple(shape), path), "one ONNX Runtime run"
    return ModelIO(vi.name, tuple(shape), tuple(input_size), layout, channels, batch, outputs, shapes_from)  # type: ignore[arg-type]


def _run_once(model: Any, input_name: str, shape: tuple[int, ...], path: str) -> dict[str, tuple[int | None, ...]]:
    """Output shapes from one ONNX Runtime run on zeros (float32) of ``shape``."""
    import numpy as np

    from ..runtimes import make_runtime

    try:
        with make_runtime("onnxruntime", model) as rt:
            outs = rt.infer({input_name: np.zeros(shape, np.float32)})
    except Exception as e:  # noqa: BLE001  (ORT raises its own exception types)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ModelError(f"{path}: ONNX Runtime cannot run the model at input {list(shape)} ({first}); check --input-size") from None
    return {name: tuple(int(d) for d in a.shape) for name, a in outs.items()}


def plan_model_entry(name: str, model_path: str | os.PathLike[str], params_path: str | os.PathLike[str], *,
                     adapter: str | None = None, options: Mapping[str, Any] | None = None,
                     input_size: tuple[int, int] | None = None, preprocessing: Mapping[str, Any] | None = None) -> ModelEntryPlan:
    """The ``models.<name>`` entry for ``model_path``, checked as intake will read it; nothing is written.

    Args:
        name: the model's name under ``models`` (letters, digits, ``_``, ``-``; it names DVC stages and folders).
        model_path: the ONNX file; written as ``file`` relative to the params file's folder (POSIX separators).
        params_path: the params file the entry goes into.
        adapter: the task adapter; None = the guess (``guessed`` is then True).
        options: adapter options; None = those the guess implies when ``adapter`` is the guessed one.
        input_size: ``(H, W)`` pixels; None = the input's static size.
        preprocessing: any of :data:`PREPROCESSING_KEYS` (as in ``intake.preprocessing``); the others are written
            with :class:`~quantkit.note.Preprocessing`'s defaults and listed in ``defaulted``.

    Raises:
        ConfigError: a bad name, no adapter given and none guessed (naming the shapes and ``--adapter``), or an
            entry the configs refuse (the field and the fix).
        ModelError: see :func:`probe_io`; the adapter does not read the model's outputs (``check_outputs``).
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise ConfigError(f"model name {name!r}: use letters, digits, '_' and '-', starting with a letter (it names DVC stages and work/models/<name>)")
    pre = dict(preprocessing or {})
    unknown = sorted(set(pre) - set(PREPROCESSING_KEYS))
    if unknown:
        raise ConfigError(f"preprocessing: {unknown[0]!r} is not one of {', '.join(PREPROCESSING_KEYS)}")
    io = probe_io(model_path, input_size)
    guess = guess_adapter(io.outputs, io.input_size)
    if adapter is None and guess.adapter is None:
        raise ConfigError(f"{model_path}: cannot guess the task adapter: {guess.reason}; pass --adapter NAME "
                          "(db_text, segmentation, classifier, box_detector, ctc_text or a registered one)")
    chosen = adapter or guess.adapter or ""
    opts = dict(options) if options is not None else (dict(guess.options) if chosen == guess.adapter else {})
    defaults = Preprocessing()
    contract: dict[str, Any] = {"input_name": io.input_name, "layout": io.layout}
    if io.channels != 3:
        contract["channels"] = io.channels
    if not io.batch_axis:
        contract["batch_axis"] = False
    defaulted = tuple(k for k in PREPROCESSING_KEYS if k not in pre and k not in OPTIONAL_KEYS)
    for k in (k for k in PREPROCESSING_KEYS if k in pre or k not in OPTIONAL_KEYS):
        v = pre.get(k, getattr(defaults, k))
        contract[k] = list(v) if isinstance(v, tuple) else v
    entry: dict[str, Any] = {
        "source": "file",
        "file": _relative(Path(model_path), Path(params_path)),
        "intake": {"input_size": list(io.input_size), "preprocessing": contract},
        "task": {"adapter": chosen, "options": opts},
    }
    IntakeConfig.from_dict(entry["intake"], where=f"models.{name}.intake")
    task = TaskConfig.from_dict(entry["task"], where=f"models.{name}.task").make()
    task.check_outputs({k: list(v) for k, v in io.outputs.items()})
    reason = guess.reason if chosen == guess.adapter else f"given; the outputs suggest {guess.adapter or 'no built-in adapter'}: {guess.reason}"
    return ModelEntryPlan(name, entry, io, chosen, adapter is None, reason, defaulted)


def _relative(model: Path, params: Path) -> str:
    """``model`` relative to the params file's folder, POSIX separators (what DVC and the params file use)."""
    return Path(os.path.relpath(model.resolve(), params.resolve().parent)).as_posix()


def probe_decisions(model_path: str | os.PathLike[str], entry: Mapping[str, Any], image_set: str | os.PathLike[str] | None,
                    images: int = 4) -> tuple[int, int]:
    """Run the FP32 model on the first ``images`` images of ``image_set`` with the entry's preprocessing and input
    size, and decide each through the entry's task adapter: ``(decisions found, images run)``. An adapter that cannot
    read the outputs of a real image raises here, before anything is written (``quantkit models add``).

    Args:
        model_path: the ONNX file as the user gave it (input shape fixed to the entry's input size here, in memory).
        entry: a ``models.<name>`` entry (``intake``, ``task``).
        image_set: a registered set folder; None runs nothing (``(0, 0)``).
        images: how many images of the set, in manifest order.

    Raises:
        ModelError: ONNX Runtime cannot run the model, or the adapter cannot read its outputs (its own message).
        ConfigError: the entry's intake or task does not validate.
    """
    import numpy as np

    from ..calibset.manifest import CalibrationSet
    from ..imageio import load_image
    from ..runtimes import make_runtime

    if image_set is None:
        return 0, 0
    intake = IntakeConfig.from_dict(dict(entry["intake"]))
    pre = intake.preprocessing
    proto = load_model(model_path)
    task = TaskConfig.from_dict(dict(entry["task"])).make().with_model(proto)
    cset = CalibrationSet.load(image_set)
    found = run = 0
    with make_runtime("onnxruntime", proto) as rt:
        for e in cset.entries[:images]:
            x, _ = pre.apply(load_image(Path(cset.root) / e.file))
            try:
                outputs = rt.infer({pre.input_name: x.astype(np.float32, copy=False)})
                found += len(task.decide(outputs))
            except ModelError:
                raise
            except Exception as err:  # noqa: BLE001  (an adapter's own exception on outputs it cannot read)
                raise ModelError(f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from None
            run += 1
    return found, run

"""Export a PyTorch model to an intake folder, archive how, and compare it with the framework.

:func:`export_torch` writes one folder atomically (:func:`quantkit._io.atomic_output_dir`); nothing is
written when it raises:

* ``model.onnx``: input fixed to ``batch × 3 × input_size`` (``batch × H × W × 3`` for NHWC), the
  :class:`~quantkit.note.ExportNote` in ``metadata_props``;
* ``export_note.json``: the same note; its ``provenance.export`` (:class:`~quantkit.note.FrameworkExport`)
  archives the MODULE and its digests, the exact export call, exporter and opset, and the sample files;
  ``provenance.runtime_versions`` the python/torch/onnx/onnxruntime/numpy/quantkit versions;
* ``sample/input.npy`` (the traced input) and ``sample/output_<i>.npy`` (PyTorch's outputs on it), each
  content-hashed in the note;
* ``export.json``: :class:`ExportResult` (config, per-output ONNX Runtime vs PyTorch error over every sample,
  validation, inspection).

The folder is an intake folder: ``quantkit intake OUT/model.onnx`` and ``quantkit quantize OUT`` take it.

The exporter is ``torch.onnx.export(..., dynamo=False)`` (:mod:`.torch_onnx`, which also names the submodule
holding an operator that cannot be exported). When ONNX Runtime differs from PyTorch beyond tolerance,
:mod:`.localize` names the first submodule whose output differs.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_output_dir, atomic_write_bytes, atomic_write_json, sha256_bytes
from .._overwrite import check_output_dir
from ..errors import ConfigError, ModelError
from ..intake.inspect import InspectReport, inspect_model
from ..intake.notecheck import text_probe
from ..intake.opset import OutputDiff
from ..intake.validate import ValidationReport, validate_model
from ..note import ArchivedArray, ExportNote, FrameworkExport, Provenance
from .config import TorchExportConfig
from .localize import Localization, array_diff, localize
from .source import TorchSource, import_torch, load_source, weights_digest
from .torch_onnx import EXPORTER, export_bytes, export_kwargs, failing_submodule, first_line, flatten_outputs

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

FrameworkDiff = OutputDiff
"""ONNX Runtime vs PyTorch for one output over all samples (the record an opset conversion's check uses)."""


class ExportMismatchError(ModelError):
    """ONNX Runtime's outputs differ from PyTorch's beyond tolerance. ``localization`` says where they start
    to differ (``None`` when localisation is off or not possible)."""

    def __init__(self, message: str, localization: Localization | None = None) -> None:
        super().__init__(message)
        self.localization = localization


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What ``export.json`` holds."""

    config: TorchExportConfig
    module: str
    kind: str
    model_sha256: str
    samples: int
    outputs: tuple[FrameworkDiff, ...]
    validation: ValidationReport
    inspection: InspectReport
    note: ExportNote
    exporter_warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(o.within_tolerance for o in self.outputs)

    @property
    def record(self) -> FrameworkExport:
        """The archive of the export (the note's ``provenance.export``)."""
        rec = self.note.provenance.export
        if rec is None:  # pragma: no cover - export_torch always sets it
            raise RuntimeError("export note without provenance.export")
        return rec

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "config": self.config.to_dict(), "module": self.module, "kind": self.kind,
                "model_sha256": self.model_sha256, "samples": self.samples, "passed": self.passed,
                "outputs": [o.to_dict() for o in self.outputs], "validation": self.validation.to_dict(),
                "inspection": self.inspection.to_dict(), "export_note": self.note.to_dict(), "exporter_warnings": list(self.exporter_warnings)}

    def __repr__(self) -> str:
        worst = max((o.max_abs_diff for o in self.outputs), default=0.0)
        return f"ExportResult({self.module}, opset={self.config.opset}, passed={self.passed}, max_abs_diff={worst:.3g})"


def _samples(config: TorchExportConfig) -> list[np.ndarray]:
    """``sample_images``, the text probe, then random images, each through the note's preprocessing and
    repeated to the batch size: ``float32`` arrays of the model's input shape."""
    from ..imageio import load_image

    pre = config.preprocessing
    images = [load_image(p) for p in config.sample_images]
    rng = np.random.default_rng(config.seed)
    h, w = config.input_size
    images += [text_probe(config.input_size, seed=config.seed).image]
    images += [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(config.random_samples)]
    return [np.repeat(pre.apply(img)[0], config.batch_size, axis=0) for img in images]


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _call_string(source: TorchSource, kwargs: dict[str, Any], seed: int) -> str:
    """The export as one line of Python (model construction, eval, export), with where the model came from."""
    if source.kind == "factory":
        target, _, attr = source.spec.rpartition(":")
        args = ", ".join(f"{k}={v!r}" for k, v in source.factory_kwargs.items())
        model, note = f"{attr.rpartition('.')[2]}({args})", f"{attr} from {target}, called after torch.manual_seed({seed})"
    elif source.kind == "module":
        model, note = f"{source.spec.rpartition('.')[2]}(...)", f"the {source.spec} object given to quantkit.export.export_torch"
    elif source.kind == "torchscript":
        model, note = f"torch.jit.load({source.spec!r})", ""
    else:
        model, note = f"torch.export.unflatten(torch.export.load({source.spec!r}))", ""
    opts = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    call = f"model = {model}; model.eval(); torch.onnx.export(model, (torch.from_numpy(numpy.load('sample/input.npy')),), 'model.onnx', {opts})"
    return call + (f"  # {note}" if note else "")


def _run_torch(module: Any, x: np.ndarray) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        return [t.detach().cpu().numpy() for t in flatten_outputs(module(torch.from_numpy(x)))]


def _export(source: TorchSource, x0: np.ndarray, kwargs: dict[str, Any]) -> tuple[bytes, tuple[str, ...]]:
    import torch

    try:
        data, notes = export_bytes(source.module, (torch.from_numpy(x0),), kwargs)
    except Exception as e:  # noqa: BLE001 - UnsupportedOperatorError, OnnxExporterError, tracer errors
        log.debug("torch.onnx.export failed", exc_info=True)
        where = failing_submodule(source.module, torch.from_numpy(x0), kwargs, e)
        who = f"{source.name} submodule {where}" if where else (source.name if source.kind in ("factory", "module") else "")
        raise ModelError(f"{source.spec}: {who + ': ' if who else ''}torch.onnx.export failed ({first_line(e)}); "
                         f"replace the operator, try another export.opset, or register a custom symbolic "
                         f"(torch.onnx.register_custom_op_symbolic)") from None
    # torch.export archives are traced through torch.export.unflatten's generated code, whose own tracer
    # warnings say nothing about the user's model: logged, not shown
    level = logging.DEBUG if source.kind == "torch.export" else logging.WARNING
    for note in notes:
        log.log(level, "torch.onnx.export: %s", note)
    return data, notes


def _compare(source: TorchSource, data: bytes, out_names: list[str], xs: list[np.ndarray], config: TorchExportConfig) -> tuple[tuple[FrameworkDiff, ...], list[np.ndarray], int | None]:
    """Per output over all samples; PyTorch's outputs on the first sample; index of the first failing sample."""
    from ..runner import OrtRunner

    diffs: dict[str, list[tuple[float, float, bool]]] = {n: [] for n in out_names}
    first_refs: list[np.ndarray] = []
    failing: int | None = None
    with OrtRunner(data, name=f"{source.name}.onnx") as runner:
        for i, x in enumerate(xs):
            refs = _run_torch(source.module, x)
            if len(refs) != len(out_names):
                raise ModelError(f"{source.spec}: the module returns {len(refs)} tensors but the ONNX graph has {len(out_names)} outputs; "
                                 f"return tensors only (a tuple, list or dict of tensors)")
            got = runner.infer({config.preprocessing.input_name: x})
            for name, ref in zip(out_names, refs):
                d = array_diff(got[name], ref, config.atol, config.rtol)
                diffs[name].append(d)
                if not d[2] and failing is None:
                    failing = i
            if i == 0:
                first_refs = refs
    outputs = tuple(FrameworkDiff(n, max(v[0] for v in vs), max(v[1] for v in vs), all(v[2] for v in vs)) for n, vs in diffs.items())
    return outputs, first_refs, failing


def _refuse(source: TorchSource, outputs: tuple[FrameworkDiff, ...], x: np.ndarray, config: TorchExportConfig, notes: tuple[str, ...]) -> ExportMismatchError:
    import onnx
    import torch

    bad = next(o for o in outputs if not o.within_tolerance)
    head = (f"{source.spec}: ONNX Runtime differs from PyTorch on output {bad.name!r} by up to {bad.max_abs_diff:.3g} "
            f"(tolerance export.atol {config.atol:g} + export.rtol {config.rtol:g}*|torch|)")
    tail = f"; the exporter warned: {notes[0]}" if notes else ""
    if not config.localize:
        return ExportMismatchError(head + "; set export.localize: true to find the first diverging submodule" + tail)
    if not source.hookable:
        return ExportMismatchError(head + "; TorchScript modules run no forward hooks, so the diverging submodule cannot be named: "
                                   "export from the Python factory instead" + tail)
    try:
        model = onnx.load_from_string(export_bytes(source.module, (torch.from_numpy(x),), export_kwargs(config, preserve=True))[0])
        loc = localize(source.module, x, model, _run_torch(source.module, x), input_name=config.preprocessing.input_name,
                       flatten=flatten_outputs, atol=config.atol, rtol=config.rtol)
    except Exception as e:  # noqa: BLE001 - the refusal stands; only the diagnosis failed
        log.debug("layer-by-layer comparison failed", exc_info=True)
        return ExportMismatchError(f"{head}; the layer-by-layer comparison could not run ({type(e).__name__}: {first_line(e)}){tail}")
    log.info("layer-by-layer comparison: %s", [layer.to_dict() for layer in loc.layers])
    return ExportMismatchError(f"{head}; {loc.describe()}{tail}", loc)


def export_torch(module: Any, config: TorchExportConfig, out: str | Path, *, command: str = "") -> ExportResult:
    """Export ``module`` at the fixed input shape into the intake folder ``out`` (see the module docstring).

    Args:
        module: MODULE as a string (see :func:`quantkit.export.load_source`) or a ``torch.nn.Module``.
        config: the ``export`` section.
        out: output folder (replaced whole on success).
        command: the command line that asked for the export, archived as ``provenance.export_command``
            (default: the export call).

    Raises:
        ConfigError: torch is missing, MODULE has a wrong form, or ``output_names`` does not fit the module.
        InputFileError: MODULE's file or package is not found.
        ModelError: the factory fails, an operator cannot be exported (the submodule is named), or the
            exported model fails validation.
        ExportMismatchError: ONNX Runtime's outputs differ from PyTorch's beyond ``atol + rtol*|torch|``
            (the first diverging submodule is named).
        InputFileError: ``out`` is, holds or lies inside MODULE's file, or is a folder another command wrote.
    """
    import onnx

    from ..versions import CORE, tool_versions

    inputs = [Path(p) for p in ((module, module.rsplit(":", 1)[0]) if isinstance(module, str) else ()) if p and Path(p).is_file()]
    check_output_dir(out, "export", inputs=inputs)  # now, not after the export
    torch = import_torch()
    source = load_source(module, config.factory_kwargs, seed=config.seed) if isinstance(module, str) else _wrap(module, config)
    xs = _samples(config)
    try:
        n_out = len(_run_torch(source.module, xs[0]))
    except Exception as e:  # noqa: BLE001 - the user's forward: wrong input rank, channels or size
        log.debug("the model failed on the sample input", exc_info=True)
        raise ModelError(f"{source.spec}: running the model on a {list(xs[0].shape)} float32 input raised {type(e).__name__}: {first_line(e)}; "
                         f"check export.input_size, export.batch_size and export.preprocessing.layout (quantkit exports single-image-input models)") from None
    if config.output_names and len(config.output_names) != n_out:
        raise ConfigError(f"export.output_names lists {len(config.output_names)} names but {source.spec} returns {n_out} tensors; name each output")
    kwargs = export_kwargs(config)
    data, exporter_warnings = _export(source, xs[0], kwargs)
    model = onnx.load_from_string(data)
    validation = validate_model(model)
    if not validation.ok:
        first = next(i for i in validation.issues if i.severity == "error")
        raise ModelError(f"{source.spec}: exported model fails {first.stage} ({first.message}); {first.fix}")
    out_names = [o.name for o in model.graph.output]
    outputs, refs, failing = _compare(source, data, out_names, xs, config)
    if failing is not None:
        raise _refuse(source, outputs, xs[failing], config, exporter_warnings)
    files = {"sample/input.npy": _npy(xs[0])} | {f"sample/output_{i}.npy": _npy(r) for i, r in enumerate(refs)}
    arrays = [ArchivedArray(config.preprocessing.input_name, "sample/input.npy", sha256_bytes(files["sample/input.npy"]), xs[0].shape, str(xs[0].dtype))]
    arrays += [ArchivedArray(n, f"sample/output_{i}.npy", sha256_bytes(files[f"sample/output_{i}.npy"]), r.shape, str(r.dtype))
               for i, (n, r) in enumerate(zip(out_names, refs))]
    call = _call_string(source, kwargs, config.seed)
    record = FrameworkExport(module=source.spec, module_sha256=source.sha256, weights_sha256=weights_digest(source.module),
                             factory_kwargs=source.factory_kwargs, exporter=EXPORTER, call=call, opset=config.opset,
                             sample_input=arrays[0], framework_outputs=tuple(arrays[1:]))
    note = ExportNote(preprocessing=config.preprocessing, provenance=Provenance(
        source=source.spec, source_digest=source.sha256, framework="PyTorch", framework_version=torch.__version__,
        export_command=command or call, opset=config.opset, sample_input_digest=sha256_bytes(np.ascontiguousarray(xs[0]).tobytes()),
        runtime_versions=tool_versions((*CORE, "torch"), python=True), export=record))
    note.embed(model)
    final = model.SerializeToString()
    result = ExportResult(config, source.spec, source.kind, sha256_bytes(final), len(xs), outputs, validation, inspect_model(model), note,
                          exporter_warnings)
    with atomic_output_dir(out, command="export", inputs=inputs) as tmp:
        atomic_write_bytes(tmp / "model.onnx", final)
        for rel, blob in files.items():
            atomic_write_bytes(tmp / rel, blob)
        note.save(tmp / "export_note.json")
        atomic_write_json(tmp / "export.json", result.to_dict())
    log.info("%r", result)
    return result


def _wrap(module: Any, config: TorchExportConfig) -> TorchSource:
    """A ``torch.nn.Module`` given directly (Python API): named by its class, no file digest."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"export_torch: expected a torch.nn.Module or a MODULE string, got {type(module).__name__}")
    if config.factory_kwargs:
        raise ConfigError("export.factory_kwargs apply to a MODULE factory, not to a module object; remove them")
    module.eval()
    cls = type(module)
    return TorchSource(f"{cls.__module__}.{cls.__qualname__}", "module", module, "", {})

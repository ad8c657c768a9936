"""Export a PyTorch module to ONNX with the export note, validate it, and compare with PyTorch.

:func:`export_torch` writes one folder atomically: ``model.onnx`` (fixed input shape, note in
``metadata_props``), ``export_note.json`` and ``export.json`` (:class:`ExportResult`: validation,
inspection, and ONNX Runtime vs PyTorch max absolute/relative error per output on sample inputs).
The output folder has the same layout as an intake folder, so ``quantkit intake``/``quantize`` accept it.

Exporter: ``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter). The default dynamo
exporter of torch ≥ 2.9 needs ``onnxscript``, which quantkit does not depend on. When an operator
fails to export, the module is run once with forward pre-hooks capturing every submodule's inputs,
and the deepest submodule that fails on its own with the same error is named in the message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_output_dir, atomic_write_bytes, atomic_write_json, sha256_bytes
from ..config import Config
from ..errors import ConfigError, ModelError
from ..note import ExportNote, Preprocessing, Provenance
from .inspect import InspectReport, inspect_model
from .notecheck import text_probe
from .opset import OutputDiff
from .validate import ValidationReport, validate_model

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TorchExportConfig(Config):
    """How to export. ``input_size`` is ``(height, width)``; ``opset`` the ai.onnx opset to emit;
    ``atol`` the largest absolute ONNX Runtime vs PyTorch difference per output element allowed;
    ``random_samples`` uniform uint8 images (``seed``) besides the text probe; ``preprocessing``
    the note's contract (its ``input_size`` defaults to ``input_size``)."""

    input_size: tuple[int, int] = (224, 224)
    batch_size: int = 1
    opset: int = 17
    output_names: tuple[str, ...] = ()
    atol: float = 1e-4
    random_samples: int = 1
    seed: int = 0
    export_command: str = ""
    preprocessing: Preprocessing = dataclasses.field(default_factory=lambda: Preprocessing(input_size=(224, 224)))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str | None = None) -> TorchExportConfig:
        if isinstance(data, dict):
            data = dict(data)
            pre = dict(data.get("preprocessing") or {})
            pre.setdefault("input_size", list(data.get("input_size", (224, 224))))
            data["preprocessing"] = pre
        return super().from_dict(data, where=where or "export")

    def validate(self) -> None:
        if tuple(self.preprocessing.input_size) != tuple(self.input_size):
            raise ConfigError(f"export.preprocessing.input_size {list(self.preprocessing.input_size)} differs from export.input_size {list(self.input_size)}; set only export.input_size")
        if not 7 <= self.opset <= 20:
            raise ConfigError(f"export.opset: {self.opset} must be in 7..20 (TorchScript exporter range)")
        if self.batch_size < 1 or self.atol < 0 or self.random_samples < 0:
            raise ConfigError("export.batch_size must be >= 1; export.atol and export.random_samples >= 0")


FrameworkDiff = OutputDiff
"""ONNX Runtime vs PyTorch for one output over all samples (the same record as an opset conversion's check)."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What ``export.json`` holds."""

    config: TorchExportConfig
    module: str
    model_sha256: str
    samples: int
    outputs: tuple[FrameworkDiff, ...]
    validation: ValidationReport
    inspection: InspectReport
    note: ExportNote

    @property
    def passed(self) -> bool:
        return all(o.within_tolerance for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "config": self.config.to_dict(), "module": self.module, "model_sha256": self.model_sha256,
                "samples": self.samples, "passed": self.passed, "outputs": [o.to_dict() for o in self.outputs],
                "validation": self.validation.to_dict(), "inspection": self.inspection.to_dict(), "export_note": self.note.to_dict()}

    def __repr__(self) -> str:
        worst = max((o.max_abs_diff for o in self.outputs), default=0.0)
        return f"ExportResult({self.module}, opset={self.config.opset}, passed={self.passed}, max_abs_diff={worst:.3g})"


def _first_line(e: BaseException) -> str:
    t = str(e).strip()
    return t.splitlines()[0] if t else type(e).__name__


@contextlib.contextmanager
def _stdout_to_log() -> Iterator[None]:
    """Route file descriptor 1 to the debug log while exporting.

    torch 2.13's TorchScript exporter enables its C++ ONNX log unconditionally
    (``setup_onnx_logging`` tests the function object ``_jit_is_onnx_log_enabled`` instead of
    calling it) and so writes "Torch IR graph at exception" to stdout; a library must not print.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace").strip()
            if text:
                log.debug("torch.onnx.export output:\n%s", text)


def _export_bytes(module: Any, args: tuple[Any, ...], opset: int, input_names: list[str] | None = None, output_names: list[str] | None = None) -> bytes:
    import torch

    with tempfile.TemporaryDirectory(prefix="quantkit-export-") as d, _stdout_to_log(), warnings.catch_warnings():
        # dynamo=False is deliberate (see the module docstring); its deprecation notice is expected
        warnings.simplefilter("ignore", DeprecationWarning)
        path = Path(d) / "model.onnx"
        torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=input_names, output_names=output_names or None, do_constant_folding=True)
        return path.read_bytes()


def failing_submodule(module: Any, x: Any, opset: int, error: BaseException) -> str | None:
    """Qualified name (``'backbone.3.act'``) and class of the deepest submodule that fails to export on
    its own with the same operator as ``error``; ``None`` when no submodule reproduces it."""
    import torch

    captured: dict[str, tuple[Any, ...]] = {}
    handles = []
    for name, sub in module.named_modules():
        if name:
            handles.append(sub.register_forward_pre_hook(lambda m, args, _n=name: captured.setdefault(_n, args)))
    try:
        with torch.no_grad():
            module(x)
    except Exception:  # noqa: BLE001 - the module itself fails on x: nothing to localise
        return None
    finally:
        for h in handles:
            h.remove()
    op = re.search(r"'(\w+::\w+)'", str(error))
    subs = dict(module.named_modules())
    for name in sorted(captured, key=lambda n: -n.count(".")):
        try:
            _export_bytes(subs[name], captured[name], opset)
        except Exception as e:  # noqa: BLE001 - exporter errors vary by operator
            if op is None or op.group(1) in str(e):
                return f"{name} ({type(subs[name]).__name__})"
    return None


def export_torch(module: Any, config: TorchExportConfig, out: str | Path) -> ExportResult:
    """Export ``module`` (a ``torch.nn.Module``, put in eval mode) at the fixed input shape.

    Raises:
        ModelError: an operator cannot be exported (the message names the submodule), the exported
            model fails validation, or ONNX Runtime's outputs differ from PyTorch's beyond ``atol``.
        Nothing is written under ``out`` when an error is raised.
    """
    import onnx
    import torch

    from ..runner import OrtRunner
    from ..versions import tool_versions

    pre = config.preprocessing
    cls = type(module).__name__
    module.eval()
    h, w = config.input_size
    probe = text_probe(config.input_size, seed=config.seed)
    rng = np.random.default_rng(config.seed)
    images = [probe.image] + [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(config.random_samples)]
    xs = [np.repeat(pre.apply(img)[0], config.batch_size, axis=0) for img in images]
    x0 = torch.from_numpy(xs[0])
    try:
        data = _export_bytes(module, (x0,), config.opset, [pre.input_name], list(config.output_names))
    except Exception as e:  # noqa: BLE001 - UnsupportedOperatorError, OnnxExporterError, tracer errors
        where = failing_submodule(module, x0, config.opset, e)
        raise ModelError(f"{cls}{' submodule ' + where if where else ''}: torch.onnx.export failed ({_first_line(e)}); replace the operator, "
                         f"try another export.opset, or register a custom symbolic (torch.onnx.register_custom_op_symbolic)") from None
    model = onnx.load_from_string(data)
    validation = validate_model(model)
    if not validation.ok:
        first = next(i for i in validation.issues if i.severity == "error")
        raise ModelError(f"{cls}: exported model fails {first.stage} ({first.message}); {first.fix}")
    out_names = [o.name for o in model.graph.output]
    diffs: dict[str, list[tuple[float, float]]] = {n: [] for n in out_names}
    with OrtRunner(data, name=f"{cls}.onnx") as runner, torch.no_grad():
        for x in xs:
            ref = module(torch.from_numpy(x))
            refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
            got = runner.infer({pre.input_name: x})
            for name, r in zip(out_names, refs):
                a, b = np.asarray(got[name], np.float64), r.detach().numpy().astype(np.float64)
                d = np.abs(a - b)
                diffs[name].append((float(d.max()), float((d / np.maximum(np.abs(b), 1e-6)).max())))
    outputs = tuple(FrameworkDiff(n, max(v[0] for v in vs), max(v[1] for v in vs), max(v[0] for v in vs) <= config.atol) for n, vs in diffs.items())
    bad = [o for o in outputs if not o.within_tolerance]
    if bad:
        raise ModelError(f"{cls}: ONNX Runtime differs from PyTorch on output {bad[0].name!r} by {bad[0].max_abs_diff:.3g} (> export.atol {config.atol:g}); check the exported ops or raise atol")
    note = ExportNote(preprocessing=pre, provenance=Provenance(
        source=f"torch.nn.Module {type(module).__module__}.{cls}", source_digest="", framework="PyTorch", framework_version=torch.__version__,
        export_command=config.export_command or f"torch.onnx.export({cls}, opset_version={config.opset}, dynamo=False, input shape {list(xs[0].shape)})",
        opset=config.opset, sample_input_digest=sha256_bytes(np.ascontiguousarray(xs[0]).tobytes()), runtime_versions={**tool_versions(python=True), "torch": torch.__version__}))
    note.embed(model)
    final = model.SerializeToString()
    result = ExportResult(config, cls, sha256_bytes(final), len(xs), outputs, validation, inspect_model(model), note)
    with atomic_output_dir(out) as tmp:
        atomic_write_bytes(tmp / "model.onnx", final)
        note.save(tmp / "export_note.json")
        atomic_write_json(tmp / "export.json", result.to_dict())
    log.info("%r", result)
    return result


__all__ = ["ExportResult", "FrameworkDiff", "TorchExportConfig", "export_torch", "failing_submodule"]

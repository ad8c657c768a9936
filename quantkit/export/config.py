"""The ``export:`` section of ``params.yaml``: how ``quantkit export`` exports and compares a PyTorch model."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import Config
from ..errors import ConfigError
from ..note import Preprocessing

MIN_OPSET, MAX_OPSET = 7, 20
"""Opsets the TorchScript exporter emits (``torch/onnx/_constants.py``: ``ONNX_MIN_OPSET``,
``ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET`` in torch 2.13)."""


@dataclasses.dataclass(frozen=True)
class TorchExportConfig(Config):
    """How to export a PyTorch model and how closely ONNX Runtime must reproduce it.

    Attributes:
        input_size: ``(height, width)`` in pixels the input is fixed to; also the note's input size.
        batch_size: fixed batch dimension.
        opset: ai.onnx opset to emit (7..20, the TorchScript exporter's range; 13 or more for per-channel
            quantization).
        output_names: names for the graph outputs, in the order the module returns them (empty: the
            exporter's numbers).
        factory_kwargs: keyword arguments for a ``package.module:factory`` MODULE.
        sample_images: image files (paths relative to the working folder) to compare on before the text
            probe; the first sample is the one the model is traced with and that is archived.
        random_samples: uniform uint8 images (``seed``) compared on besides the text probe.
        seed: seed of the random samples and the probe, and of torch's RNG while the factory runs
            (a factory that builds random weights builds the same ones every time).
        atol, rtol: an element of an output agrees when ``|onnx - torch| <= atol + rtol * |torch|``
            (``numpy.isclose``'s rule); the same rule decides, layer by layer, where outputs start to differ.
        localize: when an output differs, export again with every submodule's output exposed and name the
            first submodule whose output differs (see :mod:`quantkit.export.localize`).
        preprocessing: the export note's preprocessing contract; its ``input_size`` defaults to ``input_size``.
    """

    input_size: tuple[int, int] = (224, 224)
    batch_size: int = 1
    opset: int = 17
    output_names: tuple[str, ...] = ()
    factory_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    sample_images: tuple[str, ...] = ()
    random_samples: int = 1
    seed: int = 0
    atol: float = 1e-4
    rtol: float = 1e-3
    localize: bool = True
    preprocessing: Preprocessing = dataclasses.field(default_factory=lambda: Preprocessing(input_size=(224, 224)))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str | None = None) -> TorchExportConfig:
        if isinstance(data, dict):
            data = dict(data)
            pre = data.get("preprocessing")
            if pre is None or isinstance(pre, dict):
                pre = dict(pre or {})
                pre.setdefault("input_size", list(data.get("input_size", (224, 224))))
                data["preprocessing"] = pre
        return super().from_dict(data, where=where or "export")

    def validate(self) -> None:
        if min(self.input_size) <= 0:
            raise ConfigError(f"export.input_size: {list(self.input_size)} must be positive (height, width)")
        if tuple(self.preprocessing.input_size) != tuple(self.input_size):
            raise ConfigError(f"export.preprocessing.input_size {list(self.preprocessing.input_size)} differs from export.input_size "
                              f"{list(self.input_size)}; set only export.input_size")
        if not MIN_OPSET <= self.opset <= MAX_OPSET:
            raise ConfigError(f"export.opset: {self.opset} must be in {MIN_OPSET}..{MAX_OPSET} (the TorchScript exporter's range)")
        if self.batch_size < 1:
            raise ConfigError(f"export.batch_size: {self.batch_size} must be >= 1")
        if self.atol < 0 or self.rtol < 0 or self.random_samples < 0:
            raise ConfigError("export.atol, export.rtol and export.random_samples must be >= 0")
        if self.seed < 0:
            raise ConfigError(f"export.seed: {self.seed} must be >= 0 (numpy's generators take no negative seed)")
        if len(set(self.output_names)) != len(self.output_names) or any(not n for n in self.output_names):
            raise ConfigError(f"export.output_names: {list(self.output_names)} must be distinct, non-empty names")
        if self.preprocessing.input_name in self.output_names:
            raise ConfigError(f"export.output_names: {self.preprocessing.input_name!r} is the input's name; choose another")

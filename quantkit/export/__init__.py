"""``quantkit export``: a PyTorch model to an intake folder, with the export archived and compared.

See :mod:`quantkit.export.exporter` for the folder it writes, :mod:`quantkit.export.source` for the forms of
MODULE, and :mod:`quantkit.export.localize` for the layer-by-layer comparison. torch is an optional
dependency (``pip install 'quantkit[export]'``); importing this package does not import it.
"""

from .config import TorchExportConfig
from .exporter import ExportMismatchError, ExportResult, FrameworkDiff, export_torch
from .localize import Divergence, LayerDiff, Localization, localize
from .source import TorchSource, load_source
from .torch_onnx import failing_submodule

__all__ = ["Divergence", "ExportMismatchError", "ExportResult", "FrameworkDiff", "LayerDiff", "Localization", "TorchExportConfig", "TorchSource",
           "export_torch", "failing_submodule", "load_source", "localize"]

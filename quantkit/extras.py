"""Optional dependencies: the packages of an extra, imported where they are used, with one line naming the extra
when one is missing.

The core install (``pip install quantkit``) holds what the library needs to quantize, bind, report and verify a
user's model. These extras add what only one part uses:

``fleet``  pyarrow, datasketches, dask[distributed] (which brings fsspec): :mod:`quantkit.fleet` and
           ``quantkit fleet``
``demo``   rapidocr-onnxruntime, ddddocr: the demo models (:mod:`quantkit.demo`, ``quantkit demo model``)
``nncf``   nncf: NNCF as a second quantization engine (``quantize.engine: nncf``, :mod:`quantkit.quantize.nncf_engine`)
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

EXTRAS: dict[str, tuple[str, ...]] = {
    "fleet": ("pyarrow", "datasketches", "dask", "distributed", "fsspec"),
    "demo": ("rapidocr_onnxruntime", "ddddocr"),
    "nncf": ("nncf",),
}
"""Extra -> the top-level modules it installs (pyproject.toml ``[project.optional-dependencies]``)."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingExtraError` naming ``what`` needs it and the extra.

    ``module`` may be a submodule (``pyarrow.parquet``); ``what`` is the feature, e.g. ``"quantkit fleet"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = e.name or module
        if missing.split(".")[0] not in EXTRAS.get(extra, ()):
            raise  # a broken install of something else: a bug to see with its traceback
        raise MissingExtraError(f"{what} needs {missing.split('.')[0]}, which the core install leaves out; "
                                f"install the extra: pip install 'quantkit[{extra}]'") from None

"""The embedded demo: real models shipped inside PyPI wheels and synthetic site images.

Models (:data:`PACKAGED_MODELS`): the PP-OCRv4 text detector, text recognizer and direction classifier of
``rapidocr-onnxruntime`` and the YOLOX detector of ``ddddocr`` (416x416, BGR, 0-255, letterbox padded with 114,
output ``[1, 3549, 6]``: a raw grid head, strides 8/16/32).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .._overwrite import FileKind
from ..errors import InputFileError, QuantkitError
from ..extras import require

DET_MODEL = "ch_PP-OCRv4_det_infer.onnx"
CLS_MODEL = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC_MODEL = "ch_PP-OCRv4_rec_infer.onnx"

PACKAGED_MODELS: dict[str, tuple[str, str, str]] = {
    "ppocr_det": ("rapidocr_onnxruntime", f"models/{DET_MODEL}", "rapidocr-onnxruntime==1.4.4"),
    "ppocr_rec": ("rapidocr_onnxruntime", f"models/{REC_MODEL}", "rapidocr-onnxruntime==1.4.4"),
    "ppocr_cls": ("rapidocr_onnxruntime", f"models/{CLS_MODEL}", "rapidocr-onnxruntime==1.4.4"),
    "ddddocr_det": ("ddddocr", "common_det.onnx", "ddddocr==1.6.1"),
}
"""Demo model name -> (package, file inside the package, pip requirement)."""


def packaged_model_path(name: str = "ppocr_det") -> Path:
    """Path of a model file shipped inside an installed package (:data:`PACKAGED_MODELS`; a rapidocr file name
    such as ``ch_PP-OCRv4_det_infer.onnx`` is accepted too).

    Raises:
        InputFileError: unknown name, or the installed package lacks the file.
        MissingExtraError: the package is not installed (the ``demo`` extra).
    """
    if name not in PACKAGED_MODELS:
        by_file = {Path(f).name: k for k, (_, f, _) in PACKAGED_MODELS.items()}
        if name not in by_file:
            raise InputFileError(f"demo model {name!r} is unknown; use one of {', '.join(PACKAGED_MODELS)}")
        name = by_file[name]
    package, rel, req = PACKAGED_MODELS[name]
    mod = require(package, "demo", f"demo model {name!r}")
    p = Path(str(mod.__file__)).parent / rel
    if not p.is_file():
        raise InputFileError(f"{p}: model not shipped by the installed {package}; install {req}")
    return p


@dataclasses.dataclass(frozen=True)
class CopyModelResult:
    """Where :func:`copy_model` wrote the detector, its size in bytes and hex SHA-256."""

    out: str
    bytes: int
    sha256: str

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"CopyModelResult({self.out!r}, {self.bytes} bytes, {self.sha256[:12]})"


def is_packaged_model(path: Path) -> bool:
    """Whether ``path`` holds the bytes of one of :data:`PACKAGED_MODELS` installed here (so ``copy_model`` may
    replace it). Never raises."""
    from .._io import sha256_file

    try:
        size, digest = path.stat().st_size, sha256_file(path)
    except OSError:
        return False
    for name in PACKAGED_MODELS:
        try:
            p = packaged_model_path(name)
            if p.stat().st_size == size and sha256_file(p) == digest:
                return True
        except (QuantkitError, OSError):
            continue
    return False


MODEL_KIND = FileKind("packaged demo model", is_packaged_model)
"""What ``copy_model`` may replace (:func:`quantkit._overwrite.check_output_file`): a copy of a packaged model."""


def copy_model(out: str | Path, name: str = "ppocr_det") -> CopyModelResult:
    """Copy a packaged model (default the PP-OCRv4 detector) to ``out`` atomically.

    Raises:
        InputFileError: the package or model is missing (see :func:`packaged_model_path`), or ``out`` is a folder
            or an existing file that is not one of the packaged models (:data:`MODEL_KIND`).
    """
    from .._io import atomic_write_bytes, sha256_bytes
    from .._overwrite import check_output_file

    dest = Path(out)
    if dest.is_dir():
        raise InputFileError(f"{dest}: is a folder; pass a file path such as models/ppocr_det.onnx")
    source = packaged_model_path(name)
    check_output_file(dest, MODEL_KIND, inputs=[source])
    data = source.read_bytes()
    atomic_write_bytes(dest, data)
    return CopyModelResult(str(dest), len(data), sha256_bytes(data))

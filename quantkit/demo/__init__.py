"""The embedded demo: PP-OCR models shipped by ``rapidocr-onnxruntime`` and synthetic site images."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import InputFileError

DET_MODEL = "ch_PP-OCRv4_det_infer.onnx"
CLS_MODEL = "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def packaged_model_path(name: str = DET_MODEL) -> Path:
    """Path of a model file shipped inside the installed ``rapidocr_onnxruntime`` package.

    Raises:
        InputFileError: the package is not installed or lacks the file.
    """
    try:
        import rapidocr_onnxruntime
    except ImportError:
        raise InputFileError("rapidocr-onnxruntime is not installed; run: pip install 'rapidocr-onnxruntime==1.4.4'") from None
    p = Path(rapidocr_onnxruntime.__file__).parent / "models" / name
    if not p.is_file():
        raise InputFileError(f"{p}: model not shipped by the installed rapidocr-onnxruntime; install version 1.4.4")
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


def copy_model(out: str | Path, name: str = DET_MODEL) -> CopyModelResult:
    """Copy a packaged model (default the PP-OCRv4 detector) to ``out`` atomically.

    Raises:
        InputFileError: the package or model is missing (see :func:`packaged_model_path`), or ``out`` is a folder.
    """
    from .._io import atomic_write_bytes, sha256_bytes

    dest = Path(out)
    if dest.is_dir():
        raise InputFileError(f"{dest}: is a folder; pass a file path such as models/ppocr_det.onnx")
    data = packaged_model_path(name).read_bytes()
    atomic_write_bytes(dest, data)
    return CopyModelResult(str(dest), len(data), sha256_bytes(data))

"""The embedded demo: PP-OCR models shipped by ``rapidocr-onnxruntime`` and synthetic site images."""

from __future__ import annotations

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

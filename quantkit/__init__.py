"""quantkit: versioned calibration, INT8 quantization, bound thresholds and shift reports for ONNX vision models."""

__version__ = "0.1.0"

"""Decisions on a site set: FP32, deployed INT8 and candidate INT8, each at its bound thresholds.

See :func:`quantkit.evaluate.run.evaluate`; the summary is :class:`quantkit.artifacts.EvalSummary`.
"""

from .run import FP32_SUFFIX, EvalResult, evaluate

__all__ = ["FP32_SUFFIX", "EvalResult", "evaluate"]

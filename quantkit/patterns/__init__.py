"""Risky quantized patterns: tiny models of what runtimes get wrong, run against ONNX's reference evaluator.

* :mod:`.models`: the patterns (:data:`PATTERNS`) and their tiny QDQ models;
* :mod:`.suite`: :func:`pattern_matrix` runs each on every installed runtime (``quantkit doctor`` prints it);
* :mod:`.detect`: :func:`patterns_in` finds the patterns in a real quantized model, and
  :func:`failing_patterns` names those a target runtime gets wrong according to a matrix.
"""

from .detect import failing_patterns, patterns_in
from .models import PATTERNS, Pattern, PatternCase, get_pattern
from .suite import TOLERANCE_STEPS, PatternMatrix, PatternResult, RuntimeVariant, pattern_matrix, run_pattern, runtime_variants

__all__ = ["PATTERNS", "Pattern", "PatternCase", "PatternMatrix", "PatternResult", "RuntimeVariant", "TOLERANCE_STEPS",
           "failing_patterns", "get_pattern", "pattern_matrix", "patterns_in", "run_pattern", "runtime_variants"]

"""One exception hierarchy for user errors (habit 6 of STYLE.md).

Every message names the file, tensor or field at fault and says what to do. The CLI maps each class
to an exit code in exactly one place (:func:`quantkit.cli.main.main`); anything that is not a
:class:`QuantkitError` is a bug and keeps its traceback.
"""

from __future__ import annotations


class QuantkitError(Exception):
    """Base class of every error a user can cause and fix. ``exit_code`` is the CLI's exit status."""

    exit_code = 2


class ConfigError(QuantkitError):
    """A config or params field is unknown, missing, mistyped or out of range."""


class InputFileError(QuantkitError):
    """A file or folder given as input is missing, unreadable, corrupt or of the wrong kind."""


class ModelError(InputFileError):
    """An ONNX model fails to load, check or infer shapes, or lacks what a stage needs."""


class OutputBusyError(QuantkitError):
    """Another process is writing the same output (it holds the output's lock); the message names it."""


class CalibrationSetError(InputFileError):
    """A calibration, reference or site set is empty, unreadable or inconsistent with its manifest."""


class UnsupportedOptionError(ConfigError):
    """An option ONNX Runtime would silently ignore, or that conflicts with another option."""


class BindingMismatchError(QuantkitError):
    """A threshold set, record or bundle was derived for a different model or calibration."""

    exit_code = 3


class VerificationError(QuantkitError):
    """A bundle, digest or golden output failed verification."""

    exit_code = 4


class TargetSupportError(QuantkitError):
    """A target runtime cannot run an operator or quantized pattern the model uses."""

    exit_code = 5


class AgreementError(QuantkitError):
    """A quantized model's decisions do not agree with FP32's above the configured floor (bind refuses)."""

    exit_code = 6


class MissingExtraError(QuantkitError):
    """A package of an optional extra (``quantkit[fleet]``, ``quantkit[demo]``, ...) is not installed; the
    message names the package and the ``pip install`` that adds it."""


class ThresholdRangeError(ConfigError):
    """A threshold lies outside the float range its quantized output tensor can represent, so its integer form
    could never fire (or always fires)."""

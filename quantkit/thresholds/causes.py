"""Likely causes of low agreement with FP32, read from a calibration record, most likely first, each with its fix.

``bind`` (refusing below ``thresholds.min_agreement``) and ``evaluate`` (a quantized model below the same floor on a
site set) say the same thing through :func:`likely_causes`. The order is what fixed it, most often first, in the
trials behind issue #30:

1. per-channel weights off (only when the record's config has ``per_channel: false``): per-tensor weight scales put
   every output channel of a Conv on the widest channel's grid; a detector bound at box F1 0.000 per-tensor and
   0.673 per-channel. Fix: ``quantize.per_channel: true``.
2. collapsed outputs (the record's ``calibration.collapsed_outputs``, :mod:`quantkit.quantize.outputs`): channels of a
   graph output that span fewer than 16 steps, e.g. scores sharing a scale with pixel coordinates. Fix: keep the
   producer in float (``quantize.nodes_to_exclude``) or give the tensor 16 bits
   (``quantize.tensor_overrides.<tensor>.quant_type: uint16``).
3. activation type: 8-bit activations. Fix: ``quantize.activation_type: uint16`` (QDQ only; ORT's 16-bit QDQ).
4. calibration set: calibrated on other images than the ones compared on (camera, lighting). Fix: point
   ``models.<name>.sets.deployed.calibration`` at a set like them.

Nothing here reads a task's outputs: the causes are properties of the record (habit 11 of STYLE.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..artifacts.record import CalibrationRecord, SetRef
from ..dtypes import int_type


@dataclasses.dataclass(frozen=True)
class LikelyCause:
    """One cause: ``name`` (``per_channel``, ``collapsed_outputs``, ``activation_type``, ``calibration_set``), what
    the record shows (``evidence``) and the fix, naming the params key to set (``fix``)."""

    name: str
    evidence: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.evidence}: {self.fix}"


def likely_causes(record: CalibrationRecord, compared_on: SetRef | None = None) -> tuple[LikelyCause, ...]:
    """The likely causes of low agreement for the model of ``record``, most likely first (see the module docstring).

    Args:
        record: the quantized model's calibration record.
        compared_on: the reference or site set agreement was measured on; its camera and lighting are compared
            with the calibration set's when both are known.

    Returns:
        A tuple of :class:`LikelyCause`; never empty for a static record (the calibration set is always listed).
    """
    config: dict[str, Any] = record.config or {}
    causes: list[LikelyCause] = []
    if record.mode == "dynamic":
        return (LikelyCause("dynamic", "dynamic quantization (activation ranges per image, Conv weights per tensor)",
                            "quantize statically with the 'quantize' section (per-channel weights, calibrated ranges)"),)
    if config.get("per_channel") is False:
        causes.append(LikelyCause("per_channel", "per-channel weights are off in the record (per_channel: false)",
                                  "set quantize.per_channel: true"))
    collapsed = (record.calibration or {}).get("collapsed_outputs") or []
    if collapsed:
        c = collapsed[0]
        more = f" (and {len(collapsed) - 1} more outputs)" if len(collapsed) > 1 else ""
        causes.append(LikelyCause(
            "collapsed_outputs", f"output {c['tensor']!r}: {len(c['channels'])} of {c['of_channels']} channels span fewer than "
            f"{c['floor']:g} quantization steps{more}",
            f"set quantize.{c['fix']} (the decode tail after the last Conv in float)" if c.get("fix") else
            f"keep its producer in float (quantize.nodes_to_exclude) or set quantize.tensor_overrides.{c['tensor']}.quant_type: uint16"))
    else:
        causes.append(LikelyCause(
            "collapsed_outputs", "no collapsed output flagged by quantize (scores sharing one tensor with coordinates still lose levels)",
            "keep the output's producer in float (quantize.nodes_to_exclude, or 'quantkit fallback')"))
    act = str(config.get("activation_type", "uint8"))
    if int_type(act).bits < 16:
        causes.append(LikelyCause("activation_type", f"{act} activations",
                                  "set quantize.activation_type: uint16 (needs quantize.format: qdq)"))
    cal = record.calibration_set
    count = (record.calibration or {}).get("images")
    seen = f"calibrated on '{record.set_name}'" + (f" ({count} images)" if count else "")
    if cal is not None and compared_on is not None:
        differs = [f"{k} {getattr(cal, k)} vs {getattr(compared_on, k)}" for k in ("camera", "lighting")
                   if getattr(cal, k) and getattr(compared_on, k) and getattr(cal, k) != getattr(compared_on, k)]
        if differs:
            seen += f", compared on '{compared_on.name}' ({', '.join(differs)})"
    causes.append(LikelyCause("calibration_set", seen,
                              "point models.<name>.sets.deployed.calibration at images like the ones compared on"))
    return tuple(causes)


def causes_hint(causes: tuple[LikelyCause, ...]) -> str:
    """The causes as one line: ``likely causes, most likely first: (1) ...: fix; (2) ...``."""
    return "likely causes, most likely first: " + "; ".join(f"({i}) {c}" for i, c in enumerate(causes, 1))

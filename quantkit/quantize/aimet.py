"""AIMET encodings JSON (format version 1.0.0) export and import.

Layout (AIMET ``QuantizationSimModel.export``, schema 1.0.0)::

    {"version": "1.0.0",
     "activation_encodings": [{"name", "dtype": "INT", "enc_type": "PER_TENSOR", "bw", "is_sym", "scale": [..], "offset": [..]}],
     "param_encodings": [{... "enc_type": "PER_CHANNEL" ...}],
     "excluded_layers": [], "quantizer_args": {...}}

Offset sign: AIMET quantizes onto the unsigned grid ``[0, 2**bw - 1]`` with
``q = round(x / scale) - offset``, ONNX with ``q = round(x / scale) + zero_point`` on the type's own grid.
So for unsigned ONNX types ``offset = -zero_point``; for signed types the grid is shifted by
``2**(bw-1)``: ``offset = -(zero_point + 2**(bw-1))`` (symmetric int8 -> ``-128``, as AIMET writes it).
Import maps ``is_sym: true`` to the signed type and ``is_sym: false`` to the unsigned type, which is
how ORT's default (u8 activations, symmetric s8 weights) exports; an asymmetric signed tensor comes
back as the equivalent unsigned grid (same represented values). Biases (int32) are not exported,
as AIMET leaves them to the runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._io import atomic_write_json, read_json
from ..artifacts.record import CalibrationRecord, TensorScale
from ..dtypes import INT_TYPES, QUANT_TYPE_NAMES
from ..errors import InputFileError

VERSION = "1.0.0"
_BITS = {name: INT_TYPES[name].bits for name in QUANT_TYPE_NAMES}


def _offset(t: TensorScale) -> list[int]:
    shift = 2 ** (_BITS[t.dtype] - 1) if t.dtype.startswith("int") else 0
    return [-(z + shift) for z in t.zero_point]


def export_aimet(record: CalibrationRecord, path: str | Path | None = None) -> dict[str, Any]:
    """AIMET 1.0.0 encodings for every activation and weight in ``record`` (sorted by name).

    ``is_sym`` is true for signed types with zero point 0. Writes canonical JSON to ``path`` when given.
    """
    acts: list[dict[str, Any]] = []
    params: list[dict[str, Any]] = []
    for t in record.tensors:
        if t.dtype not in _BITS:
            continue
        enc = {"name": t.name, "dtype": "INT", "enc_type": "PER_CHANNEL" if len(t.scale) > 1 else "PER_TENSOR",
               "bw": _BITS[t.dtype], "is_sym": t.dtype.startswith("int") and all(z == 0 for z in t.zero_point),
               "scale": list(t.scale), "offset": _offset(t)}
        (acts if t.role == "activation" else params).append(enc)
    doc = {"version": VERSION, "activation_encodings": acts, "param_encodings": params, "excluded_layers": [],
           "quantizer_args": {"dtype": "int", "per_channel_quantization": any(len(t.scale) > 1 for t in record.tensors),
                              "producer": "quantkit", "record_fingerprint": record.fingerprint}}
    if path is not None:
        atomic_write_json(path, doc)
    return doc


def import_aimet(source: str | Path | dict[str, Any], *, template: CalibrationRecord | None = None) -> tuple[TensorScale, ...]:
    """Read AIMET 1.0.0 encodings into :class:`TensorScale` rows (sorted by name).

    ``template``: a record whose axis / range / calibrator fields are copied for tensors it also has (AIMET
    stores no channel axis); otherwise per-channel tensors get ``axis=0`` and ranges None.

    Raises:
        InputFileError: not version 1.0.0; neither ``activation_encodings`` nor ``param_encodings`` is a list;
            an entry missing ``name``/``bw``/``scale``/``offset``; a ``dtype`` other than ``INT``, an
            ``enc_type`` other than ``PER_TENSOR``/``PER_CHANNEL``; a scale that is not finite and positive;
            an offset off the ``bw``-bit grid; a name listed twice.
    """
    where = str(source) if not isinstance(source, dict) else "AIMET encodings"
    doc = source if isinstance(source, dict) else read_json(source, "AIMET encodings")
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise InputFileError(f"{where}: AIMET encodings version {doc.get('version') if isinstance(doc, dict) else None!r} is not {VERSION}; export with AIMET 2.x or convert")
    known = {t.name: t for t in template.tensors} if template else {}
    sections = [s for s in ("activation_encodings", "param_encodings") if isinstance(doc.get(s), list)]
    if not sections:
        raise InputFileError(f"{where}: no 'activation_encodings' or 'param_encodings' list; export it with AIMET's 1.0.0 format")
    out = []
    seen: set[str] = set()
    for section, role in (("activation_encodings", "activation"), ("param_encodings", "weight")):
        for i, e in enumerate(doc.get(section) or []):
            if not isinstance(e, dict):
                raise InputFileError(f"{where}: {section}[{i}] is a {type(e).__name__}, not an encoding object; the 1.0.0 format lists objects")
            try:
                name, bw, sym = str(e["name"]), int(e["bw"]), bool(e.get("is_sym", False))
                scale = tuple(float(s) for s in e["scale"])
                offset = [int(round(float(o))) for o in e["offset"]]
            except KeyError as err:
                raise InputFileError(f"{where}: {section}[{i}] has no {err} field; add it") from None
            except (TypeError, ValueError):
                raise InputFileError(f"{where}: {section}[{i}] has a non-numeric bw, scale or offset; fix the entry") from None
            if str(e.get("dtype", "INT")).upper() != "INT":
                raise InputFileError(f"{where}: {section}[{i}] ({name}) dtype {e.get('dtype')!r}: only integer (INT) encodings map to ONNX QDQ")
            if str(e.get("enc_type", "PER_TENSOR")).upper() not in ("PER_TENSOR", "PER_CHANNEL"):
                raise InputFileError(f"{where}: {section}[{i}] ({name}) enc_type {e.get('enc_type')!r}: only PER_TENSOR and PER_CHANNEL are supported")
            if name in seen:
                raise InputFileError(f"{where}: {section}[{i}]: tensor {name!r} is listed twice; keep one encoding per tensor")
            seen.add(name)
            if not all(s > 0 and s < float("inf") for s in scale):
                raise InputFileError(f"{where}: {section}[{i}] ({name}) has a scale that is not finite and positive; fix the entry")
            if len(scale) != len(offset) or not scale:
                raise InputFileError(f"{where}: {section}[{i}] ({name}) has {len(scale)} scales and {len(offset)} offsets; they must match")
            dtype = ("int" if sym else "uint") + str(bw)
            if dtype not in _BITS:
                raise InputFileError(f"{where}: {section}[{i}] ({name}) bw {bw} is not 4, 8 or 16")
            shift = 2 ** (bw - 1) if sym else 0
            zp = tuple(-o - shift for o in offset)
            lo, hi = (-(2 ** (bw - 1)), 2 ** (bw - 1) - 1) if sym else (0, 2**bw - 1)
            if any(z < lo or z > hi for z in zp):
                raise InputFileError(f"{where}: {section}[{i}] ({name}) offset {offset[0]} is off the {bw}-bit grid (zero point must lie in [{lo}, {hi}])")
            tpl = known.get(name)
            out.append(TensorScale(name=name, role=tpl.role if tpl else role, dtype=dtype,
                                   axis=tpl.axis if tpl else (0 if len(scale) > 1 else None), scale=scale, zero_point=zp,
                                   range_min=tpl.range_min if tpl else None, range_max=tpl.range_max if tpl else None,
                                   calibrator=tpl.calibrator if tpl else "aimet"))
    return tuple(sorted(out, key=lambda t: t.name))

"""Loading ONNX files with one-line errors (``OnnxFromPath`` in Polygraphy's naming).

Every way a file can fail to be a usable ONNX model (missing, empty, not a protobuf, a truncated
protobuf, a protobuf with no graph, external data that is not next to it) becomes one
:class:`~quantkit.errors.ModelError` naming the file and the fix.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Union

from .errors import ModelError

log = logging.getLogger(__name__)

ModelSource = Union[str, "os.PathLike[str]", Any]  # a path or an onnx.ModelProto


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def load_model(path: str | os.PathLike[str], *, load_external_data: bool = True) -> Any:
    """Read ``path`` into an ``onnx.ModelProto``.

    Args:
        path: an ``.onnx`` file; external data files are looked up relative to its folder.
        load_external_data: read tensors stored in external files into the proto (default); when
            False only the graph is read (cheap inspection of huge models).

    Raises:
        ModelError: missing file, a folder, an empty file, not an ONNX protobuf (e.g. an image or
            a text file), a truncated protobuf, no graph, or missing external data.
    """
    import google.protobuf.message
    import onnx

    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: model file not found; check the path (or run 'quantkit demo model')")
    if p.is_dir():
        raise ModelError(f"{p}: is a folder, not an .onnx file; pass the model file inside it")
    if p.stat().st_size == 0:
        raise ModelError(f"{p}: file is empty; re-export or re-download the model")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except (google.protobuf.message.DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as e:
        raise ModelError(f"{p}: not a readable ONNX protobuf ({_first_line(e)}); the file is corrupt, truncated or not ONNX, re-export it") from None
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.output) == 0):
        raise ModelError(f"{p}: parses but holds no ONNX graph (not an ONNX model, or truncated); re-export it")
    if len(model.opset_import) == 0:
        raise ModelError(f"{p}: declares no opset_import (not an ONNX model, or truncated); re-export it")
    missing = sorted({loc for loc in external_data_locations(model) if not (p.parent / loc).is_file()})
    if missing:
        raise ModelError(f"{p}: external data file {missing[0]!r} not found next to the model; copy it into {p.parent} or re-export with the weights inside")
    if load_external_data and external_data_locations(model):
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(p.parent))
        except (OSError, ValueError) as e:
            raise ModelError(f"{p}: cannot read external data ({_first_line(e)}); re-export the model") from None
    return model


def external_data_locations(model: Any) -> list[str]:
    """Relative paths of external data files referenced by the model's initializers (with repeats removed)."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    locs: dict[str, None] = {}
    for t in _all_initializers(model):
        if uses_external_data(t):
            locs[ExternalDataInfo(t).location] = None
    return list(locs)


def _all_initializers(model: Any) -> list[Any]:
    out = list(model.graph.initializer)
    for node in model.graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                out.append(a.t)
    return out


def as_model(source: ModelSource, *, load_external_data: bool = True) -> tuple[Any, str]:
    """Return ``(ModelProto, display name)`` for a path or an already-loaded proto."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "model"
    return load_model(source, load_external_data=load_external_data), str(source)


def opset_of(model: Any, domain: str = "") -> int:
    """The opset version the model imports for ``domain`` ('' = ai.onnx); 0 when not imported."""
    for o in model.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return int(o.version)
    return 0

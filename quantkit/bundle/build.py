"""Build a deployment bundle: one content-addressed, deterministic tar that a target can verify.

Members (all listed with SHA-256 and size in ``manifest.json``)::

    manifest.json                      what is inside, versions, tolerances (written first)
    model_int8.onnx                    the quantized model, byte for byte
    record.json                        the calibration record (scales, set id, options, tool versions)
    thresholds.json                    the threshold set bound to that record
    export_note.json                   preprocessing contract + provenance of the FP32 model
    golden/NNNN/image.<ext>            raw bytes of golden image NNNN (first K of the set's manifest)
    golden/NNNN/input.npy              preprocessed input, float32, the model's input shape
    golden/NNNN/fp32/KKK.npy           FP32 output KKK (manifest ``model.outputs`` order)
    golden/NNNN/int8/KKK.npy           INT8 output KKK on the build machine's runtime
    golden/NNNN/act/JJJJ.npy           FP32 activation JJJJ (manifest ``activations``), subsampled

Arrays are written with :func:`numpy.save` and read back with ``allow_pickle=False`` only.
Activations are the record's activation tensors, each flattened and sampled at
``activation_max_elements`` evenly spaced indices (:func:`subsample_indices`); the manifest keeps,
per golden image and tensor, the build machine's INT8-vs-FP32 max abs error on those elements (the INT8 side read at the
tensor's DequantizeLinear output, :func:`dequantized_names`), which
verification uses as the baseline for layer-wise divergence (see :mod:`quantkit.bundle.verify`).

Output tolerance: ``tolerance_steps`` quantization steps of the output's scale (from the record, or
from the model's DequantizeLinear that produces the output), else ``fallback_atol``.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._io import (
    OUTPUT_MARKER,
    atomic_output_dir,
    atomic_write_json,
    fingerprint,
    read_json,
    sha256_bytes,
    sha256_file,
)
from ..config import Config
from ..errors import (
    BindingMismatchError,
    CalibrationSetError,
    ConfigError,
    InputFileError,
    ModelError,
)
from ..imageio import load_image
from ..note import ExportNote
from ..progress import progress
from ..runner import OrtRunner, with_outputs
from ..versions import tool_versions
from .archive import BUNDLE_FORMAT, MANIFEST_NAME, write_tar

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
BUNDLE_NAME = re.compile(r"^quantkit-bundle-([0-9a-f]{16})\.tar(\.gz)?$")
POINTER_NAME = "bundle.json"
_ACT_CHUNK = 64  # activation tensors marked as outputs per ORT session (bounds memory per run)
_WEIGHT_ROLES = frozenset({"weight", "bias", "weights", "initializer"})


@dataclasses.dataclass(frozen=True)
class BundleConfig(Config):
    """Options of ``quantkit bundle`` (params.yaml section ``bundle``).

    golden_count: first K images of the golden set, in manifest order.
    providers: ORT execution providers used to compute the golden outputs.
    tolerance_steps: allowed max abs difference per output / activation, in quantization steps.
    fallback_atol: allowed max abs difference for an output without a known scale (output units).
    activation_max_elements: elements kept per activation tensor and image (0 = no activations).
    compress: gzip the tar (``.tar.gz``, gzip mtime 0) instead of a plain ``.tar``.
    """

    golden_count: int = 4
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    tolerance_steps: float = 1.0
    fallback_atol: float = 1e-4
    activation_max_elements: int = 2048
    compress: bool = False

    def validate(self) -> None:
        if self.golden_count < 1:
            raise ConfigError(f"bundle.golden_count: {self.golden_count} must be at least 1")
        if not self.providers:
            raise ConfigError("bundle.providers: name at least one execution provider, e.g. CPUExecutionProvider")
        if not self.tolerance_steps > 0:
            raise ConfigError(f"bundle.tolerance_steps: {self.tolerance_steps} must be positive")
        if not self.fallback_atol >= 0:
            raise ConfigError(f"bundle.fallback_atol: {self.fallback_atol} must be >= 0")
        if self.activation_max_elements < 0:
            raise ConfigError(f"bundle.activation_max_elements: {self.activation_max_elements} must be >= 0")


@dataclasses.dataclass(frozen=True)
class BundleResult:
    """What :func:`build_bundle` wrote. ``size`` in bytes; digests are hex SHA-256."""

    path: Path
    sha256: str
    size: int
    members: int
    golden: int
    activations: int
    adapter: str | None
    record_fingerprint: str
    threshold_fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "path": str(self.path)}

    def __repr__(self) -> str:
        return f"BundleResult({self.path.name}, {self.size} bytes, {self.members} members, {self.golden} golden)"


# -- shared with verify ----------------------------------------------------------------------------

def subsample_indices(n: int, m: int) -> np.ndarray:
    """``min(n, m)`` evenly spaced flat indices into ``n`` elements, ``int64``, sorted, unique."""
    if n <= 0 or m <= 0:
        return np.zeros(0, np.int64)
    return np.unique(np.linspace(0, n - 1, num=min(n, m)).round().astype(np.int64))


def threshold_fingerprint(ts: Mapping[str, Any]) -> str:
    """The threshold set's own ``fingerprint``, or one computed over its JSON without that field."""
    fp = ts.get("fingerprint")
    return fp if isinstance(fp, str) and fp else fingerprint({k: v for k, v in ts.items() if k != "fingerprint"})


def binding_problem(record: Mapping[str, Any], ts: Mapping[str, Any]) -> str | None:
    """Why threshold set ``ts`` is not bound to calibration record ``record``, or ``None``.

    Compares ``binding.record_fingerprint`` with ``record.fingerprint``, ``binding.calibration_set_id``
    with ``record.calibration_set.set_id`` and ``binding.model_digest`` with the record's
    ``model_digest`` or ``quantized_model_digest`` (the contract in docs/ARCHITECTURE.md).
    """
    b = ts.get("binding")
    if not isinstance(b, dict):
        return "has no 'binding' section"
    rec_fp = record.get("fingerprint")
    if b.get("record_fingerprint") != rec_fp:
        return f"binding.record_fingerprint {str(b.get('record_fingerprint'))[:12]} != record fingerprint {str(rec_fp)[:12]}"
    set_id = (record.get("calibration_set") or {}).get("set_id")
    if b.get("calibration_set_id") != set_id:
        return f"binding.calibration_set_id {str(b.get('calibration_set_id'))[:12]} != record calibration set {str(set_id)[:12]}"
    digests = {record.get("model_digest"), record.get("quantized_model_digest")} - {None}
    if b.get("model_digest") not in digests:
        return f"binding.model_digest {str(b.get('model_digest'))[:12]} matches neither model digest of the record"
    return None


def adapter_name(ts: Mapping[str, Any]) -> str | None:
    """The task adapter's registry name in a threshold set JSON (``adapter`` as a string or ``{name}``)."""
    a = ts.get("adapter")
    if isinstance(a, dict):
        a = a.get("name")
    return a if isinstance(a, str) and a else None


def make_task_adapter(ts: Mapping[str, Any], values_key: str = "values") -> Any | None:
    """Build the threshold set's task adapter at ``ts[values_key]``, or ``None`` when unavailable.

    Uses :func:`quantkit.thresholds.adapters.make_adapter`; returns ``None`` (tensor-level comparison
    only) when that module is not installed or the set names no adapter.

    Raises:
        ConfigError: the adapter is unknown or a value is not one of its thresholds.
    """
    name = adapter_name(ts)
    if name is None:
        return None
    try:
        from ..tasks import make_adapter
    except ImportError as e:
        if (e.name or "").startswith("quantkit.thresholds"):
            log.warning("quantkit.thresholds.adapters is unavailable; decision-level comparison is skipped")
            return None
        raise
    options, values = ts.get("options"), ts.get(values_key)
    merged: dict[str, Any] = {**(options if isinstance(options, dict) else {}), **(values if isinstance(values, dict) else {})}
    return make_adapter(name, merged)  # as ThresholdSet.make_adapter does


def owner_checks(record_path: Path, thresholds_path: Path, model_path: Path) -> list[str]:
    """Load record and thresholds with their own packages' loaders, when installed.

    ``CalibrationRecord.load`` and ``ThresholdSet.load`` recompute fingerprints (hand edits are
    caught); ``ThresholdSet.check_binding`` compares the binding with the record and the model file.
    Returns the names of the loaders that ran (empty when neither package is installed).

    Raises:
        InputFileError: a fingerprint does not match its content.
        BindingMismatchError: the thresholds were derived for another calibration or model.
    """
    used = []
    record_cls = _optional("quantkit.artifacts.record", "CalibrationRecord")
    if record_cls is not None:
        record_cls.load(record_path)
        used.append("CalibrationRecord.load")
    ts_cls = _optional("quantkit.artifacts.thresholds", "ThresholdSet")
    if ts_cls is not None:
        ts_cls.load(thresholds_path).check_binding(record_path, model_path=model_path, source=str(thresholds_path))
        used.append("ThresholdSet.check_binding")
    return used


def _optional(module: str, attr: str) -> Any | None:
    import importlib

    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as e:
        if (e.name or "").startswith(module.rsplit(".", 1)[0]):
            log.info("%s unavailable; using the bundle's own JSON checks only", module)
            return None
        raise
    except AttributeError:
        log.info("%s.%s unavailable; using the bundle's own JSON checks only", module, attr)
        return None


def decision_json(decision: Any) -> Any:
    """A decision as plain JSON: ``to_dict()`` when offered, else dataclass fields; arrays as lists."""
    if hasattr(decision, "to_dict"):
        decision = decision.to_dict()
    elif dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        decision = dataclasses.asdict(decision)
    return _plain(decision)


def _plain(v: Any) -> Any:
    if isinstance(v, dict):  # a map-head mask is per-pixel data, not a decision summary: left out
        return {str(k): _plain(x) for k, x in v.items() if not (k == "mask" and isinstance(x, np.ndarray))}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return _plain(v.tolist())
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if np.isfinite(f) else None
    return v


def npy_bytes(arr: np.ndarray) -> bytes:
    """``numpy.save`` bytes of ``arr`` (no pickle; deterministic header)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def model_opsets(model: Any) -> dict[str, int]:
    """``{domain: version}`` of the opset imports an ``onnx.ModelProto``'s nodes use (``""`` written ``ai.onnx``).

    Imports no node uses (ORT's optimizer leaves several, e.g. ``ai.onnx.preview``) do not constrain the
    runtime and are left out; the default domain is always kept.
    """
    used = {n.domain or "" for n in model.graph.node} | {""}
    return {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import if (o.domain or "") in used}


def model_ops(model: Any) -> list[str]:
    """Sorted ``domain:op_type`` of every node of the main graph (``ai.onnx`` for the default domain)."""
    return sorted({f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in model.graph.node})


# -- inputs ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Inputs:
    int8_path: Path
    record_path: Path
    thresholds_path: Path
    fp32_path: Path
    note_path: Path
    record: dict[str, Any]
    thresholds: dict[str, Any]
    note: ExportNote
    golden_dir: Path
    golden_manifest: dict[str, Any]
    golden_entries: list[dict[str, Any]]


def _need(path: Path, what: str, fix: str) -> Path:
    if not path.is_file():
        raise InputFileError(f"{path}: {what} not found; {fix}")
    return path


def _load_inputs(quantized: Path, thresholds: Path, fp32: Path, golden: Path, count: int) -> _Inputs:
    int8_path = _need(quantized / "model_int8.onnx", "quantized model", "run 'quantkit quantize' for this role")
    record_path = _need(quantized / "record.json", "calibration record", "run 'quantkit quantize' for this role")
    fp32_path = _need(fp32 / "model.onnx", "FP32 intake model", "run 'quantkit intake' first")
    note_path = _need(fp32 / "export_note.json", "export note", "run 'quantkit intake' first")
    record = read_json(record_path, "calibration record")
    ts = read_json(_need(thresholds, "threshold set", "run 'quantkit bind' first"), "threshold set")
    if not isinstance(record, dict) or not isinstance(record.get("fingerprint"), str) or not isinstance(record.get("tensors"), list):
        raise InputFileError(f"{record_path}: not a calibration record (needs 'fingerprint' and 'tensors'); re-run 'quantkit quantize'")
    if not isinstance(ts, dict) or not isinstance(ts.get("binding"), dict):
        raise InputFileError(f"{thresholds}: not a threshold set (needs 'binding'); re-run 'quantkit bind'")
    problem = binding_problem(record, ts)
    if problem:
        raise BindingMismatchError(f"{thresholds}: not bound to {record_path} ({problem}); bind thresholds to this calibration with 'quantkit bind'")
    qdigest = record.get("quantized_model_digest")
    if qdigest and qdigest != sha256_file(int8_path):
        raise BindingMismatchError(f"{int8_path}: digest does not match quantized_model_digest in {record_path}; re-run 'quantkit quantize'")
    owner_checks(record_path, thresholds, int8_path)
    note = ExportNote.load(note_path)
    gm_path = golden / "manifest.json"
    gm = read_json(_need(gm_path, "set manifest", "pass a calibration/site set folder (images/ + manifest.json) to --golden"), "set manifest")
    images = gm.get("images") if isinstance(gm, dict) else None
    if not isinstance(images, list) or not images:
        raise CalibrationSetError(f"{gm_path}: the set lists no images; pass a set with at least one image to --golden")
    if len(images) < count:
        log.warning("%s lists %d images, fewer than golden_count=%d; using all", gm_path, len(images), count)
    return _Inputs(int8_path, record_path, thresholds, fp32_path, note_path, record, ts, note, golden, gm, images[:count])


def _load_model(path: Path) -> Any:
    from ..modelio import load_model

    return load_model(path)


def _record_scale(record: Mapping[str, Any], name: str) -> float | None:
    for t in record.get("tensors", []):
        if isinstance(t, dict) and t.get("name") == name and t.get("scale"):
            s = t["scale"]
            vals = [float(v) for v in (s if isinstance(s, list) else [s])]
            return max(abs(v) for v in vals)
    return None


def _dq_scale(model: Any, output: str) -> float | None:
    """Scale of the DequantizeLinear node that produces ``output`` (constant initializer), if any."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and output in n.output and len(n.input) > 1 and n.input[1] in inits:
            return float(np.max(np.abs(numpy_helper.to_array(inits[n.input[1]]))))
    return None


def dequantized_names(model: Any) -> dict[str, str]:
    """``{tensor: name of its QuantizeLinear -> DequantizeLinear output}`` in a QDQ ``onnx.ModelProto``.

    ORT's QDQ quantizer keeps the float tensor ``T`` and inserts ``T -> QuantizeLinear ->
    DequantizeLinear -> T_DequantizeLinear_Output`` for its consumers; the DQ output is the value the
    INT8 model actually carries (clipped and rounded), so layer-wise comparison reads that.
    """
    q_of = {n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input and n.output}
    dq_in = {n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input and n.output}
    return {t: dq_in[q] for t, q in q_of.items() if q in dq_in}


def _activation_specs(fp32_model: Any, int8_model: Any, record: Mapping[str, Any], cfg: BundleConfig) -> list[dict[str, Any]]:
    """Record activation tensors present in both graphs, in the FP32 graph's topological order."""
    if cfg.activation_max_elements == 0:
        return []
    topo: dict[str, int] = {}
    for i, node in enumerate(fp32_model.graph.node):
        for o in node.output:
            topo.setdefault(o, i)
    in_int8 = {o for n in int8_model.graph.node for o in n.output}
    dq_of = dequantized_names(int8_model)
    specs = []
    for t in record.get("tensors", []):
        name = t.get("name") if isinstance(t, dict) else None
        if not name or str(t.get("role", "")).lower() in _WEIGHT_ROLES or name not in topo or name not in in_int8:
            continue
        scale = _record_scale(record, name)
        atol = cfg.tolerance_steps * scale if scale else cfg.fallback_atol
        specs.append({"name": name, "int8_tensor": dq_of.get(name, name), "topo_index": topo[name], "scale": scale, "atol": atol})
    specs.sort(key=lambda s: (s["topo_index"], s["name"]))
    return [s for i, s in enumerate(specs) if i == 0 or s["name"] != specs[i - 1]["name"]]


# -- build -----------------------------------------------------------------------------------------

def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputFileError(f"{out}: exists and is not a folder; pass a folder to --out")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if not (BUNDLE_NAME.match(p.name) or p.name in (POINTER_NAME, OUTPUT_MARKER)))
        if foreign:
            raise InputFileError(f"{out}: holds files quantkit bundle did not write ({foreign[0]!r}); pass an empty or new --out folder")


def build_bundle(
    quantized: str | Path,
    thresholds: str | Path,
    fp32: str | Path,
    golden: str | Path,
    out: str | Path,
    config: BundleConfig | None = None,
) -> BundleResult:
    """Bundle a quantized model with its record, thresholds, export note and golden data into ``out``.

    Args:
        quantized: folder with ``model_int8.onnx`` and ``record.json`` (``work/quantize/<role>``).
        thresholds: threshold set JSON bound to that record (``work/thresholds/<role>.json``).
        fp32: intake folder with ``model.onnx`` and ``export_note.json`` (``work/intake``).
        golden: a set folder (``images/`` + ``manifest.json``); its first ``golden_count`` images are used.
        out: folder that receives ``quantkit-bundle-<sha256[:16]>.tar`` and ``bundle.json``; replaced
            whole and atomically (it may hold only an earlier bundle).

    Returns:
        :class:`BundleResult`. Same inputs and versions give the same archive bytes.

    Raises:
        InputFileError / ModelError / CalibrationSetError: an input is missing, corrupt or empty.
        BindingMismatchError: the thresholds are not bound to the record, or the model is not the
            record's quantized model.
        ConfigError: bad config or adapter options.
    """
    cfg = config or BundleConfig()
    out = Path(out)
    _check_out_dir(out)
    inp = _load_inputs(Path(quantized), Path(thresholds), Path(fp32), Path(golden), cfg.golden_count)
    fp32_model = _load_model(inp.fp32_path)
    int8_model = _load_model(inp.int8_path)
    fp32_digest = sha256_file(inp.fp32_path)
    if inp.record.get("model_digest") not in (None, fp32_digest):
        log.warning("%s: digest differs from model_digest in %s; golden FP32 outputs come from this file", inp.fp32_path, inp.record_path)

    adapter = make_task_adapter(inp.thresholds, "values")
    adapter_fp32 = make_task_adapter(inp.thresholds, "fp32_values") if adapter is not None and inp.thresholds.get("fp32_values") else adapter
    acts = _activation_specs(fp32_model, int8_model, inp.record, cfg)

    with tempfile.TemporaryDirectory(prefix="quantkit-bundle-") as stage_dir:
        stage = Path(stage_dir)
        files: dict[str, Path] = {}

        def put(name: str, data: bytes) -> None:
            p = stage / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            files[name] = p

        put("model_int8.onnx", inp.int8_path.read_bytes())
        put("record.json", inp.record_path.read_bytes())
        put("thresholds.json", inp.thresholds_path.read_bytes())
        put("export_note.json", inp.note_path.read_bytes())

        pre = inp.note.preprocessing
        samples, inputs = [], []
        for i, entry in enumerate(inp.golden_entries):
            sid = f"{i:04d}"
            rel = entry.get("file") if isinstance(entry, dict) else None
            if not isinstance(rel, str):
                raise CalibrationSetError(f"{inp.golden_dir / 'manifest.json'}: images[{i}] has no 'file'; regenerate the set manifest")
            src = inp.golden_dir / rel
            raw = _need(src, "golden image", f"restore it or regenerate {inp.golden_dir}")
            data = raw.read_bytes()
            if entry.get("sha256") and entry["sha256"] != sha256_bytes(data):
                raise CalibrationSetError(f"{src}: content differs from its sha256 in the set manifest; restore the set (dvc checkout)")
            x, _ = pre.apply(load_image(src))
            suffix = src.suffix.lower() if re.fullmatch(r"\.[a-z0-9]{1,5}", src.suffix.lower()) else ".img"
            put(f"golden/{sid}/image{suffix}", data)
            put(f"golden/{sid}/input.npy", npy_bytes(x))
            inputs.append(x)
            samples.append({"id": sid, "source": rel, "source_sha256": sha256_bytes(data), "raw": f"golden/{sid}/image{suffix}",
                            "input": f"golden/{sid}/input.npy"})

        outputs_meta = _golden_outputs(inp, fp32_model, int8_model, inputs, samples, put, cfg, adapter, adapter_fp32)
        if acts:
            _golden_activations(inp, acts, inputs, samples, put, cfg)

        thr_fp = threshold_fingerprint(inp.thresholds)
        manifest: dict[str, Any] = {
            "format": BUNDLE_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "members": {n: {"sha256": sha256_file(p), "size": p.stat().st_size} for n, p in sorted(files.items())},
            "model": {
                "file": "model_int8.onnx",
                "sha256": sha256_file(inp.int8_path),
                "opset": model_opsets(int8_model),
                "ops": model_ops(int8_model),
                "input": {"name": pre.input_name, "shape": list(inputs[0].shape), "dtype": "float32"},
                "outputs": outputs_meta,
            },
            "fp32_model_sha256": fp32_digest,
            "record": {"file": "record.json", "fingerprint": inp.record["fingerprint"],
                       "calibration_set": inp.record.get("calibration_set")},
            "thresholds": {"file": "thresholds.json", "fingerprint": thr_fp,
                           "values": inp.thresholds.get("values")},
            "export_note": "export_note.json",
            "adapter": {"name": adapter_name(inp.thresholds), "used": adapter is not None},
            "runtime": _runtime_versions(cfg.providers),
            "tolerance": {"steps": cfg.tolerance_steps, "fallback_atol": cfg.fallback_atol,
                          "activation_max_elements": cfg.activation_max_elements},
            "activations": [{**a, "shape": a.get("shape")} for a in acts],
            "golden": {"set": {"path": inp.golden_dir.as_posix() if not inp.golden_dir.is_absolute() else inp.golden_dir.name, "set_id": inp.golden_manifest.get("set_id"),
                               "name": inp.golden_manifest.get("name")}, "samples": samples},
        }
        put(MANIFEST_NAME, _json_bytes(manifest))

        with atomic_output_dir(out) as tmp:
            partial = tmp / ".bundle.partial"
            digest = write_tar(partial, files, compress=cfg.compress)
            name = f"quantkit-bundle-{digest[:16]}.tar" + (".gz" if cfg.compress else "")
            final = tmp / name
            partial.rename(final)
            size = final.stat().st_size
            atomic_write_json(tmp / POINTER_NAME, {
                "schema_version": SCHEMA_VERSION, "bundle": name, "sha256": digest, "size": size,
                "record_fingerprint": inp.record["fingerprint"], "threshold_fingerprint": thr_fp,
                "calibration_set_id": (inp.record.get("calibration_set") or {}).get("set_id"),
                "golden_set_id": inp.golden_manifest.get("set_id"), "adapter": adapter_name(inp.thresholds),
            })
    log.info("wrote %s (%d bytes, %d members)", out / name, size, len(files))
    return BundleResult(out / name, digest, size, len(files), len(samples), len(acts), adapter_name(inp.thresholds) if adapter else None,
                        inp.record["fingerprint"], thr_fp)


def _json_bytes(obj: Any) -> bytes:
    from .._io import canonical_json

    return canonical_json(obj).encode("utf-8")


def _runtime_versions(providers: Sequence[str]) -> dict[str, Any]:
    return {**tool_versions(python=True), "providers": list(providers), "graph_optimization_level": "all"}


def _golden_outputs(inp: _Inputs, fp32_model: Any, int8_model: Any, inputs: list[np.ndarray], samples: list[dict[str, Any]],
                    put: Any, cfg: BundleConfig, adapter: Any, adapter_fp32: Any) -> list[dict[str, Any]]:
    name = inp.note.preprocessing.input_name
    fp32_runner = OrtRunner(inp.fp32_path, providers=cfg.providers, name=str(inp.fp32_path))
    int8_runner = OrtRunner(inp.int8_path, providers=cfg.providers, name=str(inp.int8_path))
    with fp32_runner, int8_runner:
        if name not in int8_runner.input_names or name not in fp32_runner.input_names:
            raise ModelError(f"{inp.int8_path}: has no input {name!r} named by {inp.note_path}; re-run intake and quantize")
        out_names = int8_runner.output_names
        missing = [o for o in out_names if o not in fp32_runner.output_names]
        if missing:
            raise ModelError(f"{inp.int8_path}: output {missing[0]!r} is not an output of {inp.fp32_path}; quantize this intake model")
        for x, s in progress(zip(inputs, samples), total=len(samples), desc="golden outputs"):
            feed = {name: x}
            f = fp32_runner.infer(feed, out_names)
            q = int8_runner.infer(feed, out_names)
            s["fp32"] = [f"golden/{s['id']}/fp32/{k:03d}.npy" for k in range(len(out_names))]
            s["int8"] = [f"golden/{s['id']}/int8/{k:03d}.npy" for k in range(len(out_names))]
            for k, o in enumerate(out_names):
                put(s["fp32"][k], npy_bytes(f[o]))
                put(s["int8"][k], npy_bytes(q[o]))
            s["decision_int8"] = decision_json(adapter.decide(q)) if adapter is not None else None
            s["decision_fp32"] = decision_json(adapter_fp32.decide(f)) if adapter_fp32 is not None else None
    meta = []
    for k, o in enumerate(out_names):
        scale, source = _record_scale(inp.record, o), "record.json scale"
        if scale is None:
            scale, source = _dq_scale(int8_model, o), "DequantizeLinear scale in model_int8.onnx"
        atol = cfg.tolerance_steps * scale if scale else cfg.fallback_atol
        meta.append({"name": o, "index": k, "scale": scale, "atol": atol,
                     "tolerance_source": f"{cfg.tolerance_steps:g} step(s) of the {source}" if scale else "bundle.fallback_atol"})
    return meta


def _golden_activations(inp: _Inputs, acts: list[dict[str, Any]], inputs: list[np.ndarray], samples: list[dict[str, Any]],
                        put: Any, cfg: BundleConfig) -> None:
    """FP32 activations (subsampled) and the build runtime's INT8-vs-FP32 baseline error per tensor."""
    import onnx

    name = inp.note.preprocessing.input_name
    fp32_model = onnx.load(str(inp.fp32_path))
    int8_model = onnx.load(str(inp.int8_path))
    for s in samples:
        s["activations"] = [None] * len(acts)
        s["activation_baseline"] = [None] * len(acts)
    chunks = [list(range(i, min(i + _ACT_CHUNK, len(acts)))) for i in range(0, len(acts), _ACT_CHUNK)]
    for chunk in progress(chunks, total=len(chunks), desc="golden activations", unit="chunk"):
        names = [acts[j]["name"] for j in chunk]
        qnames = [acts[j]["int8_tensor"] for j in chunk]
        f_run = OrtRunner(with_outputs(fp32_model, names).SerializeToString(), providers=cfg.providers, name=f"{inp.fp32_path} (layer-wise)")
        q_run = OrtRunner(with_outputs(int8_model, qnames).SerializeToString(), providers=cfg.providers, name=f"{inp.int8_path} (layer-wise)")
        with f_run, q_run:
            for x, s in zip(inputs, samples):
                f = f_run.infer({name: x}, names)
                q = q_run.infer({name: x}, qnames)
                for j, n, qn in zip(chunk, names, qnames):
                    fa = np.asarray(f[n], dtype=np.float32)
                    idx = subsample_indices(fa.size, cfg.activation_max_elements)
                    fs = fa.reshape(-1)[idx]
                    qs = np.asarray(q[qn], dtype=np.float32).reshape(-1)[idx] if np.asarray(q[qn]).size == fa.size else None
                    acts[j]["shape"] = list(fa.shape)
                    member = f"golden/{s['id']}/act/{j:04d}.npy"
                    put(member, npy_bytes(fs))
                    s["activations"][j] = member
                    if qs is not None and fs.size:
                        err = float(np.max(np.abs(qs.astype(np.float64) - fs.astype(np.float64))))
                        s["activation_baseline"][j] = err if np.isfinite(err) else None

"""Build a deployment bundle: one content-addressed, deterministic tar that a target can verify.

Members (all listed with SHA-256 and size in ``manifest.json``, format in :mod:`quantkit.bundle.manifest`)::

    manifest.json                      what is inside, versions, tolerances, the building machine's pattern matrix
    model_int8.onnx                    the quantized model, byte for byte
    record.json                        the calibration record (scales, set id, options, tool versions)
    thresholds.json                    the threshold set bound to that record
    export_note.json                   preprocessing contract + provenance of the FP32 model
    golden/NNNN/image.<ext>            raw bytes of golden image NNNN (first K of the set's manifest)
    golden/NNNN/input.npy              preprocessed input, float32, the model's input shape
    golden/NNNN/fp32/KKK.npy           FP32 output KKK (manifest ``model.outputs`` order)
    golden/NNNN/int8/KKK.npy           INT8 output KKK of the QDQ simulation
    golden/NNNN/act/JJJJ.npy           INT8 activation JJJJ (manifest ``activations``) of the simulation, sampled

Arrays are written with :func:`numpy.save` and read back with ``allow_pickle=False`` only. The record and the
threshold set are read with their own typed loaders and the set's binding to the record and to the model file is
checked (:meth:`ThresholdSet.check_binding`) before anything is computed.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, ClassVar

from .._io import OUTPUT_MARKER, atomic_output_dir, atomic_write_json, canonical_json, read_json, sha256_file
from .._overwrite import check_not_input, check_output_dir
from ..config import Config
from ..errors import CalibrationSetError, ConfigError, InputFileError
from ..note import ExportNote
from ..versions import tool_versions
from .archive import MANIFEST_NAME, write_tar
from .golden import activation_specs, golden_inputs, golden_runs, output_specs, to_samples
from .manifest import BUNDLE_NAME, POINTER_NAME, SCHEMA_VERSION, BundleManifest, Tolerance
from .typed import CalibrationRecord, ThresholdSet
from .._io import scratch_dir

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BundleConfig(Config):
    """Options of ``quantkit bundle`` (params.yaml section ``bundle``).

    golden_count: first K images of the golden set, in manifest order.
    providers: ORT execution providers that compute the golden values (QDQ simulation).
    tolerance_steps: allowed difference per element, in quantization steps of the tensor.
    max_mismatch: share of an output's (or activation's) elements allowed beyond ``tolerance_steps``. Fused integer
        kernels requantize layer by layer and a deep model's outputs move by a step or more at a few elements: on the
        demo detector 0.08-0.23% of output pixels (ORT level all) and 0.08-0.30% (OpenVINO) on 4 images, so 1%.
    fallback_atol: allowed max abs difference for an output without a known scale (output units).
    activation_max_elements: elements kept per activation tensor and image (0 = no activations, no localisation).
    compress: gzip the tar (``.tar.gz``, gzip mtime 0) instead of a plain ``.tar``.
    patterns: run the risky-pattern suite on the building machine and record its matrix (a few seconds).
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True

    golden_count: int = 4
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    tolerance_steps: float = 1.0
    max_mismatch: float = 0.01
    fallback_atol: float = 1e-4
    activation_max_elements: int = 2048
    compress: bool = False
    patterns: bool = True

    def validate(self) -> None:
        if self.golden_count < 1:
            raise ConfigError(f"bundle.golden_count: {self.golden_count} must be at least 1")
        if not self.providers:
            raise ConfigError("bundle.providers: name at least one execution provider, e.g. CPUExecutionProvider")
        if not self.tolerance_steps > 0:
            raise ConfigError(f"bundle.tolerance_steps: {self.tolerance_steps} must be positive")
        if not 0 <= self.max_mismatch < 1:
            raise ConfigError(f"bundle.max_mismatch: {self.max_mismatch} must be in [0, 1)")
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
    patterns_used: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "path": str(self.path), "patterns_used": list(self.patterns_used)}

    def __repr__(self) -> str:
        return f"BundleResult({self.path.name}, {self.size} bytes, {self.members} members, {self.golden} golden)"


def _need(path: Path, what: str, fix: str) -> Path:
    if not path.is_file():
        raise InputFileError(f"{path}: {what} not found; {fix}")
    return path


def _load_model(path: Path) -> Any:
    from ..modelio import load_model

    return load_model(path)


def _check_out_dir(out: Path, inputs: list[Path]) -> None:
    if out.exists() and not out.is_dir():
        raise InputFileError(f"{out}: exists and is not a folder; pass a folder to --out")
    check_not_input(out, inputs)
    if (out / OUTPUT_MARKER).is_file():  # an output folder: only an earlier bundle's (the message names its command)
        check_output_dir(out, "bundle")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if not (BUNDLE_NAME.match(p.name) or p.name in (POINTER_NAME, OUTPUT_MARKER)))
        if foreign:
            raise InputFileError(f"{out}: holds files quantkit bundle did not write ({foreign[0]!r}); pass an empty or new --out folder")


def _golden_set(golden: Path, count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    gm_path = golden / "manifest.json"
    gm = read_json(_need(gm_path, "set manifest", "pass a calibration/site set folder (images/ + manifest.json) to --golden"), "set manifest")
    images = gm.get("images") if isinstance(gm, dict) else None
    if not isinstance(images, list) or not images:
        raise CalibrationSetError(f"{gm_path}: the set lists no images; pass a set with at least one image to --golden")
    if len(images) < count:
        log.warning("%s lists %d images, fewer than golden_count=%d; using all", gm_path, len(images), count)
    return gm, images[:count]


def _patterns(int8_model: Any, run: bool) -> dict[str, Any]:
    from ..patterns import pattern_matrix, patterns_in

    used = [[p, nodes] for p, nodes in patterns_in(int8_model)]
    return {"matrix": pattern_matrix().to_dict(), "used": used} if run else {"used": used}


def build_bundle(quantized: str | Path, thresholds: str | Path, fp32: str | Path, golden: str | Path, out: str | Path,
                 config: BundleConfig | None = None) -> BundleResult:
    """Bundle a quantized model with its record, thresholds, export note and golden data into ``out``.

    Args:
        quantized: folder with ``model_int8.onnx`` and ``record.json`` (``work/quantize/<role>``).
        thresholds: threshold set JSON bound to that record (``work/thresholds/<role>.json``).
        fp32: intake folder with ``model.onnx`` and ``export_note.json`` (``work/intake``).
        golden: a set folder (``images/`` + ``manifest.json``); its first ``golden_count`` images are used.
        out: folder that receives ``quantkit-bundle-<sha256[:16]>.tar`` and ``bundle.json``; replaced whole and
            atomically (it may hold only an earlier bundle).

    Returns:
        :class:`BundleResult`. Same inputs, versions and machine give the same archive bytes.

    Raises:
        InputFileError / ModelError / CalibrationSetError: an input is missing, corrupt or empty; ``out`` is,
            holds or lies inside an input, or holds files a bundle run did not write.
        BindingMismatchError: the thresholds are not bound to the record, or the model is not the record's.
        ConfigError: bad config or adapter options.
    """
    cfg = config or BundleConfig()
    out, quantized, fp32, golden = Path(out), Path(quantized), Path(fp32), Path(golden)
    sources = [quantized, Path(thresholds), fp32, golden]  # the command's inputs, never replaced by out
    _check_out_dir(out, sources)
    int8_path = _need(quantized / "model_int8.onnx", "quantized model", "run 'quantkit quantize' for this role")
    record_path = _need(quantized / "record.json", "calibration record", "run 'quantkit quantize' for this role")
    fp32_path = _need(fp32 / "model.onnx", "FP32 intake model", "run 'quantkit intake' first")
    note_path = _need(fp32 / "export_note.json", "export note", "run 'quantkit intake' first")
    ts_path = _need(Path(thresholds), "threshold set", "run 'quantkit bind' first")
    record = CalibrationRecord.load(record_path)
    ts = ThresholdSet.load(ts_path)
    ts.check_binding(record_path, model_path=int8_path, source=str(ts_path))
    note = ExportNote.load(note_path)
    gm, entries = _golden_set(golden, cfg.golden_count)
    int8_model, fp32_digest = _load_model(int8_path), sha256_file(fp32_path)
    record.check_quantized_from(fp32_path, record_path, digest=fp32_digest)  # else its export note would ship with another model

    with scratch_dir("bundle") as stage_dir:
        stage = Path(stage_dir)
        files: dict[str, Path] = {}

        def put(name: str, data: bytes) -> None:
            p = stage / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            files[name] = p

        for name, src in (("model_int8.onnx", int8_path), ("record.json", record_path), ("thresholds.json", ts_path), ("export_note.json", note_path)):
            put(name, src.read_bytes())
        pre = note.preprocessing
        inputs, samples = golden_inputs(golden, entries, pre, put)
        specs = activation_specs(int8_model, cfg.tolerance_steps, cfg.activation_max_elements)
        out_names, specs, info = golden_runs(fp32_path, int8_model, pre.input_name, inputs, samples, specs, ts if ts.adapter else None,
                                             cfg.activation_max_elements, cfg.providers, put)

        scales = {t.name: t.scale for t in record.tensors}

        def record_scale(name: str) -> float | None:
            s = scales.get(name)
            return max(abs(float(v)) for v in s) if s else None

        thr_fp = ts.fingerprint or ts.content_fingerprint()
        patterns = _patterns(int8_model, cfg.patterns)
        manifest = BundleManifest(
            members={n: {"sha256": sha256_file(p), "size": p.stat().st_size} for n, p in sorted(files.items())},
            model_sha256=sha256_file(int8_path), opset=model_opsets(int8_model), ops=tuple(model_ops(int8_model)),
            input_name=pre.input_name, input_shape=tuple(inputs[0].shape),
            outputs=tuple(output_specs(int8_model, out_names, record_scale, cfg.tolerance_steps, cfg.fallback_atol)),
            fp32_model_sha256=fp32_digest, record_fingerprint=record.fingerprint, calibration_set={k: v for k, v in (record.calibration_set.to_dict() if record.calibration_set else {}).items() if k != "path"},
            threshold_fingerprint=thr_fp, threshold_values=dict(ts.values), adapter=ts.adapter or None,
            versions={**tool_versions(("onnx", "onnxruntime", "openvino", "numpy", "quantkit"), python=True), "providers": list(cfg.providers)},
            golden_runtime=info.to_dict(),
            tolerance=Tolerance(cfg.tolerance_steps, cfg.max_mismatch, cfg.fallback_atol, cfg.activation_max_elements),
            activations=tuple(specs),
            golden_set={"set_id": gm.get("set_id"), "name": gm.get("name")},  # no path: the bytes must not depend on how it was typed
            samples=to_samples(samples), patterns=patterns)
        put(MANIFEST_NAME, canonical_json(manifest.to_dict()).encode("utf-8"))

        with atomic_output_dir(out, command="bundle", inputs=sources) as tmp:
            partial = tmp / ".bundle.partial"
            digest = write_tar(partial, files, compress=cfg.compress)
            name = f"quantkit-bundle-{digest[:16]}.tar" + (".gz" if cfg.compress else "")
            final = tmp / name
            partial.rename(final)
            size = final.stat().st_size
            atomic_write_json(tmp / POINTER_NAME, {
                "schema_version": SCHEMA_VERSION, "bundle": name, "sha256": digest, "size": size,
                "record_fingerprint": record.fingerprint, "threshold_fingerprint": thr_fp,
                "calibration_set_id": record.set_id, "golden_set_id": gm.get("set_id"), "adapter": ts.adapter,
            })
    log.info("wrote %s (%d bytes, %d members)", out / name, size, len(files))
    return BundleResult(out / name, digest, size, len(files), len(samples), len(specs), ts.adapter or None, record.fingerprint, thr_fp,
                        tuple(p for p, _ in patterns["used"]))


def model_opsets(model: Any) -> dict[str, int]:
    """``{domain: version}`` of the opset imports the nodes use (``""`` written ``ai.onnx``; the default always kept)."""
    used = {n.domain or "" for n in model.graph.node} | {""}
    return {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import if (o.domain or "") in used}


def model_ops(model: Any) -> list[str]:
    """Sorted ``domain:op_type`` of every node of the main graph (``ai.onnx`` for the default domain)."""
    return sorted({f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in model.graph.node})

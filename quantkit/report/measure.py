"""Latency beside the shift report: each model's FP32, deployed INT8 and candidate INT8 timed interleaved on each
target runtime and thread count of this machine (``quantkit measure``, the main job's ``measure`` stage).

Latency depends on the machine, its load and its runtime builds, so it is kept out of every artifact DVC hashes and
out of the report's bytes: it is written to ``OUT/measurements.json`` and ``OUT/measurements.js``
(appended to ``window.QUANTKIT_MEASUREMENTS``, a list), which a small script in ``shift_report.html`` reads when the
folder ``machine/`` sits beside it. The main job's ``measure@<model>`` stage writes ``reports/machine/<model>/`` as a
git-ignored, uncached output, so it runs on a fresh clone and whenever the model's files change.

Method: :func:`quantkit.runtimes.latency.measure_latency` (per runtime and thread count, every repeat runs each model once on the same
input, in rotating order; medians), on the first ``images`` images of a set, each runtime at its deployment
settings (:data:`quantkit.runtimes.DEPLOYMENT_OPTIONS`). A variant slower than FP32 is listed in
``slower_than_fp32`` and logged as a warning, never dropped.

The FP32 model is also timed the other ways each runtime runs a float model (:data:`quantkit.runtimes.latency.FLOAT_RUNS`:
OpenVINO at its own default precision, ``fp32-default``, bf16 on CPUs with AVX-512 BF16 / AMX, beside the f32-pinned
``fp32``), interleaved with the rest. Each row's ``vs_best_float`` compares it with the runtime's fastest float run at
that thread count (``best_float`` names it); an INT8 variant slower than that run is listed in
``slower_than_best_float``: on such a runtime a user gets more by not quantizing (issue 32: OpenVINO's bf16 FP32 ran
the demo detectors as fast as their INT8 files). ``quantkit measure --require-speedup`` exits 1 when the list is not empty.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from .._io import atomic_write_json, atomic_write_text
from ..config import Config
from ..errors import ConfigError, InputFileError

log = logging.getLogger(__name__)

MODEL_FILE = "model_int8.onnx"
VARIANTS = ("deployed", "candidate")
"""Quantized variants timed against FP32, where ``quantize/<variant>/model_int8.onnx`` exists."""


@dataclasses.dataclass(frozen=True)
class MeasureConfig(Config):
    """``params.yaml: measure``: how ``quantkit measure`` times the models.

    runtimes: target runtimes by name (``onnxruntime``, ``openvino``); one not installed here is skipped and listed.
    threads: intra-op thread counts, each timed separately (e.g. ``[1, 2]``: one core, a 2-core machine's width).
    repeats: timed runs of each model per runtime and thread count (medians reported; at least 3).
    warmup: untimed runs of each model first. images: inputs cycled over the repeats (the first N of the set).
    node_profile: also run each quantized variant once under its runtime's own profiler at the first thread count and
        report where the time went (``node_time``: share in integer Conv/MatMul kernels, standalone Q/DQ nodes).
    """

    PARAMS_OPTIONAL: ClassVar[bool] = True

    runtimes: tuple[str, ...] = ("onnxruntime", "openvino")
    threads: tuple[int, ...] = (1, 2)
    repeats: int = 9
    warmup: int = 2
    images: int = 4
    node_profile: bool = True

    def validate(self) -> None:
        from ..runtimes.latency import RUNTIMES

        unknown = [r for r in self.runtimes if r not in RUNTIMES]
        if not self.runtimes or unknown:
            raise ConfigError(f"measure.runtimes: {list(self.runtimes)}: name runtimes among {', '.join(sorted(RUNTIMES))}")
        if not self.threads or any(t < 1 for t in self.threads):
            raise ConfigError(f"measure.threads: {list(self.threads)} must be thread counts >= 1, e.g. [1, 2]")
        if self.repeats < 3:
            raise ConfigError(f"measure.repeats: {self.repeats} must be >= 3 (a median of fewer runs is noise)")
        if self.warmup < 0 or self.images < 1:
            raise ConfigError("measure.warmup must be >= 0 and measure.images >= 1")


def _models(work: Path) -> dict[str, Path]:
    fp32 = work / "intake" / "model.onnx"
    if not fp32.is_file():
        raise InputFileError(f"{fp32}: FP32 intake model not found; pass a model work folder (e.g. work/models/ppocr_det) after 'quantkit intake'")
    found = {"fp32": fp32}
    for v in VARIANTS:
        if (work / "quantize" / v / MODEL_FILE).is_file():
            found[v] = work / "quantize" / v / MODEL_FILE
    if len(found) == 1:
        raise InputFileError(f"{work / 'quantize'}: no quantized model ({', '.join(VARIANTS)}) to time; run 'quantkit quantize' first")
    return found


def target_file(work: Path, runtime: str, targets: Mapping[str, str] | None) -> Path | None:
    """The deployed model's own file for ``runtime`` (``work/targets/<runtime>/quantize/model_int8.onnx``, the main job's
    ``place`` stage) when ``runtime`` is one of ``targets`` (params ``targets``: runtime -> placement).

    Raises:
        InputFileError: a target whose file is missing (run its ``place`` stage).
    """
    if not targets or runtime not in targets:
        return None
    path = work / "targets" / runtime / "quantize" / MODEL_FILE
    if not path.is_file():
        raise InputFileError(f"{path}: the deployed model placed for {runtime} ({targets[runtime]}) is missing; run "
                             f"'dvc repro place@{work.name}-{runtime}' or drop {runtime} from params targets")
    return path


def _placement(path: Path) -> str:
    """The Q/DQ placement a quantized file's record names (``ort`` for records written before placements existed)."""
    from ..artifacts.record import CalibrationRecord

    return str((CalibrationRecord.load(path.parent).config or {}).get("placement", "ort"))


def _feeds(work: Path, image_set: Path | None, n: int) -> list[dict[str, Any]]:
    """The first ``n`` images of ``image_set`` (default: the deployed record's calibration set) as model inputs."""
    from ..artifacts.record import CalibrationRecord
    from ..calibset import CalibrationSet, CalibrationSetReader
    from ..note import ExportNote

    if image_set is None:
        ref = CalibrationRecord.load(work / "quantize" / "deployed").calibration_set
        if not ref.path:
            raise ConfigError(f"{work}: the deployed record names no calibration set folder; pass --set DIR")
        image_set = Path(ref.path)
    pre = ExportNote.load(work / "intake" / "export_note.json").preprocessing
    reader = CalibrationSetReader(CalibrationSet.load(image_set, verify=True), pre)
    reader.set_range(0, min(n, len(reader)))
    return [{pre.input_name: x} for _, x in reader.iter_batches()]


def measure(works: Sequence[str | Path], config: MeasureConfig | None = None, *, image_set: str | Path | None = None,
            targets: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Time every model folder's FP32 and quantized variants on each runtime and thread count of ``config``.

    Args:
        works: model work folders (``work/models/<model>``: ``intake/model.onnx``, ``quantize/{deployed,candidate}/``).
        image_set: set whose first ``config.images`` images are the inputs (default: each model's deployed
            calibration set, from its record).
        targets: params ``targets`` (runtime -> placement): on each of these runtimes ``deployed`` is the file placed for it
            (``work/targets/<runtime>/quantize/``, :func:`target_file`) instead of ``quantize/deployed/``.

    Returns:
        ``{"schema_version", "machine", "method", "latency": [{model, variant, runtime, threads, median_ms,
        vs_fp32, vs_deployed, best_float, vs_best_float, placement}], "skipped": {runtime: why}, "slower_than_fp32":
        ["model variant runtime@threads"], "slower_than_best_float": ["model variant runtime@threads (best float: label)"],
        "node_time": [{model, variant, runtime, threads, total_ms, integer_kernel_share, integer_mac_share, macs_not_reported,
        conversion_ms, conversions, ...}]}``;
        ``vs_*`` = the other's median / this median (above 1: faster). Milliseconds per inference, one image. Float
        variants are ``fp32`` (deployment settings) and, on OpenVINO, ``fp32-default``.

    Raises:
        InputFileError: a folder without an FP32 or quantized model. ConfigError: bad config, or
            ``QUANTKIT_THREADS`` set (it would override every thread count timed).
    """
    from ..runtimes import available_runtimes
    from ..runtimes.latency import FLOAT_RUNS, LatencyConfig, interleaved_latency, runner_factory
    from ..runtimes.precision import cpu_isa, cpu_label

    cfg = config or MeasureConfig()
    installed = set(available_runtimes())
    skipped = {r: "not installed here" for r in cfg.runtimes if r not in installed}
    timer = LatencyConfig(runtimes=tuple(r for r in cfg.runtimes if r in installed), threads=cfg.threads, repeats=cfg.repeats, warmup=cfg.warmup)
    if os.environ.get("QUANTKIT_THREADS", "").strip():
        raise ConfigError("QUANTKIT_THREADS is set: it overrides the thread counts latency is measured at; unset it")
    rows: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    for work in map(Path, works):
        models = _models(work)
        feeds = _feeds(work, Path(image_set) if image_set else None, cfg.images)
        for rt in timer.runtimes:
            floats = FLOAT_RUNS.get(rt, {"fp32": runner_factory(rt)})
            own = target_file(work, rt, targets)
            quantized = {k: (own if k == "deployed" and own is not None else v) for k, v in models.items() if k != "fp32"}
            placement = {k: _placement(v) for k, v in quantized.items()}
            timed = {**{label: models["fp32"] for label in floats}, **quantized}
            for t in timer.threads:
                got = interleaved_latency(timed, feeds, threads=t, repeats=timer.repeats, warmup=timer.warmup, runtime=rt,
                                          label_factories=floats)
                ms = {k: x.median_ms for k, x in got.items()}
                best = min(floats, key=lambda k: ms[k])
                for variant, m in ms.items():
                    rows.append({"model": work.name, "variant": variant, "runtime": rt, "threads": t, "median_ms": round(m, 3),
                                 "vs_fp32": None if variant in floats else round(ms["fp32"] / m, 3),
                                 "vs_deployed": round(ms["deployed"] / m, 3) if variant == "candidate" and "deployed" in ms else None,
                                 "best_float": best, "vs_best_float": round(ms[best] / m, 3), "placement": placement.get(variant)})
                log.info("%s on %s, %d thread(s): %s", work.name, rt, t, ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items()))
            if cfg.node_profile:
                profiles.extend(_node_time(work.name, rt, quantized, feeds[0], timer.threads[0]))
    slower = [f"{r['model']} {r['variant']} {r['runtime']}@{r['threads']}" for r in rows if r["vs_fp32"] is not None and r["vs_fp32"] < 1.0]
    for s in slower:
        log.warning("slower than FP32: %s", s)
    below_best = [f"{r['model']} {r['variant']} {r['runtime']}@{r['threads']} (best float: {r['best_float']})" for r in rows
                  if r["vs_fp32"] is not None and r["vs_best_float"] < 1.0]
    for s in below_best:
        log.warning("slower than the runtime's best float run: %s", s)
    cpu = cpu_isa()
    return {"schema_version": 3, "machine": cpu_label(cpu), "slower_than_best_float": below_best,
            "method": f"interleaved medians of {cfg.repeats} runs after {cfg.warmup} warm-up runs, {cfg.images} images, each runtime at its "
                      "deployment settings (ONNX Runtime with intra-op spinning off, so idle sessions do not slow the timed one)", "latency": rows, "skipped": skipped, "slower_than_fp32": slower,
            "node_time": profiles}


def _node_time(model: str, runtime: str, variants: dict[str, Path], feed: dict[str, Any], threads: int) -> list[dict[str, Any]]:
    """One profiled inference of each variant on ``runtime`` at its deployment settings
    (:func:`quantkit.runtimes.precision.time_profile`), with the share of Conv/MatMul MACs in integer kernels from the
    same account (``integer_mac_share``, :func:`quantkit.runtimes.precision.integer_share`: the figure ``quantkit verify``
    prints); a runtime that cannot profile gives no row."""
    from ..modelio import load_model
    from ..runtimes import deployment_options, make_runtime
    from ..runtimes.precision import integer_share, time_profile

    out = []
    for variant, path in variants.items():
        with make_runtime(runtime, path, name=variant, **deployment_options(runtime, threads)) as rt:
            try:
                nodes = rt.node_precisions(feed)
            except NotImplementedError:
                return []
        prof = time_profile(nodes)
        if prof.total_ms > 0:
            macs = integer_share(load_model(path, load_external_data=False), nodes).to_dict()
            out.append({"model": model, "variant": variant, "runtime": runtime, "threads": threads, "placement": _placement(path),
                        **prof.to_dict(), "integer_mac_share": macs["integer_share"], "macs_not_reported": macs["nodes_unknown"]})
    return out


def write_measurements(result: dict[str, Any], out: str | Path) -> dict[str, Path]:
    """``OUT/measurements.json`` and ``OUT/measurements.js`` (the report's sidecar), each written atomically."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputFileError(f"{out}: is a file; --out takes a folder (e.g. reports/machine)")
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "measurements.json", "js": out / "measurements.js"}
    atomic_write_json(paths["json"], result)
    # appended to what an earlier script defined, so the report can load one file per model (machine/<model>/)
    atomic_write_text(paths["js"], "window.QUANTKIT_MEASUREMENTS = [].concat(window.QUANTKIT_MEASUREMENTS || [], ["
                      + json.dumps(result, sort_keys=True) + "]);\n")
    return paths


__all__ = ["MeasureConfig", "measure", "target_file", "write_measurements"]

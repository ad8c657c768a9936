"""Golden data of a bundle: inputs from images, FP32 and INT8 outputs, sampled INT8 activations, decisions.

INT8 values come from the **QDQ simulation** (the quantized model on ONNX Runtime with optimizations disabled),
the model's meaning under ONNX's operator definitions; every runtime is verified against it (see
:mod:`quantkit.bundle.manifest`). FP32 outputs come from the FP32 intake model, also with optimizations disabled.
Activations are the outputs of the INT8 model's activation DequantizeLinear nodes
(:func:`quantkit.runtimes.localize.quantized_tensors`), marked as outputs on that same simulation run (the
simulation does not fuse, so marking changes nothing), flattened and sampled at
:func:`quantkit.bundle.manifest.subsample_indices`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._io import sha256_bytes
from ..errors import CalibrationSetError, InputFileError, ModelError
from ..imageio import load_image
from ..progress import progress
from ..runtimes import RuntimeInfo, make_runtime
from ..runtimes.localize import dq_scales, quantized_tensors
from .decisions import decide
from .manifest import ActivationSpec, GoldenSample, OutputSpec, subsample_indices

Put = Callable[[str, bytes], None]
_CHUNK = 64  # activation tensors marked as outputs per session (bounds memory per run)


def npy_bytes(arr: np.ndarray) -> bytes:
    """``numpy.save`` bytes of ``arr`` (no pickle; deterministic header)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def golden_inputs(golden_dir: Path, entries: Sequence[dict[str, Any]], preprocessing: Any, put: Put) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """Read and preprocess the golden images; store raw bytes and inputs. Returns ``(inputs, sample dicts)``.

    Raises:
        CalibrationSetError: an entry has no file, or an image's bytes differ from its manifest SHA-256.
        InputFileError: an image is missing.
    """
    inputs, samples = [], []
    for i, entry in enumerate(entries):
        sid = f"{i:04d}"
        rel = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(rel, str):
            raise CalibrationSetError(f"{golden_dir / 'manifest.json'}: images[{i}] has no 'file'; regenerate the set manifest")
        src = golden_dir / rel
        if not src.is_file():
            raise InputFileError(f"{src}: golden image not found; restore it or regenerate {golden_dir}")
        data = src.read_bytes()
        if entry.get("sha256") and entry["sha256"] != sha256_bytes(data):
            raise CalibrationSetError(f"{src}: content differs from its sha256 in the set manifest; restore the set (dvc checkout)")
        x, _ = preprocessing.apply(load_image(src))
        suffix = src.suffix.lower() if re.fullmatch(r"\.[a-z0-9]{1,5}", src.suffix.lower()) else ".img"
        put(f"golden/{sid}/image{suffix}", data)
        put(f"golden/{sid}/input.npy", npy_bytes(x))
        inputs.append(x)
        samples.append({"id": sid, "source": rel, "source_sha256": sha256_bytes(data), "raw": f"golden/{sid}/image{suffix}",
                        "input": f"golden/{sid}/input.npy"})
    return inputs, samples


def output_specs(int8_model: Any, names: Sequence[str], record_scale: Callable[[str], float | None], steps: float, fallback_atol: float) -> list[OutputSpec]:
    """Tolerance of each output: ``steps`` steps of its scale (record.json, else the DequantizeLinear producing it)."""
    dq = dq_scales(int8_model)
    out = []
    for k, o in enumerate(names):
        scale, source = record_scale(o), "record.json scale"
        if scale is None:
            scale, source = dq.get(o), "DequantizeLinear scale in model_int8.onnx"
        out.append(OutputSpec(o, k, scale, steps * scale if scale else fallback_atol,
                              f"{steps:g} step(s) of the {source}" if scale else "bundle.fallback_atol"))
    return out


def activation_specs(int8_model: Any, steps: float, max_elements: int) -> list[ActivationSpec]:
    """The INT8 model's quantized activations (not its graph outputs) in topological order; shapes filled by the run."""
    if max_elements == 0:
        return []
    index = {o: i for i, n in enumerate(int8_model.graph.node) for o in n.output}
    prod = {o: n for n in int8_model.graph.node for o in n.output}
    outputs = {o.name for o in int8_model.graph.output}
    scales = dq_scales(int8_model)
    specs = []
    for t in quantized_tensors(int8_model):
        if t in outputs or t not in prod:
            continue
        q = prod.get(prod[t].input[0])
        scale = scales.get(t)
        specs.append(ActivationSpec(t, q.input[0] if q is not None else "", index[t], scale, steps * scale if scale else 0.0, ()))
    return specs


def golden_runs(fp32_path: Path, int8_model: Any, input_name: str, inputs: Sequence[np.ndarray], samples: list[dict[str, Any]],
                specs: list[ActivationSpec], thresholds: Any, max_elements: int, providers: Sequence[str], put: Put) -> tuple[list[str], list[ActivationSpec], RuntimeInfo]:
    """Run FP32 and the QDQ simulation on every input; store outputs, sampled activations and decisions in ``samples``.

    Returns ``(output names, activation specs with shapes, the simulation's RuntimeInfo)``.

    Raises:
        ModelError: a model cannot be run, the input is not the note's, or an output of the INT8 model is not one of FP32's.
    """
    fp32 = make_runtime("onnxruntime", fp32_path, graph_optimization_level="disable", providers=providers, name=str(fp32_path))
    sim = make_runtime("onnxruntime", int8_model, graph_optimization_level="disable", providers=providers, name="model_int8.onnx (QDQ simulation)")
    with fp32, sim:
        info = sim.info()
        if input_name not in sim.input_names or input_name not in fp32.input_names:
            raise ModelError(f"model_int8.onnx: has no input {input_name!r} named by the export note; re-run intake and quantize")
        out_names = sim.output_names
        missing = [o for o in out_names if o not in fp32.output_names]
        if missing:
            raise ModelError(f"model_int8.onnx: output {missing[0]!r} is not an output of {fp32_path}; quantize this intake model")
        for x, s in progress(list(zip(inputs, samples)), total=len(samples), desc="golden outputs"):
            f, q = fp32.infer({input_name: x}, out_names), sim.infer({input_name: x}, out_names)
            s["fp32"] = [f"golden/{s['id']}/fp32/{k:03d}.npy" for k in range(len(out_names))]
            s["int8"] = [f"golden/{s['id']}/int8/{k:03d}.npy" for k in range(len(out_names))]
            for k, o in enumerate(out_names):
                put(s["fp32"][k], npy_bytes(f[o]))
                put(s["int8"][k], npy_bytes(q[o]))
            s["decision_int8"] = decide(thresholds, q, model=int8_model) if thresholds is not None else None
            s["decision_fp32"] = decide(thresholds, f, fp32=True, model=int8_model) if thresholds is not None else None
    shapes: dict[str, tuple[int, ...]] = {}
    for s in samples:
        s["activations"] = []
    for start in progress(range(0, len(specs), _CHUNK), total=(len(specs) + _CHUNK - 1) // _CHUNK, desc="golden activations", unit="chunk"):
        names = [a.name for a in specs[start:start + _CHUNK]]
        with make_runtime("onnxruntime", int8_model, outputs=names, graph_optimization_level="disable", providers=providers, name="activations") as run:
            for x, s in zip(inputs, samples):
                got = run.infer({input_name: x}, names)
                for j, n in enumerate(names, start):
                    a = np.asarray(got[n], np.float32)
                    shapes[n] = tuple(a.shape)
                    member = f"golden/{s['id']}/act/{j:04d}.npy"
                    put(member, npy_bytes(a.reshape(-1)[subsample_indices(a.size, max_elements)]))
                    s["activations"].append(member)
    return list(out_names), [ActivationSpec(a.name, a.source, a.topo_index, a.scale, a.atol, shapes.get(a.name, ())) for a in specs], info


def to_samples(samples: list[dict[str, Any]]) -> tuple[GoldenSample, ...]:
    return tuple(GoldenSample(s["id"], s["source"], s["source_sha256"], s["raw"], s["input"], tuple(s.get("fp32", [])), tuple(s.get("int8", [])),
                              tuple(s.get("activations", [])), s.get("decision_int8"), s.get("decision_fp32")) for s in samples)

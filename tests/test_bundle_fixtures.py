"""Stand-in pipeline artifacts for the bundle tests (imported by name; holds no tests itself).

:func:`make_pipeline` writes, in milliseconds, what ``intake``, ``quantize`` and ``bind`` would:
``intake/`` (a tiny Conv-Relu-Conv-Sigmoid model, ``[1,3,S,S] -> [1,1,S,S]``, with its export note),
``quantize/<role>/`` (``model_int8.onnx`` from ``onnxruntime.quantization.quantize_static`` on seeded
random data, QDQ per-channel u8/s8, and ``record.json``), ``thresholds/<role>.json`` bound to it, and a
golden set ``site/`` (``images/`` + ``manifest.json``). Records and threshold sets are written with
the owning packages' classes so the stand-ins follow their formats exactly.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit._io import atomic_write_json, sha256_file
from quantkit.note import ExportNote, Preprocessing

SIZE = 32


def make_intake(folder: Path, size: int = SIZE) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.6, (1, 4, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([-0.5], np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu1"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["logits"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["logits"], ["prob"], name="sigmoid")]
    g = helper.make_graph(nodes, "tiny_det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1, size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    note = ExportNote(preprocessing=Preprocessing(input_size=(size, size), resize_policy="stretch"))
    note.embed(m)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(folder / "model.onnx"))
    note.save(folder / "export_note.json")
    return folder


class _Reader:
    def __init__(self, seed: int, n: int = 8, size: int = SIZE) -> None:
        rng = np.random.default_rng(seed)
        self.data = [{"x": rng.normal(0, 1, (1, 3, size, size)).astype(np.float32) * (1 + seed % 3)} for _ in range(n)]
        self.it = iter(self.data)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.it, None)

    def rewind(self) -> None:
        self.it = iter(self.data)


class _ImageReader(_Reader):
    def __init__(self, intake: Path, images: Path) -> None:
        from quantkit.imageio import load_image

        pre = ExportNote.load(intake / "export_note.json").preprocessing
        self.data = [{"x": pre.apply(load_image(p))[0]} for p in sorted((images / "images").glob("*.png"))]
        self.it = iter(self.data)


def make_quantized(intake: Path, out: Path, seed: int, images: Path | None = None) -> Path:
    """``model_int8.onnx`` + ``record.json`` calibrated on seeded random data, or on the set ``images``."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize.scales import extract_scales

    out.mkdir(parents=True, exist_ok=True)
    q_path = out / "model_int8.onnx"
    size = onnx.load(str(intake / "model.onnx")).graph.input[0].type.tensor_type.shape.dim[2].dim_value
    reader = _ImageReader(intake, images) if images is not None else _Reader(seed, size=size)
    quantize_static(str(intake / "model.onnx"), str(q_path), reader, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    tensors = extract_scales(onnx.load(str(q_path)), onnx.load(str(intake / "model.onnx")), calibrator="minmax")
    set_id = hashlib.sha256(f"calib-{seed}".encode()).hexdigest()
    cs = {"path": f"calibration_sets/seed{seed}", "set_id": set_id, "name": f"seed{seed}", "camera": "cam1", "lighting": "day", "count": 8}
    if images is not None and (images / "manifest.json").is_file():  # a set with a manifest (some written by hand): the record names it
        m = json.loads((images / "manifest.json").read_text())
        set_id = str(m.get("set_id", set_id))
        cs = {"path": str(images), "set_id": set_id, "name": str(m.get("name", images.name)), "camera": str(m.get("camera", "cam1")),
              "lighting": str(m.get("lighting", "day")), "count": len(m.get("images", [])) or 8}
    model_digest = sha256_file(intake / "model.onnx")
    chash = hashlib.sha256(b"config").hexdigest()
    rec = CalibrationRecord(fingerprint=CalibrationRecord.compute_fingerprint(tensors, model_digest, set_id, chash), model_digest=model_digest,
                            quantized_model_digest=sha256_file(q_path), calibration_set=cs, config={"method": "minmax"}, config_hash=chash,
                            opset_before=13, opset_after=13, versions={"onnxruntime": "test"}, tensors=tensors)
    rec.save(out / "record.json")
    return out


def make_thresholds(quantized: Path, path: Path, values: dict[str, float] | None = None) -> Path:
    from quantkit.artifacts.thresholds import Binding, ThresholdSet

    rec = json.loads((quantized / "record.json").read_text())
    cs = rec["calibration_set"]
    ts = ThresholdSet(adapter="db_text", values=values or {"thresh": 0.3, "box_thresh": 0.5}, fp32_values={"thresh": 0.3, "box_thresh": 0.5},
                      binding=Binding(model_digest=rec["model_digest"], record_fingerprint=rec["fingerprint"], calibration_set_id=cs["set_id"],
                                      calibration_set_name=cs["name"], quantized_model_digest=rec["quantized_model_digest"]))
    ts.save(path)
    return path


def make_golden_set(folder: Path, n: int = 6) -> Path:
    """``n`` seeded PNGs with soft bright blobs (so the detector head finds regions) + a set manifest."""
    from PIL import Image

    rng = np.random.default_rng(5)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    entries = []
    yy, xx = np.mgrid[0:40, 0:48]
    for i in range(n):
        img = rng.normal(60, 20, (40, 48, 3))
        for _ in range(2):
            cy, cx = rng.integers(8, 32), rng.integers(8, 40)
            img += 150 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 30.0)[..., None]
        f = folder / "images" / f"{i:04d}.png"
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(f)
        entries.append({"file": f"images/{i:04d}.png", "sha256": sha256_file(f), "bytes": f.stat().st_size})
    set_id = hashlib.sha256("".join(e["sha256"] for e in entries).encode()).hexdigest()
    atomic_write_json(folder / "manifest.json", {"schema_version": 1, "set_id": set_id, "name": "site-test", "kind": "site", "count": n,
                                                 "images": entries})
    return folder


def make_text_set(folder: Path, n: int = 4, size: int = 128) -> Path:
    """``n`` images of dark label text on light backgrounds (Pillow's default font), the detector's domain."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=22)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    entries = []
    for i in range(n):
        im = Image.new("RGB", (size, size), (235 - 10 * i, 230, 220))
        d = ImageDraw.Draw(im)
        d.text((8, 20), f"LOT {1234 + i}", fill=(20, 20, 20), font=font)
        d.text((8, 70), f"SN {98 - i}X", fill=(30, 30, 30), font=font)
        f = folder / "images" / f"{i:04d}.png"
        im.save(f)
        entries.append({"file": f"images/{i:04d}.png", "sha256": sha256_file(f)})
    atomic_write_json(folder / "manifest.json", {"schema_version": 1, "set_id": hashlib.sha256(str(entries).encode()).hexdigest(),
                                                 "name": "text", "images": entries})
    return folder


def make_pipeline(root: Path) -> dict[str, Path]:
    """All inputs of ``quantkit bundle`` under ``root``, plus a second calibration (``other``)."""
    intake = make_intake(root / "intake")
    deployed = make_quantized(intake, root / "quantize" / "deployed", seed=1)
    other = make_quantized(intake, root / "quantize" / "other", seed=2)
    return {"intake": intake, "deployed": deployed, "other": other,
            "thresholds": make_thresholds(deployed, root / "thresholds" / "deployed.json"),
            "other_thresholds": make_thresholds(other, root / "thresholds" / "other.json"),
            "golden": make_golden_set(root / "site")}


# -- archive surgery for the tamper tests ----------------------------------------------------------

def read_members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def repack(members: dict[str, bytes], out_dir: Path, *, update_manifest: bool) -> Path:
    """Write ``members`` as a content-addressed bundle in ``out_dir`` (like a hand-rebuilt bundle).

    With ``update_manifest`` the manifest's digests are recomputed (an "honest" rebuild of wrong
    content); without it the manifest is kept, so changed members fail their digest.
    """
    from quantkit.bundle import write_tar

    members = dict(members)
    if update_manifest:
        man = json.loads(members["manifest.json"])
        man["members"] = {n: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for n, b in members.items() if n != "manifest.json"}
        members["manifest.json"] = json.dumps(man, sort_keys=True, indent=2).encode()
    stage = out_dir / "stage"
    files = {}
    for n, b in members.items():
        p = stage / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b)
        files[n] = p
    tmp = out_dir / "partial.tar"
    digest = write_tar(tmp, files)
    final = out_dir / f"quantkit-bundle-{digest[:16]}.tar"
    tmp.rename(final)
    return final


def raw_tar(path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    """A tar with hand-made headers (for unsafe-archive tests)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def load_npy(data: bytes) -> Any:
    return np.load(io.BytesIO(data), allow_pickle=False)


def make_ppocr_intake(folder: Path, size: int = 64) -> Path:
    """The embedded PP-OCRv4 detector with its input fixed to ``1x3xSxS`` and opset 13 (for per-channel QDQ)."""
    from onnx import version_converter

    from quantkit.demo import packaged_model_path

    m = onnx.load(str(packaged_model_path()))
    for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, (1, 3, size, size)):
        d.Clear()
        d.dim_value = v
    for d, v in zip(m.graph.output[0].type.tensor_type.shape.dim, (1, 1, size, size)):
        d.Clear()
        d.dim_value = v
    m = onnx.shape_inference.infer_shapes(version_converter.convert_version(m, 13))
    note = ExportNote(preprocessing=Preprocessing(input_size=(size, size), resize_policy="stretch"))
    note.embed(m)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(folder / "model.onnx"))
    note.save(folder / "export_note.json")
    return folder


def make_pattern_pipeline(root: Path, model: onnx.ModelProto) -> dict[str, Path]:
    """Bundle inputs for a risky-pattern model (``quantkit.patterns``): the QDQ model serves as both the FP32 intake
    model and the quantized model, images are stretched to its ``[1, 3, H, W]`` input and scaled by 1/255, and the
    threshold set names no task adapter (tensor-level verification only)."""
    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize.scales import extract_scales
    from quantkit.artifacts import Binding, ThresholdSet

    h, w = (d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[2:])
    m = onnx.ModelProto()
    m.CopyFrom(model)
    note = ExportNote(preprocessing=Preprocessing(input_size=(h, w), resize_policy="stretch", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)))
    note.embed(m)
    intake, q = root / "intake", root / "quantize"
    intake.mkdir(parents=True)
    q.mkdir(parents=True)
    onnx.save(m, str(intake / "model.onnx"))
    note.save(intake / "export_note.json")
    onnx.save(m, str(q / "model_int8.onnx"))
    digest = sha256_file(intake / "model.onnx")
    tensors = extract_scales(m, m, calibrator="minmax")
    set_id = hashlib.sha256(b"pattern").hexdigest()
    chash = hashlib.sha256(b"config").hexdigest()
    rec = CalibrationRecord(fingerprint=CalibrationRecord.compute_fingerprint(tensors, digest, set_id, chash), model_digest=digest,
                            quantized_model_digest=sha256_file(q / "model_int8.onnx"), calibration_set={"path": "p", "set_id": set_id, "name": "p"},
                            config={}, config_hash=chash, opset_before=19, opset_after=19, versions={}, tensors=tensors)
    rec.save(q / "record.json")
    ts = ThresholdSet(adapter="", binding=Binding(model_digest=digest, record_fingerprint=rec.fingerprint, calibration_set_id=set_id,
                                                  calibration_set_name="p", quantized_model_digest=rec.quantized_model_digest))
    ts.save(root / "thresholds.json")
    return {"intake": intake, "deployed": q, "thresholds": root / "thresholds.json", "golden": make_golden_set(root / "site", n=2)}

"""Damaged inputs: every command turns a damaged model or image into one line (exit 2), never a traceback.

Models: truncations at evenly spread points, single-byte flips in the header region (first 64 bytes) and in
the graph (inside the bytes of the nodes, and anywhere), of a small generated model, of a cut of the real
PP-OCR detector (its first 67 nodes, the exporter's real structure) and of the whole detector. Images: the
same damage on PNG, JPEG, BMP, TIFF and WebP files registered as a set. A damaged input either still is a
valid one (a flipped weight bit; exit 0), or the command exits 2 (``support`` may exit 5 for an op type
changed into another valid-looking name) with exactly one line on stderr, no traceback, and nothing written.
"""

from __future__ import annotations

import io
import random
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from _reliability import tiny_map_model
from quantkit.cli.main import main


def damaged_copies(src: bytes, model: onnx.ModelProto | None, seed: int, n: int) -> list[tuple[str, bytes]]:
    """``n`` truncations, ``n`` flips in the first 64 bytes, ``n`` flips inside node bytes and ``n`` anywhere."""
    rng = random.Random(seed)
    out = [(f"truncated@{k}", src[:k]) for k in sorted({int(x) for x in np.linspace(1, len(src) - 1, n)})]
    spans = []
    if model is not None:
        for node in model.graph.node:
            b = node.SerializeToString()
            at = src.find(b)
            if at >= 0 and len(b) > 4:
                spans.append((at, at + len(b)))

    def flip(pos: int) -> bytes:
        b = bytearray(src)
        b[pos] ^= rng.choice([0x80, 0xFF, 1 << rng.randrange(8)])
        return bytes(b)

    out += [(f"header-flip@{p}", flip(p)) for p in (rng.randrange(min(64, len(src))) for _ in range(n))]
    if spans:
        out += [(f"node-flip@{p}", flip(p)) for p in (rng.randrange(*rng.choice(spans)) for _ in range(n))]
    out += [(f"flip@{p}", flip(p)) for p in (rng.randrange(len(src)) for _ in range(n))]
    return out


def _check(argv: list[str], capfd, out: Path | None, seen: Counter, label: str) -> None:
    rc = main(argv)  # an exception here is a traceback for the user: the test fails with it
    captured = capfd.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    seen[(argv[0] + (" --validate" if "--validate" in argv else ""), rc)] += 1
    if rc == 0:
        return
    assert rc in ((2, 5) if argv[0] == "support" else (2,)), f"{label}: {argv[0]} exit {rc}: {captured.err}"
    assert len(lines) == 1 and lines[0].startswith(f"quantkit {argv[0]}: error: "), f"{label}: {argv[0]} stderr: {captured.err!r}"
    assert "Traceback" not in captured.err
    if out is not None:
        assert not out.exists() and not any(p.name.startswith(f".{out.name}.") for p in out.parent.iterdir()), f"{label}: output written"


def _fuzz_models(src: bytes, model: onnx.ModelProto, tmp: Path, capfd, params: str, n: int, commands: tuple[str, ...]) -> Counter:
    (tmp / "params.yaml").write_text(params)
    seen: Counter = Counter()
    for label, data in damaged_copies(src, model, seed=len(src), n=n):
        path = tmp / "model.onnx"
        path.write_bytes(data)
        for c in commands:
            out = tmp / "out"
            argv = {"inspect": ["inspect", str(path)], "validate": ["inspect", "--validate", str(path)],
                    "support": ["support", str(path), "--target", "cpu"],
                    "intake": ["intake", str(path), "--params", str(tmp / "params.yaml"), "--out", str(out)]}[c]
            _check(argv, capfd, out if c == "intake" else None, seen, label)
            if out.exists():
                import shutil

                shutil.rmtree(out)
    seen["inputs"] = len(damaged_copies(src, model, seed=len(src), n=n))
    return seen


ALL = ("inspect", "validate", "support", "intake")


def test_damaged_generated_model(tmp_path, capfd):
    m = tiny_map_model()
    seen = _fuzz_models(m.SerializeToString(), m, tmp_path, capfd, "intake:\n  input_size: [32, 32]\n", 20, ALL)
    print("generated model:", dict(seen))
    assert seen["inputs"] == 80 and sum(v for k, v in seen.items() if k != "inputs" and k[1] != 0) > 100


@pytest.fixture(scope="module")
def det_cut():
    """The real PP-OCR detector's first 67 nodes at 64x64 (paddle2onnx's own names, Constant-node weights)."""
    from onnx.utils import Extractor

    from quantkit.demo import packaged_model_path
    from quantkit.intake.graph import fix_input_shape, infer_shapes

    m = onnx.load(str(packaged_model_path()))
    m = infer_shapes(fix_input_shape(m, "x", (1, 3, 64, 64)), "det")
    cut = Extractor(m).extract_model(["x"], ["hardswish_60.tmp_0"])
    return cut


def test_damaged_real_detector_cut(tmp_path, capfd, det_cut):
    seen = _fuzz_models(det_cut.SerializeToString(), det_cut, tmp_path, capfd, "intake:\n  input_size: [64, 64]\n", 10, ALL)
    print("PP-OCR det cut:", dict(seen))
    assert seen["inputs"] == 40


def test_damaged_real_detector(tmp_path, capfd):
    from quantkit.demo import packaged_model_path

    src = packaged_model_path().read_bytes()
    seen = _fuzz_models(src, onnx.load_from_string(src), tmp_path, capfd, "", 6, ("inspect", "support"))
    print("PP-OCR det:", dict(seen))
    assert seen["inputs"] == 24


def test_undecodable_op_type_is_one_line_everywhere(tmp_path, capfd):
    """The reported case: a flipped byte makes an op_type invalid UTF-8; inspect crashed comparing bytes and str."""
    m = tiny_map_model()
    src = m.SerializeToString()
    at = src.find(b"Relu")
    bad = bytearray(src)
    bad[at + 1] = 0xFF
    path = tmp_path / "bad.onnx"
    path.write_bytes(bytes(bad))
    (tmp_path / "p.yaml").write_text("intake:\n  input_size: [32, 32]\n")
    for argv in (["inspect", str(path)], ["inspect", "--validate", str(path)], ["support", str(path), "--target", "cpu"],
                 ["intake", str(path), "--params", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "o")],
                 ["quantize", str(path), "--dynamic", "--out", str(tmp_path / "q")]):
        assert main(argv) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "op_type is not valid UTF-8" in err[0] and str(path) in err[0], err


def _image_bytes(fmt: str) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray((rng.random((24, 32, 3)) * 255).astype(np.uint8)).save(buf, fmt)
    return buf.getvalue()


def test_damaged_images_at_registration(tmp_path, capfd):
    from PIL import Image

    seen: Counter = Counter()
    k = 0
    for fmt, ext in (("PNG", "png"), ("JPEG", "jpg"), ("BMP", "bmp"), ("TIFF", "tif"), ("WEBP", "webp")):
        src = _image_bytes(fmt)
        for label, data in damaged_copies(src, None, seed=len(src), n=6):
            k += 1
            folder = tmp_path / f"set{k}"
            (folder / "images").mkdir(parents=True)
            (folder / "images" / f"a.{ext}").write_bytes(data)
            Image.new("RGB", (8, 8), (9, 9, 9)).save(folder / "images" / "b.png")
            argv = ["calibset", "register", str(folder), "--name", "s"]
            rc = main(argv)
            captured = capfd.readouterr()
            seen[(ext, rc)] += 1
            if rc != 0:
                lines = [ln for ln in captured.err.splitlines() if ln.strip()]
                assert rc == 2 and len(lines) == 1 and f"images/a.{ext}" in lines[0] and "Traceback" not in captured.err, (label, captured.err)
                assert not (folder / "manifest.json").exists() and not (folder / "stats.csv").exists()
    print("images:", dict(seen), "inputs:", k)
    assert k == 90 and sum(v for (_, rc), v in seen.items() if rc == 2) > 30


def test_damaged_intake_output_into_quantize(tmp_path, capfd):
    """A damaged ``model.onnx`` inside an intake folder (what quantize, compare and bind read)."""
    from quantkit.intake import IntakeConfig, intake

    m = tiny_map_model()
    onnx.save(m, tmp_path / "m.onnx")
    intake(tmp_path / "m.onnx", IntakeConfig.from_dict({"input_size": [32, 32], "note_check": "off"}), tmp_path / "intake")
    good = (tmp_path / "intake" / "model.onnx").read_bytes()
    seen: Counter = Counter()
    for label, data in damaged_copies(good, onnx.load_from_string(good), seed=7, n=6):
        (tmp_path / "intake" / "model.onnx").write_bytes(data)
        _check(["quantize", str(tmp_path / "intake"), "--dynamic", "--out", str(tmp_path / "q")], capfd, tmp_path / "q", seen, label)
        if (tmp_path / "q").exists():
            import shutil

            shutil.rmtree(tmp_path / "q")
    print("intake output -> quantize --dynamic:", dict(seen))
    assert sum(seen.values()) == 24

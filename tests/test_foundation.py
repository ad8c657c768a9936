"""Tests of the shared foundations: strict configs, atomic IO, the export note, image decoding, runners."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Literal

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from quantkit import _io
from quantkit.config import Config, load_params
from quantkit.errors import ConfigError, InputFileError, ModelError
from quantkit.imageio import load_image
from quantkit.note import METADATA_KEY, ExportNote, Preprocessing
from quantkit.runner import OrtRunner, with_outputs


@dataclasses.dataclass(frozen=True)
class Inner(Config):
    a: int = 1


@dataclasses.dataclass(frozen=True)
class Outer(Config):
    name: str = "x"
    mode: Literal["fast", "slow"] = "fast"
    ratio: float = 0.5
    sizes: tuple[int, ...] = (1, 2)
    inner: Inner = dataclasses.field(default_factory=Inner)
    maybe: int | None = None

    def validate(self) -> None:
        if not 0 <= self.ratio <= 1:
            raise ConfigError(f"outer.ratio: {self.ratio} must be in [0, 1]")


def test_config_round_trip_and_hash_is_stable():
    c = Outer.from_dict({"name": "y", "mode": "slow", "ratio": 1, "sizes": [3], "inner": {"a": 5}})
    assert c.ratio == 1.0 and c.sizes == (3,) and c.inner == Inner(5)
    assert Outer.from_dict(c.to_dict()) == c
    assert c.config_hash() == Outer.from_dict(c.to_dict()).config_hash()
    assert c.config_hash() != Outer().config_hash()


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"nme": "y"}, "unknown option 'nme'"),
        ({"mode": "medium"}, "Outer.mode"),
        ({"ratio": "high"}, "expected a number"),
        ({"ratio": 2.0}, "must be in [0, 1]"),
        ({"inner": {"b": 1}}, "Outer.inner: unknown option 'b'"),
        ({"sizes": [1, "a"]}, "Outer.sizes[1]"),
        ({"schema_version": 99}, "schema_version"),
    ],
)
def test_config_rejects_bad_fields_naming_them(data, fragment):
    with pytest.raises(ConfigError) as e:
        Outer.from_dict(data)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_load_params_sections(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("a:\n  b:\n    c: 1\nlist: [1]\n")
    assert load_params(p, "a.b") == {"c": 1}
    with pytest.raises(ConfigError, match="section 'zzz' is missing"):
        load_params(p, "zzz")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_params(p, "list")
    with pytest.raises(InputFileError, match="params file not found"):
        load_params(tmp_path / "nope.yaml", "a")
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    with pytest.raises(InputFileError, match="not valid YAML"):
        load_params(tmp_path / "bad.yaml", "a")


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    _io.atomic_write_json(target, {"b": 1, "a": [1.5]})
    assert target.read_text() == '{\n  "a": [\n    1.5\n  ],\n  "b": 1\n}\n'
    with pytest.raises(ValueError):
        _io.atomic_write_json(target, {"x": float("nan")})
    assert json.loads(target.read_text()) == {"a": [1.5], "b": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_output_dir_swaps_only_on_success(tmp_path):
    dest = tmp_path / "stage"
    with _io.atomic_output_dir(dest) as d:
        (d / "a.txt").write_text("one")
    assert (dest / "a.txt").read_text() == "one"
    with pytest.raises(RuntimeError):
        with _io.atomic_output_dir(dest) as d:
            (d / "a.txt").write_text("two")
            raise RuntimeError("boom")
    assert (dest / "a.txt").read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage"]


def test_digests_and_fingerprint(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"abc")
    assert _io.sha256_file(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert _io.fingerprint({"a": 1, "b": 2}) == _io.fingerprint({"b": 2, "a": 1})
    with pytest.raises(InputFileError, match="not a valid JSON"):
        (tmp_path / "bad.json").write_text("{")
        _io.read_json(tmp_path / "bad.json", "record")


def test_preprocessing_matches_ppocr_normalisation():
    img = np.zeros((4, 6, 3), np.uint8)
    img[..., 0] = 255  # pure red
    pre = Preprocessing(input_size=(4, 6))
    x, tf = pre.apply(img)
    assert x.shape == (1, 3, 4, 6) and x.dtype == np.float32
    np.testing.assert_allclose(x[0, 0], 1.0)  # (1 - 0.5) / 0.5
    np.testing.assert_allclose(x[0, 1], -1.0)
    bgr, _ = Preprocessing(input_size=(4, 6), color_order="BGR", layout="NHWC").apply(img)
    assert bgr.shape == (1, 4, 6, 3)
    np.testing.assert_allclose(bgr[0, ..., 2], 1.0)
    assert tf.scale_x == 1.0


def test_letterbox_keeps_aspect_and_maps_back():
    img = np.full((100, 200, 3), 200, np.uint8)
    out, tf = Preprocessing(input_size=(64, 64)).resize(img)
    assert out.shape == (64, 64, 3)
    assert tf.pad == (32, 0)
    assert out[40, 10].tolist() == [0, 0, 0] and out[10, 10].tolist() == [200, 200, 200]
    np.testing.assert_allclose(tf.to_image(np.array([[64.0, 32.0]])), [[200.0, 100.0]])
    with pytest.raises(ConfigError, match="resize_policy 'none'"):
        Preprocessing(input_size=(64, 64), resize_policy="none").resize(img)


def test_export_note_embeds_and_round_trips(tmp_path):
    model = _tiny_model()
    note = ExportNote.from_dict({"preprocessing": {"input_size": [8, 8], "color_order": "BGR"}})
    note.embed(model)
    note.embed(model)  # replacing, not duplicating
    assert [p.key for p in model.metadata_props].count(METADATA_KEY) == 1
    assert ExportNote.from_model(model) == note
    note.save(tmp_path / "note.json")
    assert ExportNote.load(tmp_path / "note.json") == note
    with pytest.raises(ModelError, match="run 'quantkit intake'"):
        ExportNote.from_model(_tiny_model())


def test_load_image_modes(tmp_path):
    rgba = Image.new("RGBA", (5, 3), (10, 20, 30, 255))
    rgba.save(tmp_path / "a.png")
    gray16 = Image.fromarray(np.full((3, 5), 65535, np.uint16))
    gray16.save(tmp_path / "g16.png")
    pal = Image.new("P", (5, 3))
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.putpixel((0, 0), 1)
    pal.save(tmp_path / "p.png")
    assert load_image(tmp_path / "a.png")[0, 0].tolist() == [10, 20, 30]
    g = load_image(tmp_path / "g16.png")
    assert g.shape == (3, 5, 3) and g.dtype == np.uint8 and g.max() == 255
    assert load_image(tmp_path / "p.png")[0, 0].tolist() == [255, 0, 0]
    # EXIF orientation 6 (rotate 90 CW): a 5x3 (w x h) image reads back as 3x5
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (5, 3)).save(tmp_path / "rot.jpg", exif=exif)
    assert load_image(tmp_path / "rot.jpg").shape == (5, 3, 3)


@pytest.mark.parametrize("content, fragment", [(b"", "empty file"), (b"hello", "not an image"), (None, "not found")])
def test_load_image_bad_files(tmp_path, content, fragment):
    p = tmp_path / "bad.jpg"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(InputFileError, match=fragment) as e:
        load_image(p)
    assert str(p) in str(e.value)


def test_load_image_truncated_jpeg(tmp_path):
    good = tmp_path / "good.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(good)
    bad = tmp_path / "trunc.jpg"
    bad.write_bytes(good.read_bytes()[:300])
    with pytest.raises(InputFileError, match="trunc.jpg: corrupt or truncated"):
        load_image(bad)


def _tiny_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])


def test_runner_lifecycle_and_marked_outputs(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(with_outputs(_tiny_model(), ["r"]), path)
    runner = OrtRunner(path)
    with pytest.raises(RuntimeError, match="activated"):
        runner.infer({"x": np.zeros((1, 2), np.float32)})
    with runner:
        out = runner.infer({"x": np.array([[-1.0, 2.0]], np.float32)})
    assert out["r"].tolist() == [[0.0, 2.0]] and out["y"].tolist() == [[-0.0, -2.0]]
    assert len(runner.inference_times) == 1 and not runner.is_active


def test_runner_bad_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(ModelError, match="cannot load the model"):
        OrtRunner(bad).activate()
    with pytest.raises(ModelError, match="not found"):
        OrtRunner(tmp_path / "none.onnx").activate()


def test_atomic_outputs_get_ordinary_permissions(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    f = _io.atomic_write_text(tmp_path / "a.txt", "x")
    with _io.atomic_output_dir(tmp_path / "d") as d:
        (d / "b.txt").write_text("y")
    assert f.stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o777 & ~mask


def test_atomic_outputs_refuse_to_destroy_what_quantkit_did_not_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine")
    with pytest.raises(InputFileError, match="is a file; pass a folder"):
        with _io.atomic_output_dir(user_file):
            pass
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "keep.txt").write_text("x")
    with pytest.raises(InputFileError, match="did not write"):
        with _io.atomic_output_dir(user_dir):
            pass
    with pytest.raises(InputFileError, match="current folder"):
        with _io.atomic_output_dir("."):
            pass
    with pytest.raises(InputFileError, match="is a folder"):
        _io.atomic_write_text(user_dir, "x")
    with pytest.raises(InputFileError, match="is a file, not a folder"):
        _io.atomic_write_text(user_file / "sub.json", "x")
    assert user_file.read_text() == "mine" and (user_dir / "keep.txt").read_text() == "x"
    # quantkit's own output (marked) and empty folders are replaced
    with _io.atomic_output_dir(tmp_path / "out") as d:
        (d / "a").write_text("1")
    with _io.atomic_output_dir(tmp_path / "out") as d:
        (d / "b").write_text("2")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [_io.OUTPUT_MARKER, "b"]
    (tmp_path / "empty").mkdir()
    with _io.atomic_output_dir(tmp_path / "empty") as d:
        (d / "c").write_text("3")
    assert (tmp_path / "empty" / "c").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mine", "notes.txt", "out"]


def test_config_from_params_names_the_file(tmp_path):
    from quantkit.config import config_from_params

    p = tmp_path / "p.yaml"
    p.write_text("outer:\n  ratio: 3\n")
    with pytest.raises(ConfigError) as e:
        config_from_params(Outer, p, "outer")
    assert str(e.value) == f"{p}:outer.ratio: 3.0 must be in [0, 1]"
    p.write_text("outer:\n  nme: 1\n")
    with pytest.raises(ConfigError, match=f"^{p}:outer: unknown option 'nme'"):
        config_from_params(Outer, p, "outer")
    assert config_from_params(Outer, None, "outer") == Outer()

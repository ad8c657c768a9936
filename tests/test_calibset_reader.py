"""CalibrationSetReader: ORT's CalibrationDataReader over a set (quantkit.calibset.reader)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from quantkit.calibset import CalibrationSet, register_set
from quantkit.calibset.reader import CalibrationSetReader
from quantkit.errors import CalibrationSetError, ConfigError
from quantkit.note import Preprocessing

PRE = Preprocessing(input_size=(16, 16))


def make_set(root: Path, n: int = 5) -> CalibrationSet:
    (root / "images").mkdir(parents=True)
    for i in range(n):
        # image i is a flat grey of value 40*i, so batches can be identified by their values
        buf = io.BytesIO()
        Image.fromarray(np.full((20, 30, 3), 40 * i, np.uint8)).save(buf, format="PNG")
        (root / "images" / f"{i:04d}.png").write_bytes(buf.getvalue())
    return register_set(root, name="r").set


def _value(batch: np.ndarray) -> list[int]:
    """Recover each image's grey level from a normalized NCHW batch (top-left pixel; letterbox pads bottom)."""
    return [int(round((v * 0.5 + 0.5) * 255)) for v in batch[:, 0, 0, 0]]


def test_len_get_next_and_rewind(tmp_path: Path) -> None:
    cset = make_set(tmp_path / "s")
    r = CalibrationSetReader(cset, PRE, batch_size=2)
    assert len(r) == 3
    got = []
    while (feed := r.get_next()) is not None:
        assert list(feed) == ["x"] and feed["x"].dtype == np.float32 and feed["x"].shape[1:] == (3, 16, 16)
        got.append(_value(feed["x"]))
    assert got == [[0, 40], [80, 120], [160]]
    assert r.get_next() is None
    r.rewind()
    assert _value(r.get_next()["x"]) == [0, 40]
    assert [_value(b) for _, b in r.iter_batches()] == got  # independent full pass, same order
    assert len(list(iter(CalibrationSetReader(cset, PRE)))) == 5  # ORT's __iter__ protocol


def test_set_range_strided_like_ort(tmp_path: Path) -> None:
    r = CalibrationSetReader(make_set(tmp_path / "s", 4), PRE)
    seen = []
    for start in range(0, len(r), 2):  # what quantize_static does with CalibStridedMinMax=2
        r.set_range(start_index=start, end_index=start + 2)
        while (feed := r.get_next()) is not None:
            seen.extend(_value(feed["x"]))
    assert seen == [0, 40, 80, 120]
    r.set_range(3, 99)
    assert [_value(b) for _, b in r.iter_batches()] == [[120]]
    with pytest.raises(ConfigError):
        r.set_range(2, 1)


def test_nhwc_bgr_and_entries(tmp_path: Path) -> None:
    cset = make_set(tmp_path / "s", 2)
    pre = Preprocessing(input_name="img", input_size=(8, 12), layout="NHWC", color_order="BGR", resize_policy="stretch")
    (entries, batch), = list(CalibrationSetReader(cset, pre, batch_size=4).iter_batches())
    assert [e.file for e in entries] == ["images/0000.png", "images/0001.png"]
    assert batch.shape == (2, 8, 12, 3)


def _quantize(model_path: Path, reader: CalibrationSetReader, out: Path) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantFormat, quantize_static

    quantize_static(str(model_path), str(out), reader, quant_format=QuantFormat.QDQ, extra_options={"CalibStridedMinMax": 2})
    return onnx.load(str(out))


def test_drives_ort_quantize_static_with_strided_calibration(tmp_path: Path) -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3, 3, 3], np.random.default_rng(0).normal(size=54).astype(np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 16, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mp = tmp_path / "m.onnx"
    onnx.save(model, str(mp))
    q = _quantize(mp, CalibrationSetReader(make_set(tmp_path / "s", 4), PRE), tmp_path / "q.onnx")
    scales = {i.name: onnx.numpy_helper.to_array(i) for i in q.graph.initializer if i.name.endswith("_scale")}
    # inputs span grey 0..120 -> x in [-1, -0.06]; ORT widens the range to include 0: scale = 1/255
    assert scales["x_scale"] == pytest.approx(1.0 / 255.0, rel=1e-3)


def _corrupt_set(root: Path) -> CalibrationSet:
    cset = make_set(root, 4)
    (root / "images/0001.png").write_bytes(b"")  # emptied after registration
    (root / "images/0002.png").write_text("not a png")  # replaced by text
    return cset


def test_unreadable_file_fails_the_run_by_default(tmp_path: Path) -> None:
    r = CalibrationSetReader(_corrupt_set(tmp_path / "s"), PRE)
    assert r.get_next() is not None
    with pytest.raises(CalibrationSetError, match="0001.png") as ei:
        r.get_next()
    assert "\n" not in str(ei.value)
    # no hint at an option the commands reading sets (quantize, compare, bind, evaluate) do not have
    assert "on_error" not in str(ei.value) and "new version" in str(ei.value)


def test_unreadable_files_skipped_and_logged_by_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    r = CalibrationSetReader(_corrupt_set(tmp_path / "s"), PRE, batch_size=2, on_error="skip")
    assert [_value(b) for _, b in r.iter_batches()] == [[0], [120]]  # each bad file shrinks its batch
    assert r.skipped == ["images/0001.png", "images/0002.png"]
    assert "0001.png" in caplog.text and "0002.png" in caplog.text


def test_bad_arguments(tmp_path: Path) -> None:
    cset = make_set(tmp_path / "s", 1)
    with pytest.raises(ConfigError, match="batch_size"):
        CalibrationSetReader(cset, PRE, batch_size=0)
    with pytest.raises(ConfigError, match="on_error"):
        CalibrationSetReader(cset, PRE, on_error="ignore")  # type: ignore[arg-type]
    assert "batches=1" in repr(CalibrationSetReader(cset, PRE))

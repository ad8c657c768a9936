"""The embedded demo: model copy, deterministic photo-realistic sets, camera/lighting physics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from quantkit.calibset import CalibrationSet
from quantkit.cli.main import main
from quantkit.demo import packaged_model_path
from quantkit.demo import synth
from quantkit.demo.camera import CameraConfig, LightingConfig, blackbody_rgb, capture
from quantkit.demo.synth import DemoConfig, DemoSetSpec, make_set
from quantkit.errors import ConfigError

SIZE = (96, 128)


def _config(tmp_path: Path, count: int = 3, size: tuple[int, int] = SIZE) -> DemoConfig:
    return DemoConfig(input_size=size, sets={
        "day": DemoSetSpec(out=str(tmp_path / "day"), kind="calibration", camera="cam1", lighting="day", count=count, seed=5),
        "night": DemoSetSpec(out=str(tmp_path / "night"), kind="site", camera="cam1", lighting="night", count=count, seed=5),
        "cam2": DemoSetSpec(out=str(tmp_path / "cam2"), kind="site", camera="cam2", lighting="day", count=count, seed=5),
    })


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_make_set_layout_manifest_and_labels(tmp_path: Path) -> None:
    res = make_set(_config(tmp_path), "day")
    folder = tmp_path / "day"
    assert sorted(_files(folder)) == [".quantkit-output", "images/0000.jpg", "images/0001.jpg", "images/0002.jpg", "manifest.json", "stats.csv"]
    cset = CalibrationSet.load(folder, verify=True)
    assert (cset.name, cset.kind, cset.camera, cset.lighting, cset.count) == ("day", "calibration", "cam1", "day", 3)
    assert cset.set_id == res.set_id and res.text_boxes == sum(len(e.text_boxes) for e in cset.entries) > 0
    m = json.loads((folder / "manifest.json").read_text())
    assert m["generator"]["camera"]["jpeg_quality"] == 90 and "astronaut.png" in m["generator"]["backgrounds"]
    for e in cset.entries:
        assert (e.height, e.width, e.format) == (96, 128, "JPEG")
        assert e.captured_at.startswith("2025-03-06T") and "08:00" <= e.captured_at[11:16] < "17:00"
        for quad in e.text_boxes:
            q = np.asarray(quad)
            assert q.shape == (4, 2) and (q[:, 0] >= 0).all() and (q[:, 0] <= 128).all() and (q[:, 1] <= 96).all()
            # clockwise from top-left (y down): positive shoelace area
            area = 0.5 * sum(q[i, 0] * q[(i + 1) % 4, 1] - q[(i + 1) % 4, 0] * q[i, 1] for i in range(4))
            assert area > 0 and q[0, 0] < q[1, 0] and q[0, 1] < q[3, 1]


def test_same_params_same_bytes_and_image_independent_of_count(tmp_path: Path) -> None:
    make_set(_config(tmp_path / "a"), "night")
    make_set(_config(tmp_path / "b"), "night")
    a, b = _files(tmp_path / "a/night"), _files(tmp_path / "b/night")
    assert a == b
    make_set(_config(tmp_path / "c", count=2), "night")
    c = _files(tmp_path / "c/night")
    assert c["images/0001.jpg"] == a["images/0001.jpg"]
    cfg = _config(tmp_path / "d", count=1)
    renamed = cfg.replace(sets={"night": cfg.sets["night"].replace(name="cam1-night-v2")})
    assert make_set(renamed, "night").name == "cam1-night-v2" == CalibrationSet.load(tmp_path / "d/night").name


def test_night_and_cam2_shift_statistics_the_right_way(tmp_path: Path) -> None:
    cfg = _config(tmp_path, count=4, size=(160, 160))
    frames = {}
    for name in ("day", "night", "cam2"):
        make_set(cfg, name)
        frames[name] = CalibrationSet.load(tmp_path / name).stats().drop(columns="file").mean()
    day, night, cam2 = frames["day"], frames["night"], frames["cam2"]
    assert night["brightness_mean"] < 0.9 * day["brightness_mean"]  # exposure x0.25, gain x2.5
    assert night["cast_bg"] < 0.75 * day["cast_bg"] and night["cast_rg"] > day["cast_rg"]  # 3000 K on a 6500 K white balance
    assert night["noise_sigma"] > 1.2 * day["noise_sigma"]  # (0.8 -> 2.9 at 640 px; texture dominates at 160 px)
    assert cam2["sharpness_lapvar"] < 0.6 * day["sharpness_lapvar"]  # lower resolution, more defocus


def test_camera_model_physics() -> None:
    assert blackbody_rgb(3000)[2] < 0.5 < 1.5 < blackbody_rgb(3000)[0]
    np.testing.assert_allclose(blackbody_rgb(6504), [1, 1, 1], atol=0.08)  # D65 is close to a 6504 K blackbody
    grey = np.full((64, 64, 3), 118, np.uint8)  # sRGB 118 ~ 18 % grey
    rng = np.random.default_rng(0)
    cam = CameraConfig(vignetting=0.0, defocus_px=0.0)
    day = capture(grey, cam, LightingConfig(), rng).astype(float)
    dark = capture(grey, cam, LightingConfig(exposure=0.25, gain=1.0), rng).astype(float)
    lin_ratio = (dark.mean() / 255) ** 2.2 / (day.mean() / 255) ** 2.2
    assert lin_ratio == pytest.approx(0.25, rel=0.1)  # exposure acts in linear light
    noisy = capture(grey, cam, LightingConfig(exposure=0.25, gain=4.0), rng).astype(float)
    assert noisy.std() > 1.5 * day.std()  # gain amplifies shot + read noise


def test_configs_round_trip_and_validate(tmp_path: Path) -> None:
    cfg = synth.load_demo_config(Path(__file__).parents[1] / "params.yaml")
    assert DemoConfig.from_dict(cfg.to_dict()) == cfg
    assert {"calib-cam1-day", "site-cam2-day"} <= set(cfg.sets) and cfg.lightings["night"].exposure < cfg.lightings["day"].exposure
    with pytest.raises(ConfigError, match="demo.sets.x.camera: 'cam3'"):
        DemoConfig(sets={"x": DemoSetSpec(out="o", camera="cam3")})
    with pytest.raises(ConfigError, match="jpeg_quality"):
        CameraConfig(jpeg_quality=0)


def test_failed_render_leaves_previous_output_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path, count=2)
    make_set(cfg, "day")
    before = _files(tmp_path / "day")
    real = synth.render_image

    def flaky(assets, spec, index, *a):  # type: ignore[no-untyped-def]
        if index == 1:
            raise RuntimeError("disk full")
        return real(assets, spec, index, *a)

    monkeypatch.setattr(synth, "render_image", flaky)
    with pytest.raises(RuntimeError):
        make_set(cfg.replace(sets={"day": cfg.sets["day"].replace(seed=9)}), "day")
    assert _files(tmp_path / "day") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["day"]  # no temporary folder left
    with pytest.raises(ConfigError, match="no set named 'nope'"):
        make_set(cfg, "nope")


def test_cli_model_copies_the_packaged_detector(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models/ppocr_det.onnx"
    assert main(["demo", "model", "--out", str(out), "--json"]) == 0
    assert out.read_bytes() == packaged_model_path().read_bytes()
    assert json.loads(capsys.readouterr().out)["bytes"] == out.stat().st_size
    assert main(["demo", "model", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a folder" in err and "\n" not in err


def test_cli_make_set_and_bad_params(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = {"demo": {"input_size": [64, 64], "sets": {"s": {"out": str(tmp_path / "s"), "count": 2, "seed": 1}}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["demo", "make-set", "--params", str(tmp_path / "params.yaml"), "--name", "s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 2 and CalibrationSet.load(tmp_path / "s").count == 2
    params["demo"]["sets"]["t"] = {"out": str(tmp_path / "t"), "lighting": "dusk"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["demo", "make-set", "--params", str(tmp_path / "params.yaml"), "--name", "t"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'dusk' is not in demo.lightings" in err and "\n" not in err and not (tmp_path / "t").exists()
    assert main(["demo", "make-set", "--params", str(tmp_path / "missing.yaml"), "--name", "s"]) == 2


def test_fp32_detector_finds_the_rendered_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from quantkit.demo.check import check_accuracy
    from quantkit.tasks import make_adapter

    cfg = _config(tmp_path, count=4, size=(640, 640))
    make_set(cfg, "day")
    r = check_accuracy(CalibrationSet.load(tmp_path / "day"), packaged_model_path(), make_adapter("db_text"))
    assert r.counts["gt_ref"] >= 8 and r.metrics["recall"] >= 0.8 and r.metrics["precision"] >= 0.8, r.to_dict()
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"models": {"det": {"file": str(packaged_model_path()), "task": {"adapter": "db_text"}}}}))
    assert main(["demo", "check", str(tmp_path / "day"), "--params", str(params), "--model", "det", "--limit", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["images"] == 1 and 0 < one["counts"]["gt_ref"] < r.counts["gt_ref"] and one["counts"]["gt_tp"] <= one["counts"]["gt_ref"]


def test_cli_check_needs_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    from quantkit.calibset import register_set

    (tmp_path / "s/images").mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(tmp_path / "s/images/a.png")
    register_set(tmp_path / "s", name="s")
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"models": {"det": {"file": str(packaged_model_path()), "task": {"adapter": "db_text"}}}}))
    assert main(["demo", "check", str(tmp_path / "s"), "--params", str(params), "--model", "det"]) == 2
    assert "no labels.text_boxes" in capsys.readouterr().err

"""The demo fleet renderer: deterministic bytes whatever the process count, planted events applied and recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from quantkit.demo.fleet import FleetDemoConfig, FleetEvent, render_fleet
from quantkit.errors import ConfigError


def _cfg(tmp: Path, name: str, processes: int) -> FleetDemoConfig:
    return FleetDemoConfig(out=str(tmp / name / "images"), truth=str(tmp / name / "truth.json"), sites=2, lines_per_site=1, cameras_per_site=2,
                           days=3, images_per_day=2, image_size=(64, 64), processes=processes,
                           events=(FleetEvent("blur", "defocus", camera="a02", start_day=1, defocus_px=4.0),
                                   FleetEvent("night", "lighting", site="site-b", start_day=2, lighting="night_shift")))


def test_render_is_deterministic_and_records_truth(tmp_path: Path):
    a = render_fleet(_cfg(tmp_path, "a", 1))
    render_fleet(_cfg(tmp_path, "b", 2))
    files = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*.jpg"))
    assert a.images == len(files) == 2 * 2 * 3 * 2
    assert files[0] == "images/site-a/line-1/a01/2025-03-03/101500.jpg"  # 08:00 + (0.5 / 2) x 9 h
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    truth = json.loads((tmp_path / "a" / "truth.json").read_text())
    assert [(e["name"], e["cameras"], e["start_date"]) for e in truth["events"]] == [
        ("blur", ["a02"], "2025-03-04"), ("night", ["b01", "b02"], "2025-03-05")]
    assert truth["stable"] == ["a01"]
    night = sorted((tmp_path / "a" / "images" / "site-b" / "line-1" / "b01" / "2025-03-05").glob("*.jpg"))
    assert night[0].name.startswith("2")  # night-shift images are captured in the evening


def test_events_change_what_the_camera_sees(tmp_path: Path):
    from quantkit.calibset.stats import image_statistics
    from quantkit.imageio import load_image

    render_fleet(_cfg(tmp_path, "a", 1))
    root = tmp_path / "a" / "images"

    def stat(cam_dir: str, day: str, name: str) -> float:
        return float(np.mean([image_statistics(load_image(p))[name] for p in sorted((root / cam_dir / day).glob("*.jpg"))]))

    assert stat("site-a/line-1/a02", "2025-03-04", "sharpness_lapvar") < 0.5 * stat("site-a/line-1/a02", "2025-03-03", "sharpness_lapvar")
    assert stat("site-b/line-1/b01", "2025-03-05", "cast_bg") < 0.8 * stat("site-b/line-1/b01", "2025-03-04", "cast_bg")


def test_bad_event_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="not a camera or site"):
        FleetDemoConfig(events=(FleetEvent("x", "defocus", camera="zz9"),))
    with pytest.raises(ConfigError, match="exactly one of camera or site"):
        FleetEvent("x", "defocus")

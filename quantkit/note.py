"""The export note: a model's preprocessing contract plus its provenance.

Every quantkit stage reads preprocessing from the note, never from code. The note travels in the
model's ``metadata_props`` under :data:`METADATA_KEY` and as a sidecar JSON file.

Preprocessing order (the contract :meth:`Preprocessing.apply` implements):
1. decoded image ``(H, W, 3) uint8`` RGB (see :mod:`quantkit.imageio`);
2. resize to ``input_size`` under ``resize_policy``;
3. reorder channels to ``color_order``;
4. ``x = (pixel * scale - mean) / std`` per channel, as float32;
5. transpose to ``layout`` and add the batch axis.

For PP-OCR's detector this is ``scale=1/255, mean=0.5, std=0.5`` in RGB NCHW (PaddleOCR's
``NormalizeImage`` in ``ppocr/data/imaug/operators.py``; rapidocr's ``DetPreProcess``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._io import atomic_write_json, read_json
from .config import Config
from .errors import ConfigError, ModelError

METADATA_KEY = "quantkit.export_note"

ColorOrder = Literal["RGB", "BGR"]
Layout = Literal["NCHW", "NHWC"]
ResizePolicy = Literal["stretch", "letterbox", "none"]


@dataclasses.dataclass(frozen=True)
class Transform:
    """How an image was mapped into the model input: ``model_xy = image_xy * scale`` (per axis).

    ``pad`` is ``(pad_bottom, pad_right)`` in model pixels (letterbox pads bottom/right only, so no
    offset is needed to map coordinates back).
    """

    scale_y: float
    scale_x: float
    pad: tuple[int, int] = (0, 0)

    def to_image(self, xy: np.ndarray) -> np.ndarray:
        """Map ``(..., 2)`` float ``(x, y)`` model-input coordinates back to source-image pixels."""
        out = np.asarray(xy, dtype=np.float64).copy()
        out[..., 0] /= self.scale_x
        out[..., 1] /= self.scale_y
        return out


@functools.lru_cache(maxsize=16)
def _normalize_table(scale: float, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``(3, 256) float32``: ``(float32(v) * scale - mean[c]) / std[c]`` for every uint8 ``v``, computed with
    exactly the float32 operations :meth:`Preprocessing.apply` applies per pixel (so the results are identical)."""
    v = np.arange(256, dtype=np.uint8).astype(np.float32)[:, None] * np.float32(scale)
    return np.ascontiguousarray(((v - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)).T, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class Preprocessing(Config):
    """The preprocessing contract. ``input_size`` is ``(height, width)`` in pixels."""

    input_name: str = "x"
    input_size: tuple[int, int] = (640, 640)
    color_order: ColorOrder = "RGB"
    layout: Layout = "NCHW"
    dtype: Literal["float32"] = "float32"
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    resize_policy: ResizePolicy = "letterbox"
    pad_value: int = 0

    def validate(self) -> None:
        h, w = self.input_size
        if h <= 0 or w <= 0:
            raise ConfigError(f"preprocessing.input_size: {self.input_size} must be positive (height, width)")
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"preprocessing.std: {self.std} must be positive")
        if not 0 <= self.pad_value <= 255:
            raise ConfigError(f"preprocessing.pad_value: {self.pad_value} must be in 0..255")

    def resize(self, image: np.ndarray) -> tuple[np.ndarray, Transform]:
        """Resize an ``(H, W, 3) uint8`` image to ``input_size``; returns the image and its transform."""
        import cv2

        h, w = image.shape[:2]
        th, tw = self.input_size
        if self.resize_policy == "none" or (h, w) == (th, tw):
            if (h, w) != (th, tw) and self.resize_policy == "none":
                raise ConfigError(f"image is {h}x{w} but the note fixes {th}x{tw} with resize_policy 'none'; resize upstream or change the policy")
            return image, Transform(1.0, 1.0)
        if self.resize_policy == "stretch":
            out = cv2.resize(image, (tw, th), interpolation=cv2.INTER_LINEAR)
            return out, Transform(th / h, tw / w)
        s = min(th / h, tw / w)
        nh, nw = max(1, round(h * s)), max(1, round(w * s))
        resized = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
        out = np.full((th, tw, 3), self.pad_value, dtype=np.uint8)
        out[:nh, :nw] = resized
        return out, Transform(nh / h, nw / w, (th - nh, tw - nw))

    def apply(self, image: np.ndarray) -> tuple[np.ndarray, Transform]:
        """Turn one ``(H, W, 3) uint8`` RGB image into a model input.

        Returns:
            ``(1, 3, H, W)`` (NCHW) or ``(1, H, W, 3)`` (NHWC) ``float32`` array, and the :class:`Transform`.
        """
        img, tf = self.resize(image)
        if img.dtype == np.uint8:  # one table look-up per value (OpenCV LUT): the same float32 arithmetic, about 10x faster
            import cv2

            lut = _normalize_table(float(self.scale), tuple(self.mean), tuple(self.std))
            planes = cv2.split(np.ascontiguousarray(img))
            if self.color_order == "BGR":
                planes = planes[::-1]
            if self.layout == "NCHW":
                out = np.empty((1, 3, *img.shape[:2]), np.float32)
                for c, plane in enumerate(planes):
                    cv2.LUT(plane, lut[c].reshape(1, 256), dst=out[0, c])
                return out, tf
            return np.ascontiguousarray(cv2.merge([cv2.LUT(pl, lut[c].reshape(1, 256)) for c, pl in enumerate(planes)])[None]), tf
        if self.color_order == "BGR":
            img = img[..., ::-1]
        x: np.ndarray = img.astype(np.float32) * np.float32(self.scale)
        x = (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        if self.layout == "NCHW":
            x = x.transpose(2, 0, 1)
        return np.ascontiguousarray(x[None], dtype=np.float32), tf


@dataclasses.dataclass(frozen=True)
class Provenance(Config):
    """Where a model came from and what produced it. Digests are hex SHA-256."""

    source: str = ""
    source_digest: str = ""
    framework: str = ""
    framework_version: str = ""
    export_command: str = ""
    opset: int = 0
    sample_input_digest: str = ""
    runtime_versions: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ExportNote(Config):
    """Preprocessing contract + provenance, stored with the model and as a sidecar file."""

    preprocessing: Preprocessing = dataclasses.field(default_factory=Preprocessing)
    provenance: Provenance = dataclasses.field(default_factory=Provenance)

    def save(self, path: str | Path) -> Path:
        """Write the note as canonical JSON, atomically."""
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "ExportNote":
        """Read a sidecar note. Raises InputFileError / ConfigError naming the file."""
        data = read_json(path, "export note")
        try:
            return cls.from_dict(data, where=str(path))
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    def embed(self, model: Any) -> None:
        """Store the note in an ``onnx.ModelProto``'s ``metadata_props`` (replacing an older one)."""
        props = [p for p in model.metadata_props if p.key != METADATA_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(props)
        entry = model.metadata_props.add()
        entry.key = METADATA_KEY
        entry.value = json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_model(cls, model: Any, *, path: str = "model") -> "ExportNote":
        """Read the note embedded in an ``onnx.ModelProto``.

        Raises:
            ModelError: the model carries no note (run ``quantkit intake`` first).
        """
        for p in model.metadata_props:
            if p.key == METADATA_KEY:
                return cls.from_dict(json.loads(p.value), where=f"{path}:{METADATA_KEY}")
        raise ModelError(f"{path}: no export note in metadata_props; run 'quantkit intake' on it first")

"""The export note: a model's preprocessing contract plus its provenance.

Every quantkit stage reads preprocessing from the note, never from code. The note travels in the
model's ``metadata_props`` under :data:`METADATA_KEY` and as a sidecar JSON file.

Preprocessing order (the contract :meth:`Preprocessing.apply` implements):
1. decoded image ``(H, W, 3) uint8`` RGB (see :mod:`quantkit.imageio`);
2. resize to ``input_size`` under ``resize_policy`` (:meth:`Preprocessing.resize`: ``stretch``, ``letterbox``,
   ``shortest_side_crop``, ``fit_height_pad`` or ``none``);
3. channels: ``channels: 3`` reorders to ``color_order``; ``channels: 1`` takes the luma
   ``Y = 0.299 R + 0.587 G + 0.114 B`` (ITU-R BT.601, OpenCV's ``COLOR_RGB2GRAY``); ``channels: 4``
   reorders to ``color_order`` and appends an opaque alpha channel (255; decoded images carry no alpha);
4. ``x = (pixel * scale - mean) / std`` per channel, as float32 (``mean``/``std`` give one value for
   every channel, or one per channel); with ``pad_input`` set, the padded elements are then overwritten with
   that value (PaddleOCR / rapidocr pad their recognizer input with 0.0 after normalizing);
5. transpose to ``layout`` and add the batch axis (``batch_axis: false`` for rank-3 inputs, CHW/HWC).

For PP-OCR's detector this is ``scale=1/255, mean=0.5, std=0.5`` in RGB NCHW (PaddleOCR's
``NormalizeImage`` in ``ppocr/data/imaug/operators.py``; rapidocr's ``DetPreProcess``).

Notes written before ``channels`` and ``batch_axis`` existed load unchanged (3 channels, batch axis).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from ._io import atomic_write_json, read_json
from .config import Config
from .errors import ConfigError, InputFileError, ModelError
from .kinds import other_kind, register_kind
from .resize import Transform, fill_pad, fit_height_pad, letterbox, shortest_side_crop, stretch

METADATA_KEY = "quantkit.export_note"

ColorOrder = Literal["RGB", "BGR"]
Layout = Literal["NCHW", "NHWC"]
ResizePolicy = Literal["stretch", "letterbox", "shortest_side_crop", "fit_height_pad", "none"]
Channels = Literal[1, 3, 4]


@functools.lru_cache(maxsize=16)
def _normalize_table(scale: float, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``(C, 256) float32``: ``(float32(v) * scale - mean[c]) / std[c]`` for every uint8 ``v`` and channel ``c``, computed with
    exactly the float32 operations :meth:`Preprocessing.apply` applies per pixel (so the results are identical)."""
    v = np.arange(256, dtype=np.uint8).astype(np.float32)[:, None] * np.float32(scale)
    return np.ascontiguousarray(((v - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)).T, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class Preprocessing(Config):
    """The preprocessing contract.

    Attributes:
        input_name: the model input the array is fed to.
        input_size: ``(height, width)`` in pixels of the model input.
        color_order: channel order of 3- and 4-channel inputs (``RGB`` or ``BGR``); ignored for 1 channel.
        layout: ``NCHW`` (channels first) or ``NHWC`` (channels last); without the batch axis: CHW / HWC.
        dtype: element type of the input array (float32).
        scale: multiplies the 0-255 pixel value first (1/255 maps to 0..1).
        mean: subtracted after scaling; one value for every channel, or one per channel.
        std: divides after subtracting the mean; one value for every channel, or one per channel.
        resize_policy: ``stretch`` (ignore aspect), ``letterbox`` (keep aspect, pad bottom/right with
            ``pad_value``), ``shortest_side_crop`` (short side to ``resize_short``, keep aspect, centre crop:
            torchvision ``Resize`` + ``CenterCrop``), ``fit_height_pad`` (height to the input height, keep
            aspect up to the input width, pad right: PaddleOCR / rapidocr text recognizers) or ``none`` (every
            image must already be ``input_size``). Formulas and sources: :mod:`quantkit.resize`.
        pad_value: 0-255 grey level of the letterbox / fit_height_pad padding (all channels).
        resize_short: ``shortest_side_crop`` only: the short side's length in pixels before the centre crop
            (torchvision ``Resize(256)`` + ``CenterCrop(224)``: 256); 0 = the input's larger side (no zoom
            for a square input). Must be at least the input's larger side.
        pad_input: the padded elements' value in the model input itself, after normalization (every channel);
            rapidocr's and PaddleOCR's ``resize_norm_img`` pad with 0.0 here. Unset: the padding is
            ``pad_value`` pixels, normalized like the image. letterbox and fit_height_pad only.
        channels: 1 (grayscale luma, BT.601), 3 (colour in ``color_order``) or 4 (colour + opaque alpha).
        batch_axis: the input has a leading batch axis (rank 4); false for rank-3 inputs (CHW / HWC).
    """

    input_name: str = "x"
    input_size: tuple[int, int] = (640, 640)
    color_order: ColorOrder = "RGB"
    layout: Layout = "NCHW"
    dtype: Literal["float32"] = "float32"
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    resize_policy: ResizePolicy = "letterbox"
    pad_value: int = 0
    channels: Channels = 3
    batch_axis: bool = True
    resize_short: int = 0
    pad_input: float | None = None

    OPTIONAL_KEYS: ClassVar[dict[str, Any]] = {"resize_short": 0, "pad_input": None}
    """Fields left out of :meth:`to_dict` at their default, so notes written before they existed keep their bytes."""

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for k, default in self.OPTIONAL_KEYS.items():
            if out[k] == default:
                del out[k]
        return out

    def validate(self) -> None:
        h, w = self.input_size
        if h <= 0 or w <= 0:
            raise ConfigError(f"preprocessing.input_size: {self.input_size} must be positive (height, width)")
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"preprocessing.std: {self.std} must be positive")
        if not self.scale > 0:  # 0 makes every image the same input; NaN too
            raise ConfigError(f"preprocessing.scale: {self.scale} must be positive: the factor on 0..255 pixels before mean "
                              "and std (1/255 = 0.00392156862745098 for inputs in 0..1, 1.0 for 0..255)")
        if not 0 <= self.pad_value <= 255:
            raise ConfigError(f"preprocessing.pad_value: {self.pad_value} must be in 0..255")
        if self.resize_short < 0:
            raise ConfigError(f"preprocessing.resize_short: {self.resize_short} must be positive (or 0 for the input's larger side)")
        if self.resize_short and self.resize_policy != "shortest_side_crop":
            raise ConfigError(f"preprocessing.resize_short: {self.resize_short} is used only by resize_policy shortest_side_crop "
                              f"(this note has {self.resize_policy}); remove it or set resize_policy: shortest_side_crop")
        if self.resize_policy == "shortest_side_crop" and self.resize_short and self.resize_short < max(h, w):
            raise ConfigError(f"preprocessing.resize_short: {self.resize_short} is smaller than the input's larger side {max(h, w)}, so the "
                              f"centre crop would need padding; set resize_short >= {max(h, w)} (ImageNet: 256 for 224)")
        if self.pad_input is not None and self.resize_policy not in ("letterbox", "fit_height_pad"):
            raise ConfigError(f"preprocessing.pad_input: resize_policy {self.resize_policy} pads nothing; remove pad_input or use letterbox / fit_height_pad")
        for name in ("mean", "std"):
            vals = getattr(self, name)
            if len(vals) not in (1, self.channels) and not (len(set(vals)) == 1 and len(vals) > 0):
                raise ConfigError(f"preprocessing.{name}: {list(vals)} has {len(vals)} values for a {self.channels}-channel input; "
                                  f"give one value (used for every channel) or {self.channels}")

    def input_shape(self, batch: int = 1) -> tuple[int, ...]:
        """The model input shape this contract produces: ``(batch, C, H, W)`` / ``(batch, H, W, C)``, or
        without ``batch`` when ``batch_axis`` is false."""
        h, w = self.input_size
        shape = (self.channels, h, w) if self.layout == "NCHW" else (h, w, self.channels)
        return ((batch,) + shape) if self.batch_axis else shape

    def _per_channel(self, vals: tuple[float, ...]) -> np.ndarray:
        return np.full(self.channels, vals[0], np.float32) if len(vals) != self.channels else np.asarray(vals, np.float32)

    def resize(self, image: np.ndarray, *, source: str | None = None) -> tuple[np.ndarray, Transform]:
        """Resize an ``(H, W, 3) uint8`` image to ``input_size`` under ``resize_policy``; returns the
        ``(th, tw, 3) uint8`` image and its :class:`Transform`. Each policy's formula and source:
        :mod:`quantkit.resize`. An image already ``input_size`` is returned unchanged (by ``shortest_side_crop``
        only when ``resize_short`` does not zoom).

        Raises:
            ConfigError: ``resize_policy: none`` and the image is not ``input_size`` (names ``source``).
        """
        h, w = image.shape[:2]
        th, tw = self.input_size
        if self.resize_policy == "shortest_side_crop":
            return shortest_side_crop(image, self.input_size, self.resize_short or max(th, tw))
        if self.resize_policy == "none" or (h, w) == (th, tw):
            if (h, w) != (th, tw) and self.resize_policy == "none":
                raise ConfigError(f"{source or 'image'}: is {h}x{w} (height x width) but the note fixes {th}x{tw} with resize_policy 'none'; "
                                  "resize the images upstream or set preprocessing.resize_policy: letterbox or stretch")
            return image, Transform(1.0, 1.0)
        if self.resize_policy == "stretch":
            return stretch(image, self.input_size)
        if self.resize_policy == "fit_height_pad":
            return fit_height_pad(image, self.input_size, self.pad_value)
        return letterbox(image, self.input_size, self.pad_value)

    def apply(self, image: np.ndarray, *, source: str | None = None) -> tuple[np.ndarray, Transform]:
        """Turn one ``(H, W, 3) uint8`` RGB image (or ``(H, W)`` grey) into a model input.

        Args:
            image: the decoded image (:func:`quantkit.imageio.load_image`).
            source: the image's file name, for error messages.

        Returns:
            ``float32`` array of :meth:`input_shape` (``(1, C, H, W)`` for NCHW, ``(1, H, W, C)`` for NHWC,
            no leading 1 when ``batch_axis`` is false), and the :class:`Transform`.

        Raises:
            ConfigError: the image does not fit ``resize_policy: none`` (names ``source``).
        """
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=2)
        img, tf = self.resize(image, source=source)
        x = self._normalized(img)
        if self.pad_input is not None and tf.pad != (0, 0):
            fill_pad(x, tf.pad, self.pad_input, channels_last=self.layout == "NHWC")
        return x, tf

    def _normalized(self, img: np.ndarray) -> np.ndarray:
        """Steps 3-5 of the contract on a resized ``(th, tw, 3) uint8`` image."""
        import cv2

        if self.channels == 1:
            img = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY)[..., None]
        else:
            if self.color_order == "BGR":
                img = img[..., ::-1]
            if self.channels == 4:
                img = np.concatenate([img, np.full(img.shape[:2] + (1,), 255, np.uint8)], axis=2)
        if img.dtype == np.uint8:  # one table look-up per value (OpenCV LUT): the same float32 arithmetic, several times faster
            return self._apply_table(img)
        x: np.ndarray = img.astype(np.float32) * np.float32(self.scale)
        x = (x - self._per_channel(self.mean)) / self._per_channel(self.std)
        if self.layout == "NCHW":
            x = x.transpose(2, 0, 1)
        return np.ascontiguousarray(x[None] if self.batch_axis else x, dtype=np.float32)

    def _apply_table(self, img: np.ndarray) -> np.ndarray:
        """``(H, W, C) uint8`` -> the model input, through :func:`_normalize_table` (bit-identical to the float formula)."""
        import cv2

        lut = _normalize_table(float(self.scale), tuple(float(v) for v in self._per_channel(self.mean)),
                               tuple(float(v) for v in self._per_channel(self.std)))
        planes = [np.ascontiguousarray(img[..., c]) for c in range(img.shape[2])]
        h, w = img.shape[:2]
        if self.layout == "NCHW":
            out = np.empty((1, len(planes), h, w), np.float32)
            for c, plane in enumerate(planes):
                cv2.LUT(plane, lut[c].reshape(1, 256), dst=out[0, c])
        else:
            out = np.stack([cv2.LUT(pl, lut[c].reshape(1, 256)) for c, pl in enumerate(planes)], axis=-1)[None]
        return np.ascontiguousarray(out if self.batch_axis else out[0], dtype=np.float32)

    def load(self, path: str | Path) -> tuple[np.ndarray, Transform]:
        """Decode ``path`` (:func:`quantkit.imageio.load_image`) and :meth:`apply` this contract; every error names the file.

        Raises:
            InputFileError: the image cannot be decoded.
            ConfigError: the image does not fit ``resize_policy: none``.
        """
        from .imageio import load_image

        return self.apply(load_image(path), source=str(path))


@dataclasses.dataclass(frozen=True)
class ArchivedArray(Config):
    """One array stored beside the model as a ``.npy`` file: ``file`` is relative to the model's folder,
    ``sha256`` the hex SHA-256 of the file's bytes (``sha256sum FILE`` checks it), ``shape`` and ``dtype``
    (numpy's name, e.g. ``float32``) those of the array. ``name`` is the model input or output it holds."""

    name: str
    file: str
    sha256: str
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class FrameworkExport(Config):
    """How ``quantkit export`` produced the model from its framework (absent from other notes).

    Attributes:
        module: the MODULE argument as given (``package.module:factory``, ``path/file.py:factory``, or a
            TorchScript ``.pt`` / ``torch.export`` ``.pt2`` file).
        module_sha256: SHA-256 of the module file (the ``.pt``/``.pt2`` file, or the factory's ``.py`` source).
        weights_sha256: SHA-256 over the module's ``state_dict`` (names, dtypes, shapes and bytes, in order).
        factory_kwargs: keyword arguments the factory was called with.
        exporter: the exporter used, e.g. ``torch.onnx.export (TorchScript, dynamo=False)``.
        call: the exact export call, with every argument quantkit passed.
        opset: the ai.onnx opset the exporter was asked for.
        sample_input: the input the model was traced and compared on.
        framework_outputs: the framework's outputs on ``sample_input``, in graph output order.
    """

    module: str
    module_sha256: str
    weights_sha256: str
    factory_kwargs: dict[str, Any]
    exporter: str
    call: str
    opset: int
    sample_input: ArchivedArray
    framework_outputs: tuple[ArchivedArray, ...]


@dataclasses.dataclass(frozen=True)
class Provenance(Config):
    """Where a model came from and what produced it. Digests are hex SHA-256.

    ``sample_input_digest`` is the SHA-256 of the sample input array's raw bytes (C order).
    ``named_nodes``: how many nodes had no name and were named by intake (rule and names in ``intake.json``:
    ``named_nodes``). ``export`` is set only by ``quantkit export``; it is left out of :meth:`to_dict` when unset,
    so notes written without it keep their bytes and notes written before it existed still load.
    """

    source: str = ""
    source_digest: str = ""
    framework: str = ""
    framework_version: str = ""
    export_command: str = ""
    opset: int = 0
    sample_input_digest: str = ""
    runtime_versions: dict[str, str] = dataclasses.field(default_factory=dict)
    named_nodes: int = 0
    export: FrameworkExport | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.export is None:
            del out["export"]
        return out


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
        """Read a sidecar note. Raises InputFileError / ConfigError naming the file (InputFileError saying what
        the file is when it is another kind of quantkit file, e.g. a calibration record)."""
        data = read_json(path, "export note")
        other = other_kind(cls, data) if isinstance(data, dict) else None
        if other is not None:
            raise InputFileError(f"{path}: this is {other}, not an export note; pass the export_note.json that 'quantkit intake' writes")
        try:
            return cls.from_dict(data, where=str(path))
        except ConfigError as e:
            msg = str(e)
            raise ConfigError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None

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


register_kind(ExportNote, "export note", "export_note.json", "quantkit intake")

"""Task adapters: raw model outputs -> decisions, with the thresholds named as the field names them.

An adapter is a frozen, typed config (:class:`quantkit.config.Config`) plus ``decide``. It declares in
:attr:`Adapter.THRESHOLDS` which of its thresholds apply to which output tensor and how (element-wise
or on a region mean, ``>`` or ``>=``), so :mod:`quantkit.thresholds.binding` can put them into the
integer domain of that tensor's QuantizeLinear.

Adapters are pluggable: subclass :class:`Adapter`, set ``name``, ``THRESHOLDS`` and ``PRIMARY``,
implement ``_decide_one``, and decorate with :func:`register_adapter`.

Built in:
* ``db_text`` (:class:`DBTextAdapter`): PP-OCR's DB head, post-processing by rapidocr's
  ``DBPostProcess`` (``rapidocr_onnxruntime/ch_ppocr_det/utils.py``, a port of PaddleOCR's
  ``ppocr/postprocess/db_postprocess.py``) with rapidocr's deployed defaults (``config.yaml``:
  thresh 0.3, box_thresh 0.5, unclip_ratio 1.6, max_candidates 1000, use_dilation true, score_mode fast).
* ``classifier`` (:class:`ClassifierAdapter`): softmax scores, fire when the top score ``> cls_thresh``
  (rapidocr ``TextClassifier``: ``score > self.cls_thresh``; default 0.9).
* ``box_detector`` (:class:`BoxDetectorAdapter`): YOLO-style ``[N, K, 4+1+C]`` (cx, cy, w, h,
  objectness, class scores), score = objectness x class score, keep ``score > score_thresh``, then
  class-wise NMS at ``iou_thresh`` (OpenCV ``cv2.dnn.NMSBoxesBatched``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Sequence, TypeVar

import numpy as np

from ..config import Config
from ..errors import ConfigError, ModelError


@dataclasses.dataclass(frozen=True)
class ThresholdSpec:
    """How one threshold is used.

    ``on_output``: True when it is compared with values of the adapter's output tensor (so it has an
    integer-domain form); ``comparison``: ``>`` or ``>=`` (item kept when ``value <cmp> threshold``);
    ``reduction``: ``none`` (per element) or ``mean`` (mean over a region); ``search``: (low, high)
    range for operating-point searches.
    """

    name: str
    on_output: bool
    comparison: str = ">"
    reduction: str = "none"
    search: tuple[float, float] = (0.05, 0.95)


@dataclasses.dataclass(frozen=True, repr=False)
class Decision:
    """Decisions of one image.

    ``polygons``: ``(K, 4, 2) float32`` corner points (x, y) in model-input pixels (boxes become
    4-corner polygons); ``scores``: ``(K,) float32``; ``labels``: ``(K,) int64`` class ids (0 for
    text); ``mask``: ``(H, W) bool`` binarized map for map-based heads, else ``None``.
    """

    polygons: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    mask: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def select(self, keep: np.ndarray) -> "Decision":
        """Subset of items where ``keep`` (bool ``(K,)``) is true; the mask is kept as is."""
        return Decision(self.polygons[keep], self.scores[keep], self.labels[keep], self.mask)

    def to_dict(self, ndigits: int = 0) -> dict[str, Any]:
        """Small JSON form: polygons as rounded ints (``ndigits=0``), scores to 4 decimals."""
        poly = np.round(self.polygons, ndigits)
        return {
            "polygons": poly.astype(int).tolist() if ndigits == 0 else poly.tolist(),
            "scores": [round(float(s), 4) for s in self.scores],
            "labels": [int(v) for v in self.labels],
        }

    def __repr__(self) -> str:
        m = "" if self.mask is None else f", mask={self.mask.shape[1]}x{self.mask.shape[0]}"
        return f"Decision({len(self)} items{m})"


def empty_decision(mask: np.ndarray | None = None) -> Decision:
    return Decision(np.zeros((0, 4, 2), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), mask)


A = TypeVar("A", bound="Adapter")


@dataclasses.dataclass(frozen=True)
class Adapter(Config):
    """Base adapter. ``output``: name of the output tensor to read (``""`` = the model's first output).

    Subclasses set ``name`` (registry key), ``THRESHOLDS`` and ``PRIMARY`` (the threshold that filters
    items by score; operating-point searches move it).
    """

    name: ClassVar[str] = ""
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = ()
    PRIMARY: ClassVar[str] = ""

    output: str = ""

    # -- thresholds -------------------------------------------------------------------------------
    def thresholds(self) -> dict[str, float]:
        """The current threshold values by name."""
        return {s.name: float(getattr(self, s.name)) for s in self.THRESHOLDS}

    def spec(self, name: str) -> ThresholdSpec:
        for s in self.THRESHOLDS:
            if s.name == name:
                return s
        raise ConfigError(f"adapter {self.name!r} has no threshold {name!r}; it has {', '.join(s.name for s in self.THRESHOLDS)}")

    def with_thresholds(self: A, values: Mapping[str, float]) -> A:
        """Copy with threshold values replaced (validated). Unknown names raise ConfigError."""
        for k in values:
            self.spec(k)
        return self.replace(**{k: float(v) for k, v in values.items()})

    def options(self) -> dict[str, Any]:
        """Settings that are not thresholds (e.g. ``unclip_ratio``), as plain values."""
        names = {s.name for s in self.THRESHOLDS}
        return {k: v for k, v in self.to_dict().items() if k not in names and k != "schema_version"}

    # -- decisions --------------------------------------------------------------------------------
    def select_output(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The array this adapter reads. Raises ModelError when the named output is absent."""
        if not outputs:
            raise ModelError(f"adapter {self.name!r}: the model produced no outputs")
        if self.output:
            if self.output not in outputs:
                raise ModelError(f"adapter {self.name!r}: output {self.output!r} not among {sorted(outputs)}; set thresholds.options.output")
            return np.asarray(outputs[self.output])
        return np.asarray(next(iter(outputs.values())))

    def decide_batch(self, outputs: Mapping[str, np.ndarray]) -> list[Decision]:
        """One :class:`Decision` per batch item (axis 0 of the selected output)."""
        arr = self.select_output(outputs)
        return [self._decide_one(arr[i]) for i in range(arr.shape[0])]

    def decide(self, outputs: Mapping[str, np.ndarray]) -> Decision:
        """Decision of a batch-of-one output. Raises ModelError when the batch holds more images."""
        arr = self.select_output(outputs)
        if arr.shape[0] != 1:
            raise ModelError(f"adapter {self.name!r}: decide() takes batch 1, got {arr.shape[0]}; use decide_batch()")
        return self._decide_one(arr[0])

    def candidates(self, outputs: Mapping[str, np.ndarray]) -> Decision:
        """All items before the PRIMARY score filter (for operating-point searches), batch 1.

        Filtering the result with :meth:`keep` at threshold ``t`` equals ``with_thresholds({PRIMARY: t})
        .decide(outputs)`` (the primary filter is the last step, or commutes with greedy NMS).
        """
        relaxed = self.with_thresholds({self.PRIMARY: 0.0})
        return relaxed.decide(outputs)

    def keep(self, scores: np.ndarray, t: float) -> np.ndarray:
        """Bool mask of items the PRIMARY threshold ``t`` keeps (its declared comparison)."""
        cmp = self.spec(self.PRIMARY).comparison
        return scores > np.float32(t) if cmp == ">" else scores >= np.float32(t)

    def map_of(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The per-pixel score map ``(H, W) float32`` of a batch-of-one output, for map heads; else None."""
        return None

    def _decide_one(self, arr: np.ndarray) -> Decision:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v:g}" for k, v in self.thresholds().items())
        return f"{type(self).__name__}({vals})"


ADAPTERS: dict[str, type[Adapter]] = {}


def register_adapter(cls: type[A]) -> type[A]:
    """Class decorator: make ``cls`` available as ``thresholds.adapter: <cls.name>``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} must set a class attribute 'name'")
    ADAPTERS[cls.name] = cls
    return cls


def make_adapter(name: str, options: Mapping[str, Any] | None = None) -> Adapter:
    """Build a registered adapter from its name and options (strict: unknown options raise ConfigError)."""
    if name not in ADAPTERS:
        raise ConfigError(f"thresholds.adapter: {name!r} is not registered; use one of {', '.join(sorted(ADAPTERS))} or register_adapter() your own")
    return ADAPTERS[name].from_dict(dict(options or {}), where=f"thresholds.options ({name})")


def _check_unit(where: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where}: {value} must be in [0, 1]")


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class DBTextAdapter(Adapter):
    """PP-OCR DB text detection: probability map ``[N, 1, H, W]`` float32 in [0, 1] -> text polygons.

    ``thresh`` binarizes the map (pixel ``> thresh``); ``box_thresh`` keeps a polygon whose mean
    probability (rapidocr ``box_score_fast``) is ``>= box_thresh``; ``unclip_ratio`` grows polygons
    (Vatti clipping, distance = area x ratio / perimeter). Both thresholds apply to the sigmoid map.
    Polygons are in map (= model input) pixels.
    """

    name: ClassVar[str] = "db_text"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (
        ThresholdSpec("thresh", True, ">", "none", (0.05, 0.95)),
        ThresholdSpec("box_thresh", True, ">=", "mean", (0.05, 0.95)),
    )
    PRIMARY: ClassVar[str] = "box_thresh"

    thresh: float = 0.3
    box_thresh: float = 0.5
    unclip_ratio: float = 1.6
    max_candidates: int = 1000
    use_dilation: bool = True
    score_mode: str = "fast"

    def validate(self) -> None:
        _check_unit("thresholds.thresh", self.thresh)
        _check_unit("thresholds.box_thresh", self.box_thresh)
        if self.unclip_ratio <= 0:
            raise ConfigError(f"thresholds.unclip_ratio: {self.unclip_ratio} must be positive")
        if self.score_mode not in ("fast", "slow"):
            raise ConfigError(f"thresholds.score_mode: {self.score_mode!r} must be 'fast' or 'slow'")

    def _post(self) -> Any:
        from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

        return DBPostProcess(thresh=self.thresh, box_thresh=self.box_thresh, max_candidates=self.max_candidates,
                             unclip_ratio=self.unclip_ratio, score_mode=self.score_mode, use_dilation=self.use_dilation)

    def map_of(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        arr = self.select_output(outputs)
        if arr.ndim != 4 or arr.shape[1] != 1:
            raise ModelError(f"adapter 'db_text': expected a [N, 1, H, W] probability map, got shape {list(arr.shape)}")
        return arr[0, 0]

    def _decide_one(self, arr: np.ndarray) -> Decision:
        if arr.ndim != 3 or arr.shape[0] != 1:
            raise ModelError(f"adapter 'db_text': expected a [N, 1, H, W] probability map, got item shape {list(arr.shape)}")
        prob = np.asarray(arr, dtype=np.float32)
        h, w = prob.shape[1:]
        boxes, scores = self._post()(prob[None], (h, w))
        mask = prob[0] > np.float32(self.thresh)
        if len(scores) == 0:
            return empty_decision(mask)
        return Decision(np.asarray(boxes, np.float32).reshape(-1, 4, 2), np.asarray(scores, np.float32),
                        np.zeros(len(scores), np.int64), mask)


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class ClassifierAdapter(Adapter):
    """Classification: scores ``[N, C]`` (softmax probabilities, or logits with ``softmax: true``).

    One item per image, label = argmax, kept when its score ``> cls_thresh`` (rapidocr's rule).
    ``positive_class`` (>= 0) restricts items to that class (e.g. 1 = '180' for PP-OCR's direction
    classifier: the decision that rotates a crop). The polygon is a dummy unit square.
    """

    name: ClassVar[str] = "classifier"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (ThresholdSpec("cls_thresh", True, ">", "none", (0.5, 0.999)),)
    PRIMARY: ClassVar[str] = "cls_thresh"

    cls_thresh: float = 0.9
    softmax: bool = False
    positive_class: int = -1

    def validate(self) -> None:
        _check_unit("thresholds.cls_thresh", self.cls_thresh)

    def _decide_one(self, arr: np.ndarray) -> Decision:
        p = np.asarray(arr, dtype=np.float32).reshape(-1)
        if self.softmax:
            from scipy.special import softmax

            p = softmax(p).astype(np.float32)
        if self.positive_class >= p.shape[0]:
            raise ConfigError(f"thresholds.positive_class: {self.positive_class} but the model has {p.shape[0]} classes")
        label = int(np.argmax(p))
        if self.positive_class >= 0 and label != self.positive_class:
            return empty_decision()
        item = Decision(np.array([[[0, 0], [1, 0], [1, 1], [0, 1]]], np.float32), p[[label]], np.array([label], np.int64))
        return item.select(self.keep(item.scores, self.cls_thresh))


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class BoxDetectorAdapter(Adapter):
    """YOLO-style boxes ``[N, K, 4+1+C]`` (``cx, cy, w, h`` in input pixels, objectness, class scores).

    ``objectness: false`` reads ``[N, K, 4+C]``. Score = objectness x best class score; items with
    ``score > score_thresh`` go through class-wise greedy NMS at ``iou_thresh`` (OpenCV
    ``cv2.dnn.NMSBoxesBatched``). ``score_thresh`` applies to the output tensor; ``iou_thresh`` does not.
    """

    name: ClassVar[str] = "box_detector"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (
        ThresholdSpec("score_thresh", True, ">", "none", (0.05, 0.95)),
        ThresholdSpec("iou_thresh", False, ">", "none", (0.3, 0.7)),
    )
    PRIMARY: ClassVar[str] = "score_thresh"

    score_thresh: float = 0.25
    iou_thresh: float = 0.45
    objectness: bool = True

    def validate(self) -> None:
        _check_unit("thresholds.score_thresh", self.score_thresh)
        _check_unit("thresholds.iou_thresh", self.iou_thresh)

    def _decide_one(self, arr: np.ndarray) -> Decision:
        import cv2

        a = np.asarray(arr, dtype=np.float32)
        first = 5 if self.objectness else 4
        if a.ndim != 2 or a.shape[1] <= first:
            raise ModelError(f"adapter 'box_detector': expected [N, K, {first}+C] output, got item shape {list(a.shape)}")
        cls = a[:, first:]
        labels = cls.argmax(axis=1)
        scores = cls[np.arange(a.shape[0]), labels] * (a[:, 4] if self.objectness else 1.0)
        keep = self.keep(scores, self.score_thresh)
        if not keep.any():
            return empty_decision()
        b, s, lab = a[keep, :4], scores[keep].astype(np.float32), labels[keep]
        xywh = np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 2], b[:, 3]], axis=1)
        # score_threshold below every kept score: the threshold was applied above with its own comparison
        idx = cv2.dnn.NMSBoxesBatched(xywh.tolist(), s.tolist(), lab.tolist(), float(s.min()) - 1.0, self.iou_thresh)
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        idx = idx[np.argsort(-s[idx], kind="stable")]
        x0, y0, w, h = (xywh[idx, i] for i in range(4))
        poly = np.stack([np.stack([x0, y0], 1), np.stack([x0 + w, y0], 1), np.stack([x0 + w, y0 + h], 1), np.stack([x0, y0 + h], 1)], 1)
        return Decision(poly.astype(np.float32), s[idx], lab[idx].astype(np.int64))


# -- matching ----------------------------------------------------------------------------------


def polygon_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix ``(len(a), len(b)) float64`` of ``(K, P, 2)`` polygons (shapely, invalid -> buffered(0))."""
    import shapely

    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    pa = shapely.make_valid(shapely.polygons(np.asarray(a, np.float64)))
    pb = shapely.make_valid(shapely.polygons(np.asarray(b, np.float64)))
    inter = shapely.area(shapely.intersection(pa[:, None], pb[None, :]))
    union = shapely.area(pa)[:, None] + shapely.area(pb)[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def match_count(pred: np.ndarray, truth: np.ndarray, iou: np.ndarray | None = None, *, pred_labels: Sequence[int] | None = None,
                truth_labels: Sequence[int] | None = None, min_iou: float = 0.5) -> int:
    """Number of one-to-one matches (greedy by IoU, descending; IoU >= ``min_iou``; same label).

    Greedy matching as in PASCAL VOC / COCO evaluation. ``iou`` may be passed precomputed
    (``polygon_iou(pred, truth)``). Returns tp; then fp = len(pred) - tp, fn = len(truth) - tp.
    """
    if len(pred) == 0 or len(truth) == 0:
        return 0
    m = polygon_iou(pred, truth) if iou is None else np.array(iou, dtype=np.float64, copy=True)
    if pred_labels is not None and truth_labels is not None:
        m = np.where(np.asarray(pred_labels)[:, None] == np.asarray(truth_labels)[None, :], m, 0.0)
    order = np.argsort(-m, axis=None, kind="stable")
    used_p: set[int] = set()
    used_t: set[int] = set()
    tp = 0
    for flat in order:
        i, j = divmod(int(flat), m.shape[1])
        if m[i, j] < min_iou:
            break
        if i in used_p or j in used_t:
            continue
        used_p.add(i)
        used_t.add(j)
        tp += 1
    return tp


def f1(tp: float, fp: float, fn: float) -> float:
    """F1 = 2tp / (2tp + fp + fn); 1.0 when there is nothing to find and nothing was found."""
    d = 2 * tp + fp + fn
    return 1.0 if d == 0 else 2 * tp / d

"""A decision: what a task adapter decided on one image (items with scores, labels, geometry, texts)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True, repr=False)
class Decision:
    """Decisions of one image.

    ``polygons``: ``(K, P, 2) float32`` corner points (x, y) in model-input pixels (P = 4 for boxes and
    quads; P = 0 for items without geometry, e.g. a class); ``scores``: ``(K,) float32``; ``labels``:
    ``(K,) int64`` class ids; ``mask``: ``(H, W) bool`` binarized map for map heads, else None;
    ``texts``: one string per item for recognizers, else None. ``top``: the item before the score filter
    for single-item tasks (classifier's argmax, recognizer's decoded line), so agreement can compare it even
    when the threshold drops it; None for multi-item tasks.
    """

    polygons: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    mask: np.ndarray | None = None
    texts: tuple[str, ...] | None = None
    top: tuple[int, str] | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def select(self, keep: np.ndarray) -> "Decision":
        """Subset of items where ``keep`` (bool ``(K,)``) is true; mask and ``top`` are kept as they are."""
        texts = None if self.texts is None else tuple(t for t, k in zip(self.texts, keep) if k)
        return Decision(self.polygons[keep], self.scores[keep], self.labels[keep], self.mask, texts, self.top)

    def to_json(self, transform: Any = None) -> dict[str, Any]:
        """Small JSON form: polygons as rounded ints (mapped to source-image pixels with ``transform``, a
        :class:`quantkit.note.Transform`), scores to 4 decimals, labels, texts."""
        poly = self.polygons
        if transform is not None and poly.size:
            poly = transform.to_image(poly)
        out: dict[str, Any] = {"polygons": np.rint(poly).astype(int).tolist(), "scores": [round(float(s), 4) for s in self.scores],
                               "labels": [int(v) for v in self.labels]}
        if self.texts is not None:
            out["texts"] = list(self.texts)
        if self.top is not None:
            out["top"] = [int(self.top[0]), str(self.top[1])]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Decision":
        """Inverse of :meth:`to_json` (in the coordinates it was written in; no mask).

        Raises:
            ValueError: the JSON is not a decision.
        """
        try:
            scores = np.asarray(data.get("scores") or [], np.float32).reshape(-1)
            poly = np.asarray(data.get("polygons") or [], np.float32)
            poly = poly.reshape(len(scores), -1, 2) if poly.size else np.zeros((len(scores), 0 if not data.get("polygons") else 4, 2), np.float32)
            labels = np.asarray(data.get("labels") or [0] * len(scores), np.int64).reshape(-1)
            texts = tuple(str(t) for t in data["texts"]) if data.get("texts") is not None else None
            top = (int(data["top"][0]), str(data["top"][1])) if data.get("top") is not None else None
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise ValueError(f"not a decision ({e})") from None
        return cls(poly, scores, labels, None, texts, top)

    def __repr__(self) -> str:
        m = "" if self.mask is None else f", mask={self.mask.shape[1]}x{self.mask.shape[0]}"
        t = "" if self.texts is None else f", texts={list(self.texts)[:3]}"
        return f"Decision({len(self)} items{m}{t})"


def empty_decision(mask: np.ndarray | None = None, points: int = 4, top: tuple[int, str] | None = None) -> Decision:
    """A decision with no items (``points`` corners per polygon)."""
    return Decision(np.zeros((0, points, 2), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), mask,
                    None, top)

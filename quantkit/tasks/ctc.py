"""Sequence recognizers with a CTC head: per-step character probabilities ``[N, T, C]`` -> one text line.

``ctc_text``: greedy CTC decoding (Graves et al., ICML 2006, best-path decoding): argmax per time step, merge
repeats, drop the blank; as rapidocr's ``CTCLabelDecode`` (``rapidocr_onnxruntime/ch_ppocr_rec/utils.py``, a
port of PaddleOCR's ``ppocr/postprocess/rec_postprocess.py``). The line's score is the mean of the max
probabilities of the kept steps (0 when none is kept); the line is kept when ``score >= text_score``
(rapidocr ``main.py``: ``if float(score) >= self.text_score``; ``config.yaml``: ``text_score: 0.5``).

The character list is never built in: it is read from the model's ``metadata_props`` (key ``character_key``,
default ``character``, one character per line, as PaddleOCR's ONNX exports and rapidocr's
``OrtInferSession.get_character_list`` read it) when :meth:`CTCTextAdapter.with_model` is given the model,
or from ``character_file`` (one character per line, UTF-8, PaddleOCR's ``ppocr_keys_v1.txt`` format). Class
indices follow PaddleOCR: the blank at ``blank`` (0 = first, -1 = last), then the characters, then a space
when ``space`` (``use_space_char``).

Agreement with FP32 (on the decoded line before the ``text_score`` filter): exact-string agreement (primary),
character error rate (Levenshtein edits / FP32 characters; lower is better) and line F1 (both keep the line
with the same text). Against ground truth ``labels.text`` (on the line the pipeline outputs, "" when
dropped): exact-string accuracy and character error rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, InputFileError, ModelError
from .base import (
    DecisionTensor,
    MetricSpec,
    Outputs,
    Shapes,
    TaskAdapter,
    ThresholdSpec,
)
from .decision import Decision
from .matching import item_counts
from .registry import register_adapter

EXACT = MetricSpec("exact", "exact text agreement vs FP32", "text_same", "lines",
                   description="share of text lines read exactly as FP32 reads them")
CER = MetricSpec("cer", "character error rate vs FP32", "char_edits", "ref_chars", empty=0.0, higher_is_better=False,
                 description="characters changed, added or lost per character FP32 reads (0 = the same text)")
LINE_F1 = MetricSpec("line_f1", "line F1 vs FP32", "agree_f1_num", "agree_f1_den",
                     description="how often both models keep the line (score above the threshold) with the same text")
EXACT_GT = MetricSpec("exact_accuracy", "exact text accuracy", "gt_same", "gt_lines",
                      description="share of labelled lines read exactly as labelled")
CER_GT = MetricSpec("cer_gt", "character error rate", "gt_edits", "gt_chars", empty=0.0, higher_is_better=False,
                    description="characters changed, added or lost per labelled character")


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions, each cost 1) between two strings.

    Wagner-Fischer dynamic programme, one numpy row per character of ``a``: the insertion chain
    ``cur[j] = min(cur[j-1] + 1, ...)`` is ``min_k<=j (val[k] + j - k)``, a running minimum.
    """
    if not a or not b:
        return len(a) + len(b)
    bb = np.fromiter((ord(c) for c in b), np.int64, len(b))
    idx = np.arange(len(b) + 1)
    prev = idx.copy()
    for i, ca in enumerate(a, 1):
        sub = np.minimum(prev[1:] + 1, prev[:-1] + (bb != ord(ca)))
        val = np.concatenate([[i], sub])
        prev = np.minimum.accumulate(val - idx) + idx
    return int(prev[-1])


def read_characters(path: str | Path) -> list[str]:
    """Characters of a keys file, one per line (UTF-8; a line's trailing newline removed, nothing else).

    Raises:
        InputFileError: the file is missing or empty.
    """
    p = Path(path)
    try:
        lines = p.read_bytes().decode("utf-8").split("\n")
    except FileNotFoundError:
        raise InputFileError(f"{p}: character file not found; set task.options.character_file to the recognizer's keys file") from None
    except UnicodeDecodeError as e:
        raise InputFileError(f"{p}: not UTF-8 ({e.reason} at byte {e.start}); save the keys file as UTF-8") from None
    chars = [line.rstrip("\r") for line in lines]
    if chars and chars[-1] == "":
        chars.pop()
    if not chars:
        raise InputFileError(f"{p}: empty character file")
    return chars


@register_adapter
@dataclasses.dataclass(frozen=True, repr=False)
class CTCTextAdapter(TaskAdapter):
    """CTC text recognizer: ``[N, T, C]`` softmax probabilities (or logits with ``softmax: true``) -> one line.

    See the module docstring for decoding, the character list and the metrics.

    Attributes:
        text_score: a line is kept when the mean probability of its decoded characters is at least this.
        softmax: the output holds logits; apply a softmax over classes first.
        character_file: a file with one character per line (default: the model's ``character_key`` metadata).
        character_key: the ``metadata_props`` key holding the character list (rapidocr: ``character``).
        blank: index of the CTC blank class: 0 (first, PaddleOCR) or -1 (last).
        space: a space class follows the characters (PaddleOCR's ``use_space_char``).
        strip: compare texts without leading and trailing spaces (agreement and accuracy).
    """

    name: ClassVar[str] = "ctc_text"
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = (ThresholdSpec("text_score", True, ">=", "mean", (0.05, 0.95), objective="line_f1"),)
    PRIMARY: ClassVar[str] = "text_score"
    AGREEMENT: ClassVar[tuple[MetricSpec, ...]] = (EXACT, CER, LINE_F1)
    ACCURACY: ClassVar[tuple[MetricSpec, ...]] = (EXACT_GT, CER_GT)
    LABELS: ClassVar[str] = "text"
    SCORES: ClassVar[str] = "probabilities of the decoded characters"
    ITEM: ClassVar[str] = "text line"
    _table: ClassVar[tuple[str, ...] | None] = None
    """The class table (blank, characters, space) once resolved; an instance attribute, not an option."""

    text_score: float = 0.5
    softmax: bool = False
    character_file: str = ""
    character_key: str = "character"
    blank: int = 0
    space: bool = True
    strip: bool = True

    def validate(self) -> None:
        if not 0.0 <= self.text_score <= 1.0:
            raise ConfigError(f"task.options.text_score: {self.text_score} must be in [0, 1]")
        if self.blank not in (0, -1):
            raise ConfigError(f"task.options.blank: {self.blank} must be 0 (first class) or -1 (last class)")

    # -- character list ----------------------------------------------------------------------------------
    def _with_table(self, chars: list[str]) -> CTCTextAdapter:
        table = list(chars) + ([" "] if self.space else [])
        table = ["<blank>", *table] if self.blank == 0 else [*table, "<blank>"]
        new = dataclasses.replace(self)
        object.__setattr__(new, "_table", tuple(table))
        return new

    def with_model(self, model: Any) -> CTCTextAdapter:
        """Resolve the character list: ``character_file`` when set, else the model's ``metadata_props``
        entry ``character_key`` (split into lines as rapidocr does). Without either, :meth:`decide` raises."""
        if self.character_file:
            return self._with_table(read_characters(self.character_file))
        for p in getattr(model, "metadata_props", ()):
            if p.key == self.character_key:
                return self._with_table(p.value.splitlines())
        return self

    def replace(self, **changes: Any) -> CTCTextAdapter:
        new = super().replace(**changes)
        if self._table is not None and not {"character_file", "character_key", "blank", "space"} & set(changes):
            object.__setattr__(new, "_table", self._table)
        return new

    def characters(self) -> tuple[str, ...]:
        """The class table: blank, characters, space (in class-index order).

        Raises:
            ModelError: no character list (the model carries no ``character_key`` metadata and no
                ``character_file`` is set, or :meth:`with_model` was not called).
        """
        if self._table is None and self.character_file:
            object.__setattr__(self, "_table", self._with_table(read_characters(self.character_file))._table)
        if self._table is None:
            raise ModelError(f"task 'ctc_text': no character list; the model has no metadata_props {self.character_key!r} "
                             "(or the adapter was not given the model): set task.options.character_file to its keys file")
        return self._table

    @property
    def blank_index(self) -> int:
        return 0 if self.blank == 0 else len(self.characters()) - 1

    # -- layout ----------------------------------------------------------------------------------------
    def check_outputs(self, shapes: Shapes) -> None:
        name, shape = self._output_shape(shapes)
        declared = "ctc_text [N, T, C] per-step class probabilities"
        if len(shape) != 3 or (isinstance(shape[2], int) and 0 < shape[2] < 3):
            raise self.layout_error(name, shape, declared, "a [N, C] output is a 'classifier'; pick the recognizer's "
                                    "sequence output with task.options.output")
        if self._table is not None and isinstance(shape[2], int) and shape[2] > 0 and shape[2] != len(self._table):
            fix = (f"the character list has {len(self._table)} classes with blank{' and space' if self.space else ''}; "
                   "check character_file/character_key, space and blank")
            if shape[1] == len(self._table):
                fix = "it looks transposed ([N, C, T]); export the recognizer with [N, T, C]"
            raise self.layout_error(name, shape, declared, fix)

    def probabilities(self, outputs: Outputs) -> np.ndarray:
        """``(T, C) float32`` per-step class probabilities of a batch-of-one output."""
        arr = self.select_output(outputs)
        if arr.ndim != 3 or arr.shape[0] != 1:
            raise self.layout_error(self.output or "output 0", list(arr.shape), "ctc_text [1, T, C]", "run one line per inference")
        p = np.asarray(arr[0], np.float32)
        if p.shape[1] != len(self.characters()):
            raise self.layout_error(self.output or "output 0", list(arr.shape), "ctc_text [1, T, C]",
                                    f"C must equal the {len(self.characters())} classes of the character list")
        if self.softmax:
            from scipy.special import softmax

            p = softmax(p, axis=1).astype(np.float32)
        return p

    # -- decisions -------------------------------------------------------------------------------------
    def greedy(self, outputs: Outputs) -> tuple[str, np.ndarray]:
        """Best-path decoding: ``(text, max probabilities of the kept steps (n,) float32)``."""
        p = self.probabilities(outputs)
        idx = p.argmax(axis=1)
        sel = np.ones(len(idx), bool)
        sel[1:] = idx[1:] != idx[:-1]
        sel &= idx != self.blank_index
        table = self.characters()
        return "".join(table[i] for i in idx[sel]), p.max(axis=1)[sel]

    def _decide(self, outputs: Outputs) -> Decision:
        text, probs = self.greedy(outputs)
        score = np.float32(probs.astype(np.float64).mean()) if len(probs) else np.float32(0.0)
        item = Decision(np.zeros((1, 0, 2), np.float32), np.array([score], np.float32), np.zeros(1, np.int64),
                        texts=(text,), top=(0, text))
        return item.select(self.keep(item.scores, self.text_score))

    def histogram_values(self, outputs: Outputs, candidates: Decision | None = None) -> np.ndarray:
        """Max probabilities of the decoded characters (the values ``text_score`` averages)."""
        return self.greedy(outputs)[1].astype(np.float32)

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        name, _ = self._output_shape(shapes)
        return () if self.softmax else (DecisionTensor(name, None, 0, 1, 0.0, 1.0, "character probabilities"),)

    def tensor_value(self, spec: ThresholdSpec, value: float) -> float | None:
        return None if self.softmax else float(value)

    # -- agreement -------------------------------------------------------------------------------------
    def _text(self, d: Decision, kept: bool) -> str:
        """The decoded line (``kept``: only when the score filter kept it); with ``strip``, without leading and
        trailing spaces (the space class PP-OCR appends often ends a line; it is not part of the reading)."""
        if kept:
            t = d.texts[0] if d.texts and len(d) else ""
        else:
            t = d.top[1] if d.top is not None else ""
        return t.strip() if self.strip else t

    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:
        a, b = self._text(ref, False), self._text(got, False)
        both = len(ref) > 0 and len(got) > 0 and self._text(ref, True) == self._text(got, True)
        return {"text_same": float(a == b), "lines": 1.0, "char_edits": float(edit_distance(a, b)), "ref_chars": float(len(a)),
                **item_counts("agree", int(both), len(got), len(ref))}

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        text = (labels or {}).get(self.LABELS)
        if text is None:
            return None
        return Decision(np.zeros((1, 0, 2), np.float32), np.ones(1, np.float32), np.zeros(1, np.int64), texts=(str(text),), top=(0, str(text)))

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        t, g = self._text(truth, False), self._text(got, True)
        return {"gt_same": float(t == g), "gt_lines": 1.0, "gt_edits": float(edit_distance(t, g)), "gt_chars": float(len(t))}

"""The task adapter interface: the one place that knows what a model's outputs mean.

An adapter is a frozen, typed config (:class:`quantkit.config.Config`; ``params.yaml: task``) that

* checks the model's real output shapes against its declared layout (:meth:`TaskAdapter.check_outputs`);
* decodes raw outputs of one image into a :class:`Decision` (:meth:`TaskAdapter.decide`);
* defines agreement with FP32 as additive per-image counts (:meth:`TaskAdapter.agreement`) and the metrics
  computed from them (:attr:`TaskAdapter.AGREEMENT`, the first is the **primary** metric: the report's status
  rule, the fallback's target and bind's floor all use it), and the same against ground truth
  (:meth:`TaskAdapter.accuracy`, :attr:`TaskAdapter.ACCURACY`) where the set carries labels;
* declares its thresholds (:attr:`TaskAdapter.THRESHOLDS`): which output tensor each is compared with, how,
  and which agreement metric a search for it maximises, so binding can put them into that tensor's integer
  domain;
* names the score channels whose quantization matters (:meth:`TaskAdapter.decision_tensors`).

Every metric is a ratio of sums of per-image counts (``sum(num) / sum(den)`` over a set), so it pools over
images the same way everywhere (evaluate, bind, fallback, report, fleet) and bootstraps over images.
evaluate, bind, fallback, report, verify and fleet ask the adapter; none of them computes pixel IoU or
assumes an output is a map. Adapters are registered by name (:func:`register_adapter`) and, for user code,
through the ``quantkit.tasks`` entry-point group (see :func:`make_adapter`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..config import Config
from ..errors import ConfigError, ModelError
from .decision import Decision

log = logging.getLogger(__name__)

Outputs = Mapping[str, np.ndarray]
"""Raw outputs of one inference: ``{output name: array}`` with batch axis 1 (batch of one image)."""
Shapes = Mapping[str, Sequence[Any]]
"""Declared output shapes: ``{output name: [dim, ...]}``, a dim is an int, a symbolic name or None."""


@dataclasses.dataclass(frozen=True)
class ThresholdSpec:
    """How one threshold is used.

    ``on_output``: compared with values of an output tensor (so it has an integer-domain form);
    ``comparison``: ``>`` or ``>=`` (an item is kept when ``value <cmp> threshold``); ``reduction``: ``none``
    (per element) or ``mean`` (mean over a region); ``search``: (low, high) range for operating-point
    searches; ``objective``: the agreement metric (:class:`MetricSpec` name) a ``keep_fp32`` search for this
    threshold maximises.
    """

    name: str
    on_output: bool
    comparison: str = ">"
    reduction: str = "none"
    search: tuple[float, float] = (0.05, 0.95)
    objective: str = ""


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """A metric pooled over a set as ``factor * sum(counts[num]) / sum(counts[den])``.

    ``empty``: its value when the denominator sums to 0 (e.g. nothing to agree on counts as agreement);
    ``higher_is_better``: direction; ``label``: a plain name for reports; ``description``: one sentence for
    a reader who is not an ML engineer.
    """

    name: str
    label: str
    num: str
    den: str
    factor: float = 1.0
    empty: float = 1.0
    higher_is_better: bool = True
    description: str = ""

    def value(self, counts: Mapping[str, Any]) -> Any:
        """The metric from summed counts: a float, or an array when the counts are arrays (one per resample)."""
        num = np.asarray(counts.get(self.num, 0.0), np.float64)
        den = np.asarray(counts.get(self.den, 0.0), np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            v = np.where(den > 0, self.factor * num / np.where(den > 0, den, 1.0), self.empty)
        return float(v) if v.ndim == 0 else v


@dataclasses.dataclass(frozen=True)
class DecisionTensor:
    """Where a task's decisions read a quantized tensor: ``output`` name, channel ``axis`` (of the full
    output, batch axis included; None = the whole tensor) and the channel range ``[start, stop)``, with the
    values' nominal range ``[lo, hi]`` (e.g. 0..1 for sigmoid scores). Used to count how many quantization
    levels the decision really has (a score sharing one scale with pixel coordinates gets a handful)."""

    output: str
    axis: int | None
    start: int
    stop: int
    lo: float = 0.0
    hi: float = 1.0
    what: str = "scores"


T = TypeVar("T", bound="TaskAdapter")


@dataclasses.dataclass(frozen=True)
class TaskAdapter(Config):
    """Base task adapter. ``output``: name of the output tensor the task reads (``""`` = the model's first).

    Subclasses set ``name`` (registry key), ``THRESHOLDS``, ``PRIMARY`` (the threshold that filters items by
    score; operating-point searches move it), ``AGREEMENT`` (primary metric first), ``ACCURACY`` (vs ground
    truth, may be empty), ``LABELS`` (the manifest ``labels`` key holding ground truth, or ""), ``SCORES``
    (what the score histogram shows, in words), and implement :meth:`check_outputs`, :meth:`_decide`,
    :meth:`agreement` and, with labels, :meth:`truth` / :meth:`accuracy`.
    """

    name: ClassVar[str] = ""
    THRESHOLDS: ClassVar[tuple[ThresholdSpec, ...]] = ()
    PRIMARY: ClassVar[str] = ""
    AGREEMENT: ClassVar[tuple[MetricSpec, ...]] = ()
    ACCURACY: ClassVar[tuple[MetricSpec, ...]] = ()
    LABELS: ClassVar[str] = ""
    SCORES: ClassVar[str] = "item scores"
    ITEM: ClassVar[str] = "detection"
    """What one decision item is called in reports (``detection``, ``text region``, ``class``, ``text line``)."""
    DECISION_METRIC: ClassVar[str] = ""
    """The agreement metric computable from decisions alone (no probability map), for comparisons of stored
    decisions (a bundle's golden samples); "" = the primary metric."""

    output: str = ""

    # -- metrics -------------------------------------------------------------------------------------
    @classmethod
    def primary_metric(cls) -> MetricSpec:
        """The agreement metric that decides status, fallback target and bind's floor."""
        return cls.AGREEMENT[0]

    @classmethod
    def decision_metric(cls) -> MetricSpec:
        """The agreement metric a comparison of stored decisions uses (:attr:`DECISION_METRIC`)."""
        return cls.metric(cls.DECISION_METRIC) if cls.DECISION_METRIC else cls.primary_metric()

    @classmethod
    def metric(cls, name: str) -> MetricSpec:
        """An agreement or accuracy metric by name. Raises ConfigError naming the valid ones."""
        for m in (*cls.AGREEMENT, *cls.ACCURACY):
            if m.name == name:
                return m
        raise ConfigError(f"task {cls.name!r} has no metric {name!r}; it has {', '.join(m.name for m in (*cls.AGREEMENT, *cls.ACCURACY))}")

    # -- thresholds ----------------------------------------------------------------------------------
    def thresholds(self) -> dict[str, float]:
        """The current threshold values by name."""
        return {s.name: float(getattr(self, s.name)) for s in self.THRESHOLDS}

    def spec(self, name: str) -> ThresholdSpec:
        for s in self.THRESHOLDS:
            if s.name == name:
                return s
        raise ConfigError(f"task {self.name!r} has no threshold {name!r}; it has {', '.join(s.name for s in self.THRESHOLDS)}")

    def with_thresholds(self: T, values: Mapping[str, float]) -> T:
        """Copy with threshold values replaced (validated). Unknown names raise ConfigError."""
        for k in values:
            self.spec(k)
        return self.replace(**{k: float(v) for k, v in values.items()})

    def options(self) -> dict[str, Any]:
        """Settings that are not thresholds (layout, ``unclip_ratio``, ...), as plain values."""
        names = {s.name for s in self.THRESHOLDS}
        return {k: v for k, v in self.to_dict().items() if k not in names and k != "schema_version"}

    def threshold_tensor(self, spec: ThresholdSpec) -> str:
        """The graph output a threshold is compared with ("" = the model's first output)."""
        return self.output

    def tensor_value(self, spec: ThresholdSpec, value: float) -> float | None:
        """The value on :meth:`threshold_tensor`'s own scale that threshold ``value`` stands for, for its
        integer-domain form: ``value`` itself (default: the tensor holds the scores the threshold compares),
        its logit where the task applies a sigmoid to the tensor, None where no single tensor value
        corresponds (e.g. a softmax over logits): then the threshold stays float only."""
        return float(value)

    def with_model(self: T, model: Any) -> T:
        """This adapter completed from the loaded model (an ``onnx.ModelProto``): what decoding reads from the
        model rather than from options (a CTC recognizer's character list in ``metadata_props``, the input
        size a box decoder scales by). Consumers call it once after loading a model and before
        :meth:`check_outputs` / :meth:`decide` (an FP32 model and its quantized copy carry the same
        metadata). Default: ``self``."""
        return self

    # -- layout --------------------------------------------------------------------------------------
    def check_outputs(self, shapes: Shapes) -> None:
        """Check the model's output shapes against this task's declared layout (called at intake and before
        every run). Raises :class:`ModelError` naming the output, its shape and the declared layout."""

    def check_reference(self, refs: Sequence[Decision]) -> None:
        """Refuse the FP32 model's decisions on a reference set when they show that this task misreads its outputs
        (a box head's raw grid offsets read as pixels); called by ``bind`` and ``demo check``. Default: nothing to
        check. Raises :class:`ModelError` naming the option to set."""

    def select_output(self, outputs: Outputs, name: str | None = None) -> np.ndarray:
        """The array named ``name`` (default: ``output``, or the first output). Raises ModelError when absent."""
        if not outputs:
            raise ModelError(f"task {self.name!r}: the model produced no outputs")
        key = self.output if name is None else name
        if key:
            if key not in outputs:
                raise ModelError(f"task {self.name!r}: output {key!r} not among {sorted(outputs)}; set task.options.output")
            return np.asarray(outputs[key])
        return np.asarray(next(iter(outputs.values())))

    def _output_shape(self, shapes: Shapes, name: str | None = None) -> tuple[str, list[Any]]:
        """``(name, shape)`` of the output this task reads, for :meth:`check_outputs`."""
        if not shapes:
            raise ModelError(f"task {self.name!r}: the model declares no outputs")
        key = self.output if name is None else name
        if key:
            if key not in shapes:
                raise ModelError(f"task {self.name!r}: output {key!r} is not among the model's outputs {sorted(shapes)}; "
                                 "set task.options.output")
            return key, list(shapes[key])
        first = next(iter(shapes))
        return first, list(shapes[first])

    def layout_error(self, name: str, shape: Sequence[Any], declared: str, fix: str) -> ModelError:
        """The one-line refusal for an output that does not fit the declared layout."""
        dims = "x".join(str(d) for d in shape)
        return ModelError(f"task {self.name!r}: output {name!r} has shape [{dims}] but the declared layout is {declared}; {fix}")

    # -- decisions -----------------------------------------------------------------------------------
    def decide(self, outputs: Outputs) -> Decision:
        """Decision of one image (outputs with batch axis 1). Raises ModelError for a batch of more images."""
        return self._decide(outputs)

    def _decide(self, outputs: Outputs) -> Decision:  # pragma: no cover - abstract
        raise NotImplementedError

    def candidates(self, outputs: Outputs) -> Decision:
        """All items before the PRIMARY score filter (for operating-point searches).

        Filtering the result with :meth:`keep` at threshold ``t`` equals ``with_thresholds({PRIMARY: t})
        .decide(outputs)`` (the primary filter is the last step, or commutes with greedy NMS).
        """
        lo = self.spec(self.PRIMARY).search[0]
        return self.with_thresholds({self.PRIMARY: min(0.0, lo)}).decide(outputs)

    def keep(self, scores: np.ndarray, t: float) -> np.ndarray:
        """Bool mask of items the PRIMARY threshold ``t`` keeps (its declared comparison)."""
        cmp = self.spec(self.PRIMARY).comparison
        return scores > np.float32(t) if cmp == ">" else scores >= np.float32(t)

    def histogram_values(self, outputs: Outputs, candidates: Decision | None = None) -> np.ndarray:
        """Values whose distribution the report compares between FP32 and INT8 (``SCORES`` says what they
        are), float32, in [0, 1] where the task's scores are probabilities. Default: candidate item scores."""
        c = self.candidates(outputs) if candidates is None else candidates
        return np.asarray(c.scores, np.float32)

    def near_line_values(self, outputs: Outputs) -> np.ndarray | None:
        """The values this adapter's decisions on one image compare with the PRIMARY threshold, one per decision, on
        the scale of the tensor the threshold's integer form compares against (:meth:`tensor_value`'s units: the
        probability itself, or its logit where the task applies a sigmoid), float64 ``(K,)``. Used for "decisions
        near the line" (:mod:`quantkit.thresholds.near_line`): how many decisions lie within an integer step
        (the tensor's scale) of the bound threshold.

        Default: every candidate item before the PRIMARY filter (:meth:`candidates`: kept and dropped ones are both
        decisions), its score mapped by :meth:`tensor_value`. Returns None when the PRIMARY threshold has no single
        value on its tensor (a softmax over logits, a mean of sigmoid outputs): then there is no integer step to
        measure in.
        """
        spec = self.spec(self.PRIMARY)
        if self.tensor_value(spec, 0.5) is None:
            return None
        scores = np.asarray(self.candidates(outputs).scores, np.float64).reshape(-1)
        mapped = [self.tensor_value(spec, float(v)) for v in scores]
        return np.asarray([np.nan if v is None else v for v in mapped], np.float64)

    def decision_tensors(self, shapes: Shapes) -> tuple[DecisionTensor, ...]:
        """The score channels the decisions read (for the effective-levels check). Default: none."""
        return ()

    def summary(self, decision: Decision) -> dict[str, float]:
        """Per-image scalars for fleet rows: ``n`` items and ``max_score`` (NaN when empty)."""
        return {"n": float(len(decision)), "max_score": float(decision.scores.max()) if len(decision) else float("nan")}

    # -- agreement -------------------------------------------------------------------------------------
    def agreement(self, ref: Decision, got: Decision) -> dict[str, float]:  # pragma: no cover - abstract
        """Additive counts of ``got``'s agreement with ``ref`` (FP32) on one image, keyed as AGREEMENT's
        ``num``/``den`` name them."""
        raise NotImplementedError

    def truth(self, labels: Mapping[str, Any] | None, transform: Any) -> Decision | None:
        """Ground truth of one image from its manifest ``labels`` (image pixels; ``transform`` maps them into
        model-input pixels), or None when the image carries none for this task."""
        return None

    def accuracy(self, truth: Decision, got: Decision) -> dict[str, float]:
        """Additive counts of ``got`` against ground truth, keyed as ACCURACY's ``num``/``den`` name them."""
        return {}

    def sweep(self, name: str, grid: np.ndarray, refs: Sequence[Decision | None], outputs: Sequence[Outputs],
              truth: bool = False) -> dict[str, np.ndarray]:
        """Counts ``{key: (N images, C candidates)}`` of agreement (or, with ``truth``, accuracy against
        ``refs`` = ground truth) when threshold ``name`` takes each value of ``grid`` (other thresholds as set).

        Default: for the PRIMARY threshold, the candidates are decoded once per image and filtered per value;
        for another threshold the adapter is re-run per value.
        """
        count = self.accuracy if truth else self.agreement
        rows: list[list[dict[str, float]]] = []
        if name == self.PRIMARY:
            for ref, out in zip(refs, outputs):
                c = self.candidates(out)
                rows.append([count(ref, c.select(self.keep(c.scores, float(t)))) if ref is not None else {} for t in grid])
        else:
            variants = [self.with_thresholds({name: float(t)}) for t in grid]
            for ref, out in zip(refs, outputs):
                rows.append([count(ref, v.decide(out)) if ref is not None else {} for v in variants])
        keys = sorted({k for r in rows for d in r for k in d})
        return {k: np.array([[d.get(k, 0.0) for d in r] for r in rows], np.float64).reshape(len(rows), len(grid)) for k in keys}

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v:g}" for k, v in self.thresholds().items())
        return f"{type(self).__name__}({vals})"

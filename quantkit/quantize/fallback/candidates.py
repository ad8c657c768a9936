"""Candidates: build a model with some nodes promoted, and score it against cached FP32 outputs.

* :class:`ReferenceData`: each reference set's inputs and the FP32 model's outputs on them, computed once.
* :class:`Scorer`: runs a candidate over the reference sets, worst set first, and (``early_stop``) stops as
  soon as the candidate is proven below the target: after a whole set below it, or within a set when the
  metric's ``upper_bound`` (:mod:`.metric`) already is.
* :class:`Builder`: re-quantizes the float model with ``kept`` promoted from the base record's calibrated
  ranges (no calibration images are read again; ORT's ``quantize_static`` runs on cached ranges,
  :func:`quantkit.quantize.engine.write_static` with a record, as ``quantkit record replay`` does).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.fallback import Round
from ...artifacts.record import CalibrationRecord, SetRef
from ...errors import ConfigError
from ...runner import OrtRunner
from ..config import StaticQuantConfig, TensorOverride
from .graph import nodes_of_tensors, promote_tensors, transitions
from .metric import Metric, Outputs

log = logging.getLogger(__name__)

#: Images between two ``upper_bound`` checks within a set (each check re-reads the set's outputs so far).
BOUND_EVERY = 4


@dataclasses.dataclass
class ReferenceData:
    """Inputs (``feeds[s][i]``: the model input array of image ``i`` of set ``s``) and FP32 outputs
    (``fp32[s][i]``: ``{output name: array}``) of every reference set; ``sets``: what was read
    (``count``: images used); ``files[s][i]`` / ``shas[s][i]``: the image's manifest path and content hash."""

    input_name: str
    sets: list[SetRef]
    feeds: list[list[np.ndarray]]
    fp32: list[list[Outputs]]
    files: list[list[str]] = dataclasses.field(default_factory=list)
    shas: list[list[str]] = dataclasses.field(default_factory=list)

    @property
    def images(self) -> int:
        return sum(len(f) for f in self.feeds)

    def subset(self, keep: Sequence[Sequence[int]]) -> ReferenceData:
        """The same sets with only images ``keep[s]`` (indices into set ``s``, in that order)."""
        def pick(rows: list[list[Any]]) -> list[list[Any]]:
            return [[row[i] for i in idx] for row, idx in zip(rows, keep)] if rows else []

        return ReferenceData(self.input_name, list(self.sets), pick(self.feeds), pick(self.fp32), pick(self.files), pick(self.shas))


def load_references(reference_sets: Sequence[Any], note: Any, fp32_model: Any, max_images: int | None) -> ReferenceData:
    """Read each set (folder or :class:`~quantkit.calibset.CalibrationSet`) through the note's preprocessing
    and run the FP32 model on it once.

    Raises:
        ConfigError: no set, or two sets with one name (results are reported per set name).
    """
    from ...calibset import CalibrationSet, CalibrationSetReader

    items = list(reference_sets)
    if not items:
        raise ConfigError("fallback reference_set: give at least one reference set folder")
    sets = [CalibrationSet.load(r, verify=True) if not isinstance(r, CalibrationSet) else r for r in items]
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise ConfigError(f"fallback reference sets: names must differ to report them apart (got {', '.join(names)})")
    name = note.preprocessing.input_name
    refs = ReferenceData(name, [], [], [])
    with OrtRunner(fp32_model, graph_optimization_level="all", name="fp32") as fp:
        for s in sets:
            reader = CalibrationSetReader(s, note.preprocessing)
            if max_images:
                reader.set_range(0, min(max_images, len(reader)))
            batches = list(reader.iter_batches())
            xs = [x for _, x in batches]
            refs.feeds.append(xs)
            refs.files.append([e[0].file for e, _ in batches])
            refs.shas.append([e[0].sha256 for e, _ in batches])
            refs.fp32.append([fp.infer({name: x}) for x in xs])
            refs.sets.append(SetRef(path=str(s.root), set_id=s.set_id, name=s.name, camera=s.camera, lighting=s.lighting, count=len(xs)))
    return refs


@dataclasses.dataclass(frozen=True)
class Score:
    """A candidate's score: ``metric`` (the worst set, or a bound proving a miss when not ``complete``),
    ``worst_set``, ``per_set`` (sets run to the end) and ``images`` run."""

    metric: float
    worst_set: str
    per_set: dict[str, float]
    complete: bool
    images: int


def _finite(value: float) -> float:
    v = float(value)
    if not np.isfinite(v):
        raise ConfigError(f"fallback metric returned {v}; make it finite for every output (e.g. guard divisions by zero)")
    return v


class Scorer:
    """Scores candidate models against :class:`ReferenceData` with ``metric`` (see the module docstring)."""

    def __init__(self, refs: ReferenceData, metric: Metric, target: float, *, early_stop: bool) -> None:
        self.refs, self.metric, self.target, self.early_stop = refs, metric, target, early_stop
        self._last: dict[int, float] = {}
        self._bound = getattr(metric, "upper_bound", None) if early_stop else None

    def _order(self) -> list[int]:
        return sorted(range(len(self.refs.sets)), key=lambda s: (self._last.get(s, -np.inf), s))

    def score(self, model: Path | bytes, *, full: bool = False) -> Score:
        """Run ``model`` (path or bytes) over the sets; ``full``: never stop early."""
        stop = self.early_stop and not full
        per: dict[str, float] = {}
        seen = 0
        with OrtRunner(model, graph_optimization_level="all", name="candidate") as r:
            for s in self._order():
                name, ref, got = self.refs.sets[s].name, self.refs.fp32[s], []
                for i, x in enumerate(self.refs.feeds[s]):
                    got.append(r.infer({self.refs.input_name: x}))
                    seen += 1
                    if stop and self._bound is not None and (i + 1) % BOUND_EVERY == 0 and i + 1 < len(ref):
                        ub = _finite(self._bound(ref, got))
                        if ub < self.target:
                            return Score(ub, name, per, False, seen)
                m = _finite(self.metric(ref, got))
                per[name] = m
                self._last[s] = m
                if stop and m < self.target and len(per) < len(self.refs.sets):
                    return Score(m, name, per, False, seen)
        worst = min(per, key=lambda k: (per[k], k))
        return Score(per[worst], worst, per, True, seen)


class Builder:
    """Writes candidate models: the float ``model`` (with its node names) quantized with ``config`` and
    ``kept`` promoted, from ``base``'s calibrated ranges, into numbered folders under ``workdir``."""

    def __init__(self, model: Any, model_path: Path, note: Any, config: StaticQuantConfig, base: CalibrationRecord,
                 strategy: str, workdir: Path, exact: Any = None) -> None:
        self.model, self.model_path, self.note, self.config, self.base = model, model_path, note, config, base
        self.strategy, self.workdir = strategy, workdir
        self.exact = exact if exact is not None and exact is not model else None
        self.count = 0

    def float_model(self, kept: Sequence[str]) -> Any:
        """``model`` with the float-kept nodes' inputs taken from ``exact`` (their untuned float parameters)."""
        if self.exact is None or self.strategy != "float" or not kept:
            return self.model
        want = set(kept)
        exact = {n.name: n for n in self.exact.graph.node if n.name in want}
        changed = [n for n in self.model.graph.node if n.name in exact and list(n.input) != list(exact[n.name].input)]
        if not changed:
            return self.model
        m = type(self.model)()
        m.CopyFrom(self.model)
        have = {i.name for i in m.graph.initializer}
        inits = {i.name: i for i in self.exact.graph.initializer}
        for n in m.graph.node:
            if n.name in exact and list(n.input) != list(exact[n.name].input):
                del n.input[:]
                n.input.extend(exact[n.name].input)
                for t in n.input:
                    if t in inits and t not in have:
                        m.graph.initializer.append(inits[t])
                        have.add(t)
        return m

    def config_for(self, kept: Sequence[str], units: str) -> StaticQuantConfig:
        """The quantization config with ``kept`` promoted; ``units``: ``nodes`` or ``tensors``."""
        c = self.config
        if self.strategy == "int16":
            tensors = promote_tensors(self.model, kept) if units == "nodes" else list(kept)
            ov = dict(c.tensor_overrides)
            # keep a user's range shaping (rmin/rmax, symmetric ...) for the tensor, only widen its type
            ov.update({t: ov[t].replace(quant_type="uint16") if t in ov else TensorOverride(quant_type="uint16") for t in tensors})
            return c.replace(tensor_overrides={k: v.to_dict() for k, v in ov.items()})
        excl = set(c.nodes_to_exclude) | set(kept if units == "nodes" else nodes_of_tensors(self.model, kept))
        return c.replace(nodes_to_exclude=sorted(excl))

    def build(self, kept: Sequence[str], units: str) -> tuple[Path, CalibrationRecord]:
        from ..engine import RangeSource, write_static

        self.count += 1
        d = self.workdir / f"candidate{self.count:03d}"
        d.mkdir(parents=True)
        nodes = kept if units == "nodes" else nodes_of_tensors(self.model, kept)
        rec = write_static(self.float_model(nodes), self.model_path, self.note, self.config_for(kept, units),
                           RangeSource(record=self.base, replay_scales=False), d)
        return d, rec


@dataclasses.dataclass
class Measured:
    """A measured candidate: its round, folder and record."""

    round: Round
    folder: Path
    record: CalibrationRecord


class Prober:
    """The search's probe (:data:`.search.Probe`): builds, scores and remembers candidates by their kept set."""

    def __init__(self, builder: Builder, scorer: Scorer, units: str, on_round: Any = None) -> None:
        self.builder, self.scorer, self.units, self.on_round = builder, scorer, units, on_round
        self.seen: dict[tuple[str, ...], Measured] = {}
        self.rounds: list[Round] = []

    def __call__(self, kept: Sequence[str], info: Mapping[str, Any], *, full: bool = False) -> Round:
        """The round of ``kept`` (measured now unless seen before); ``full``: score every image."""
        key = tuple(kept)
        if key not in self.seen:
            t0 = time.perf_counter()
            folder, rec = self.builder.build(kept, self.units)
            s = self.scorer.score(folder / "model_int8.onnx", full=full)
            edges = transitions(self.builder.model, kept if self.units == "nodes" else nodes_of_tensors(self.builder.model, kept))
            rnd = Round(index=len(self.rounds), kept=len(kept), metric=s.metric, worst_set=s.worst_set, met=s.complete and s.metric >= self.scorer.target,
                        complete=s.complete, per_set=s.per_set, window=tuple(info["window"]) if "window" in info else None,
                        pruned=tuple(info["pruned"]) if "pruned" in info else None, transitions=edges, images=s.images,
                        seconds=round(time.perf_counter() - t0, 3), family=str(info.get("family", "")))
            self.rounds.append(rnd)
            self.seen[key] = Measured(rnd, folder, rec)
            log.info("fallback round %d: %d %s promoted %s-> %s %.4f on %s (%s, %d images, %.1f s)", rnd.index, len(kept), self.units,
                     f"{info} " if info else "", "metric" if s.complete else "bound", s.metric, s.worst_set,
                     "met" if rnd.met else "missed", s.images, rnd.seconds)
            if self.on_round is not None:
                self.on_round()
        return self.seen[key].round

    def annotate(self, kept: Sequence[str], **fields: Any) -> None:
        """Set ``fields`` on the round of ``kept`` (measured before), in :attr:`rounds` and :attr:`seen` alike."""
        m = self.seen[tuple(kept)]
        r = dataclasses.replace(m.round, **fields)
        self.rounds[m.round.index] = r
        self.seen[tuple(kept)] = dataclasses.replace(m, round=r)

    def key_of(self, measured: Measured) -> tuple[str, ...]:
        """The kept set of a measured candidate."""
        return next(k for k, v in self.seen.items() if v is measured)


__all__ = ["Builder", "Measured", "Prober", "ReferenceData", "Score", "Scorer", "load_references"]

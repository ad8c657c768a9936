""":func:`nncf_accuracy_control`: NNCF's ``quantize_with_accuracy_control`` as a peer of :func:`.run.precision_fallback`:
the same inputs (intake, :class:`FallbackConfig`, reference sets, the task's agreement metric) and the same three files
(``model_int8.onnx``, ``record.json``, ``fallback.json``), with NNCF choosing what goes back to float.

NNCF quantizes the model as ``quantize.engine: nncf`` does (:mod:`quantkit.quantize.nncf_engine`), then measures
it with a validation function and, while the drop exceeds ``max_drop``, ranks groups of quantizers by how much
removing each recovers and removes them in that order (``QuantizationAccuracyRestorer``, NNCF 3.4). quantkit
gives it:

* the validation function: the task's agreement metric (:func:`.metric.agreement_metric`, the fallback's) of the
  model's outputs (ONNX Runtime, level ``all``, as the fallback's :class:`~.candidates.Scorer` runs candidates)
  against FP32's on each reference set, the *worst set* as the value (what the fallback's target is about), and each
  image's own value for NNCF's ranking. FP32 against itself is 1.0, so the drop NNCF computes (absolute) is
  ``1 - worst-set agreement``;
* ``max_drop = 1 - fallback.target``; the validation images: the first ``fallback.max_reference_images`` of each
  reference set; one ranking worker (the ranking and so the result do not depend on thread timing).

Of :class:`FallbackConfig`, ``target``, ``max_reference_images``, ``timings``, ``latency`` and ``fail_if_slower`` apply;
``strategy: int16`` is refused (NNCF returns layers to float only); ``recovery`` and the search's own fields
(``search``, ``step``, ``max_kept``, ``prune``, ``transition_cost``, ``early_stop``) are quantkit's search, not NNCF's:
set to anything but their defaults they are named in a warning and not applied. ``fallback.json``: ``search``
``nncf-accuracy-control``; ``metric_before`` is NNCF's fully quantized model (its ``intermediate_model``) and
``kept`` the nodes whose quantizers NNCF removed, in graph order; ``rounds`` holds those two models.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._io import atomic_output_dir, sha256_bytes, sha256_file
from ..._overwrite import check_output_dir, set_folder
from ...artifacts.fallback import FallbackResult, KeptNode, Round
from ...calibset import CalibrationSetReader
from ...errors import ConfigError
from ...modelio import check_one_image_batch, opset_of
from ...progress import Ticker
from ...runner import OrtRunner
from ..config import StaticQuantConfig
from ..files import MODEL_FILE, RECORD_FILE, load_intake, load_set, set_ref
from ..nncf_engine import (
    CalibrationItems,
    call_nncf,
    nncf_arguments,
    nncf_record,
    prepare,
    require_nncf,
    write_nncf_model,
)
from .candidates import ReferenceData, Scorer, load_references
from .config import FallbackConfig
from .graph import islands, transitions
from .metric import Metric, agreement_metric, describe
from .run import _latency
from ..._io import scratch_dir

log = logging.getLogger(__name__)

SEARCH = "nncf-accuracy-control"
"""``fallback.json``'s ``search`` for a result of :func:`nncf_accuracy_control`."""

#: FallbackConfig fields of quantkit's own search, which NNCF's accuracy control does not use.
NOT_APPLIED = ("search", "step", "max_kept", "prune", "transition_cost", "early_stop", "recovery")


def _key(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


class Validation:
    """NNCF's validation function over :class:`ReferenceData`: ``(worst-set metric, per-item metrics)`` of a model
    on the items it is given, each item found among the reference images by the digest of its input array."""

    def __init__(self, refs: ReferenceData, metric: Metric, ticker: Ticker | None = None) -> None:
        self.refs, self.metric = refs, metric
        self.where = {_key(x): (s, i) for s, xs in enumerate(refs.feeds) for i, x in enumerate(xs)}
        self.calls = 0
        self.ticker = ticker  # every image validated counts (NNCF calls this many times, on all or some images)

    def items(self) -> list[dict[str, np.ndarray]]:
        """Every reference image as an NNCF data item, set after set."""
        return [{self.refs.input_name: x} for xs in self.refs.feeds for x in xs]

    def __call__(self, model: Any, items: Any) -> tuple[float, list[float]]:
        self.calls += 1
        per_set: dict[int, tuple[list[Any], list[Any]]] = {}
        each = []
        with OrtRunner(model.SerializeToString(), graph_optimization_level="all", name="nncf-candidate") as r:
            for item in items:
                x = item[self.refs.input_name]
                s, i = self.where[_key(x)]
                got, ref = r.infer({self.refs.input_name: x}), self.refs.fp32[s][i]
                refs, gots = per_set.setdefault(s, ([], []))
                refs.append(ref)
                gots.append(got)
                each.append(float(self.metric([ref], [got])))
                if self.ticker is not None:
                    self.ticker.update()
        worst = min(float(self.metric(a, b)) for a, b in per_set.values())
        return worst, each


def _not_applied(config: FallbackConfig) -> list[str]:
    default = FallbackConfig()
    return [f for f in NOT_APPLIED if getattr(config, f) != getattr(default, f)]


def _quantized_nodes(model: Any) -> set[str]:
    """Nodes (not Q/DQ) reading a DequantizeLinear output: those a quantizer feeds."""
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return {n.name for n in model.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and dq & set(n.input)}


def nncf_accuracy_control(intake: str | Path, config: FallbackConfig, quantize_config: StaticQuantConfig, *,
                          reference_sets: Sequence[Any], calibration_set: Any, out: str | Path, metric: Metric | None = None,
                          deployed: str | Path | None = None) -> FallbackResult:
    """NNCF's ``quantize_with_accuracy_control`` on the intake model until the worst reference set's agreement with
    FP32 reaches ``config.target`` (the module docstring gives what NNCF is given and what is written).

    Args:
        quantize_config: ``engine: nncf`` (how NNCF quantizes). calibration_set: the images NNCF calibrates on.
        metric: the agreement metric (default :func:`.metric.agreement_metric`, the demo's pixel IoU at 0.3).
        deployed: a deployed ``model_int8.onnx`` (or its folder) timed beside the result.

    Returns:
        the :class:`FallbackResult` written to ``out/fallback.json`` beside ``model_int8.onnx`` and ``record.json``.

    Raises:
        ConfigError: ``quantize_config`` is not NNCF's, ``strategy: int16``, or no calibration set.
        MissingExtraError: nncf is not installed. ModelError: NNCF refused the model.
        InputFileError: ``out`` is, holds or lies inside an input, or is a folder another command wrote.
    """
    import onnx

    from ...decision import AgreementPolicy

    t0 = time.perf_counter()
    config = config.with_target(AgreementPolicy().fallback_target)  # no target stated: the default green line
    if quantize_config.engine != "nncf":
        raise ConfigError("quantize.engine: NNCF's accuracy control quantizes with NNCF; set engine: nncf (and placement: nncf)")
    if config.strategy != "float":
        raise ConfigError(f"fallback.strategy: {config.strategy} is not something NNCF's accuracy control does (it returns layers to float); "
                          "set strategy: float, or use engine: ort")
    if calibration_set is None:
        raise ConfigError("fallback: NNCF's accuracy control quantizes from scratch; pass --calibration-set DIR")
    ignored = _not_applied(config)
    if ignored:
        log.warning("fallback.%s: quantkit's own search settings; NNCF's accuracy control does not apply them", ", fallback.".join(ignored))
    inputs = [intake, deployed, *(set_folder(s) for s in [*reference_sets, calibration_set])]
    check_output_dir(out, "fallback", inputs=inputs)  # now, not after the search
    require_nncf("quantkit fallback with quantize.engine: nncf")
    metric = metric or agreement_metric()
    model_path, model0, note = load_intake(intake)
    check_one_image_batch(model0, note.preprocessing.input_name, model_path, batch_axis=note.preprocessing.batch_axis)
    prepared = prepare(model0)
    named = {n.name for n in model0.graph.node if n.name}
    renamed = sum(1 for n in prepared.graph.node if n.name not in named)
    refs = load_references(reference_sets, note, model_path, config.max_reference_images)
    cset = load_set(calibration_set)
    reader = CalibrationSetReader(cset, note.preprocessing, batch_size=1)
    args = nncf_arguments(quantize_config, prepared, len(reader))
    reader.set_range(0, args.subset_size)
    ticker = Ticker(desc=f"nncf accuracy control ({sum(len(x) for x in refs.feeds)} reference images a full validation)", unit="img")
    validation = Validation(refs, metric, ticker)
    scorer = Scorer(refs, metric, config.target, early_stop=False)
    digest = sha256_file(model_path)
    with scratch_dir("nncf-ac") as work_s:
        work = Path(work_s)

        def run(n: Any) -> Any:
            restorer = n.AdvancedAccuracyRestorerParameters(intermediate_model_dir=str(work), num_ranking_workers=1)
            return n.quantize_with_accuracy_control(
                prepared, n.Dataset(CalibrationItems(reader, note.preprocessing.input_name)), n.Dataset(validation.items()), validation,
                max_drop=1.0 - config.target, drop_type=n.DropType.ABSOLUTE, advanced_accuracy_restorer_parameters=restorer, **args.kwargs(n))

        with ticker:
            final = call_nncf(run, model_path)
        base = onnx.load(str(work / "intermediate_model.onnx"))
        (work / "base").mkdir()
        (work / "final").mkdir()
        base, base_data, calib = write_nncf_model(base, note, quantize_config, work / "base")
        final, data, calib_final = write_nncf_model(final, note, quantize_config, work / "final")
        s0, s1 = scorer.score(work / "base" / MODEL_FILE, full=True), scorer.score(work / "final" / MODEL_FILE, full=True)
        t_search = time.perf_counter() - t0
        reverted = _quantized_nodes(base) - _quantized_nodes(final)
        order = [n.name for n in prepared.graph.node]
        index = {n.name: (i, n.op_type) for i, n in enumerate(prepared.graph.node)}
        kept = [n for n in order if n in reverted]
        entries = {"engine": "nncf", "images": args.subset_size, "nncf": args.to_dict(), "validation_calls": validation.calls}
        base_rec = nncf_record(base, prepared, digest, sha256_bytes(base_data), set_ref(cset), quantize_config, opset_of(model0),
                               {**entries, **calib})
        record = nncf_record(final, prepared, digest, sha256_bytes(data), set_ref(cset), quantize_config, opset_of(model0),
                             {**entries, **calib_final, "fallback": {"target": config.target, "metric": describe(metric), "promoted": len(kept),
                                                                     "search": SEARCH, "max_drop": round(1.0 - config.target, 12)}})
        models = {"fp32": model_path, "base": work / "base" / MODEL_FILE, "candidate": work / "final" / MODEL_FILE}
        if deployed is not None:
            models["deployed"] = Path(deployed) / MODEL_FILE if Path(deployed).is_dir() else Path(deployed)
        lat = _latency(config, refs, models) if config.timings else ()
        rounds = tuple(Round(index=i, kept=k, metric=s.metric, worst_set=s.worst_set, met=s.metric >= config.target, per_set=dict(s.per_set),
                             transitions=transitions(prepared, kept[:k]), images=s.images) for i, (k, s) in enumerate(((0, s0), (len(kept), s1))))
        result = FallbackResult(
            met=s1.metric >= config.target, target=config.target, metric=describe(metric), strategy="float", search=SEARCH,
            metric_before=s0.metric, metric_after=s1.metric, metric_before_per_set=dict(s0.per_set), metric_after_per_set=dict(s1.per_set),
            reference_sets=tuple(refs.sets), kept=tuple(KeptNode(name=n, index=index[n][0], op_type=index[n][1],
                                                                 reason="NNCF's accuracy control removed its quantizers") for n in kept),
            islands=tuple(islands(order, kept)), transitions=transitions(prepared, kept), rounds=rounds, latency=lat,
            record_fingerprint=record.fingerprint, base_record_fingerprint=base_rec.fingerprint, model_digest=digest,
            slower_than_fp32=tuple(f"{r.runtime}@{r.threads}" for r in lat if r.candidate_ms >= r.fp32_ms), renamed_nodes=renamed,
            seconds={"search": round(t_search, 1), "total": round(time.perf_counter() - t0, 1)} if config.timings else {})
        with atomic_output_dir(out, command="fallback", inputs=inputs) as tmp:
            (tmp / MODEL_FILE).write_bytes(data)
            record.save(tmp / RECORD_FILE)
            result.save(tmp / FallbackResult.FILENAME)
    return result


__all__ = ["SEARCH", "Validation", "nncf_accuracy_control"]

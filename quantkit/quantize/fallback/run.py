""":func:`precision_fallback`: quantize (or start from a quantized model), recover, search, time, write."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..._io import atomic_output_dir, output_lock, scratch_dir, sha256_file
from ..._overwrite import check_output_dir, set_folder
from ...artifacts.fallback import FallbackResult, KeptNode, LatencyRow
from ...artifacts.record import CalibrationRecord
from ...errors import ConfigError, ModelError
from ...modelio import check_one_image_batch
from ...progress import progress
from ...runtimes.latency import measure_latency
from ..config import StaticQuantConfig
from .candidates import Builder, Prober, ReferenceData, Scorer, load_references
from .choose import Candidate, final_candidate, pick
from .config import FallbackConfig
from .graph import check_names, islands, named_copy, nodes_of_tensors, transitions
from .holdout import figures, measure_sets, split_references
from .metric import Metric, agreement_metric, describe
from .search import (
    MAX_UNITS,
    compute_units,
    prune_window,
    rank_sensitivity,
    sensitivity_search,
    sqnr_search,
    window_family,
    window_rounds,
    window_search,
)

log = logging.getLogger(__name__)

#: Reference images timed per latency run (cycled over the repeats).
LATENCY_IMAGES = 4
#: Search images (the first of each set, spread over the sets) each unit's gain is measured on by ``search: sensitivity``.
SENSITIVITY_IMAGES = 8


def _base(intake: Path, model: Any, model_path: Path, note: Any, digest: str, work: Path, base: str | Path | None,
          quantize_config: StaticQuantConfig | None, calibration_set: Any) -> tuple[Path, CalibrationRecord, StaticQuantConfig]:
    """The 8-bit model the search starts from: ``base`` (a quantize output folder) or a fresh quantization."""
    from ..engine import MODEL_FILE, RangeSource, write_static

    if base is not None:
        if quantize_config is not None:
            raise ConfigError("fallback: give a quantized base folder or a quantization config, not both")
        folder = Path(base)
        rec = CalibrationRecord.load(folder)
        if rec.mode != "static":
            raise ConfigError(f"{folder}: the base must be statically quantized (its record is {rec.mode}); run 'quantkit quantize --calibration-set'")
        if rec.config.get("engine", "ort") != "ort":
            raise ConfigError(f"{folder}: quantized by engine {rec.config['engine']}, whose ranges are not recorded; its fallback is "
                              "NNCF's accuracy control: quantkit fallback --engine nncf --calibration-set DIR (no --base)")
        if rec.model_digest != digest:
            raise ModelError(f"{folder}/record.json: quantized from a float model with digest {rec.model_digest[:12]}, not {intake} "
                             f"({digest[:12]}); quantize {intake} again")
        if not (folder / MODEL_FILE).is_file():
            raise ModelError(f"{folder}: {MODEL_FILE} is missing; re-run 'quantkit quantize'")
        return folder / MODEL_FILE, rec, StaticQuantConfig.from_dict(rec.config, where=f"{folder}/record.json: config")
    if quantize_config is None or calibration_set is None:
        raise ConfigError("fallback: give a quantized base folder (--base) or a calibration set to quantize on")
    d = work / "base"
    d.mkdir()
    rec = write_static(model, model_path, note, quantize_config, RangeSource(calibration_set), d)
    return d / MODEL_FILE, rec, quantize_config


def _calibration_images(rec: CalibrationRecord, calibration_set: Any, note: Any, n: int) -> list[Any]:
    from ...calibset import CalibrationSet, CalibrationSetReader

    src = calibration_set if calibration_set is not None else (rec.calibration_set.path if rec.calibration_set else None)
    if src is None:
        raise ConfigError("fallback.recovery needs calibration images: pass --calibration-set")
    cset = src if isinstance(src, CalibrationSet) else CalibrationSet.load(src, verify=True)
    if rec.calibration_set and cset.set_id != rec.calibration_set.set_id:
        raise ConfigError(f"{cset.root}: set id {cset.set_id[:12]} is not the base record's calibration set {rec.calibration_set.set_id[:12]}; "
                          "give the set the base was calibrated on")
    reader = CalibrationSetReader(cset, note.preprocessing)
    reader.set_range(0, min(n, len(reader)))
    return [x for _, x in reader.iter_batches()]


def _search(config: FallbackConfig, model: Any, names: list[str], probe: Prober, refs: ReferenceData, work: Path,
            base_model: Path, base_rec: CalibrationRecord) -> list[Candidate]:
    """Run the configured search; the candidates that met the target on the search images (empty: none did)."""
    if config.search == "bisect":
        limit = len(names) if config.max_kept is None else min(config.max_kept, len(names))

        def cost(kept: Sequence[str]) -> float:
            return len(kept) + config.transition_cost * transitions(model, kept)

        windows = window_search(names, probe, limit=limit, full_meets=config.strategy == "float" and limit == len(names),
                                narrow=config.prune == 0, cost=cost)
        cands = [Candidate(*prune_window(names, w, probe, blocks=0, cost=cost), w, window_family(w, len(names))) for w in windows]
        if windows and config.prune:
            kept, why = prune_window(names, windows[0], probe, blocks=config.prune, cost=cost)
            cands.append(Candidate(kept, why, windows[0], window_family(windows[0], len(names))))
        return cands
    if config.search == "sensitivity":
        per = -(-SENSITIVITY_IMAGES // max(1, len(refs.feeds)))
        few = refs.subset([list(range(min(per, len(f)))) for f in refs.feeds])
        gain = Prober(probe.builder, Scorer(few, probe.scorer.metric, config.target, early_stop=False), probe.units, on_round=probe.on_round)
        gain.rounds = probe.rounds  # one list of rounds in fallback.json, numbered in the order they ran
        found = sensitivity_search(compute_units(model, names), gain, probe)
        return [] if found is None else [Candidate(found[0], found[1], None, "sensitivity")]
    from ..compare import compare_layers

    fp32_path = work / "float.onnx"
    fp32_path.write_bytes(model.SerializeToString())
    table = compare_layers(fp32_path, base_model, base_rec, [x for f in refs.feeds for x in f])
    order = rank_sensitivity(model, table)
    limit = min(48 if config.max_kept is None else config.max_kept, len(order))
    kept = sqnr_search(order, probe, step=config.step, limit=limit)
    return [] if kept is None else [Candidate(kept, {t: "among the activations whose local SQNR loss ranks highest" for t in kept}, None)]


def _base_holds(probe: Prober, held: ReferenceData, metric: Metric, config: FallbackConfig, stats: dict[str, Any]) -> bool:
    """The all-8-bit model (round 0) missed on the search images: does it meet the target on the held-out ones (every set)?
    Then nothing is promoted: a handful of search images is noise (issue 37: a classifier kept 78 of 127 nodes in float
    although its all-8-bit model met the target on the held-out images)."""
    if not held.images:
        return False
    figures = measure_sets(probe.seen[()].folder / "model_int8.onnx", held, metric, **stats)
    worst = min(v for v, _ in figures.values())
    if worst >= config.target:
        log.info("fallback: the all-8-bit model misses %.4f on the search images but reaches %.4f on the held-out ones; nothing promoted",
                 config.target, worst)
        return True
    return False


def _feeds(refs: ReferenceData) -> list[dict[str, Any]]:
    """The first :data:`LATENCY_IMAGES` reference inputs (a few of each set) as feeds for timing."""
    return [{refs.input_name: x} for f in refs.feeds for x in f[:LATENCY_IMAGES]][:LATENCY_IMAGES]


def _latency(config: FallbackConfig, refs: ReferenceData, models: dict[str, Any]) -> tuple[LatencyRow, ...]:
    timings = measure_latency(models, _feeds(refs), config.latency)
    rows = []
    for rt in config.latency.runtimes:
        for t in config.latency.threads:
            ms = {x.model: x.median_ms for x in timings if x.runtime == rt and x.threads == t}
            dep = ms.get("deployed")
            rows.append(LatencyRow(runtime=rt, threads=t, repeats=config.latency.repeats, fp32_ms=round(ms["fp32"], 3),
                                   base_ms=round(ms["base"], 3), candidate_ms=round(ms["candidate"], 3),
                                   deployed_ms=None if dep is None else round(dep, 3),
                                   speedup_vs_fp32=round(ms["fp32"] / ms["candidate"], 3),
                                   speedup_vs_deployed=None if dep is None else round(dep / ms["candidate"], 3)))
    return tuple(rows)


def precision_fallback(intake: str | Path, config: FallbackConfig, *, reference_sets: Sequence[Any], out: str | Path,
                       base: str | Path | None = None, quantize_config: StaticQuantConfig | None = None,
                       calibration_set: Any = None, metric: Metric | None = None, deployed: str | Path | None = None) -> FallbackResult:
    """Promote the fewest nodes (float or 16 bits) until the metric vs FP32 reaches ``config.target`` on every
    reference set, then time the result against FP32.

    Args:
        intake: intake folder (``model.onnx`` + ``export_note.json``).
        config: :class:`FallbackConfig` (params.yaml ``fallback``).
        reference_sets: set folders or CalibrationSets (e.g. day and night); the worst set counts.
        out: gets ``model_int8.onnx``, ``record.json`` and ``fallback.json`` at once, or nothing.
        base: a quantize output folder to start from (its record's calibrated ranges are reused; no
            calibration image is read again unless recovery needs some). Or instead:
        quantize_config / calibration_set: quantize first with these.
        calibration_set: also the images recovery reads (default: the base record's calibration set).
        metric: :data:`.metric.Metric`; default :func:`.metric.agreement_metric` (pixel IoU at 0.3).
        deployed: the deployed ``model_int8.onnx`` (or its folder), timed beside the result.

    Each reference set is split (:mod:`.holdout`, ``config.holdout``): the search measures candidates on one part
    only; the written figure, and ``met``, come from the other part, which the search never saw.

    Returns:
        the :class:`FallbackResult` written to ``out/fallback.json``. ``out`` holds the candidate that met the
        target on the search images at the lowest cost (or latency, ``config.pick``), or (none met) the one with
        the highest metric; its held-out figure may still miss the target (``met`` false, said so).

    Raises:
        ConfigError, ModelError, CalibrationSetError: bad inputs (one line, naming the file or field); ``out``
            is left as it was.
        InputFileError: ``out`` is, holds or lies inside an input, or is a folder another command wrote.
    """
    from ..engine import MODEL_FILE, RECORD_FILE, load_intake

    from ...decision import AgreementPolicy

    t0 = time.perf_counter()
    config = config.with_target(AgreementPolicy().fallback_target)  # no target stated: the default green line
    inputs = [intake, base, deployed, *(set_folder(s) for s in [*reference_sets, calibration_set])]
    check_output_dir(out, "fallback", inputs=inputs)  # now, not after the search
    with output_lock(out):  # an unwritable or busy --out fails now too
        pass
    metric = metric or agreement_metric()
    model_path, model0, note = load_intake(intake)
    check_one_image_batch(model0, note.preprocessing.input_name, model_path, batch_axis=note.preprocessing.batch_axis)
    model, renamed = named_copy(model0)
    if renamed:
        log.info("fallback: %d unnamed nodes named <op_type>_<index> (graph order)", renamed)
    digest = sha256_file(model_path)
    refs = load_references(reference_sets, note, model_path, config.max_reference_images)
    search_refs, held_refs = split_references(refs, config.holdout, config.seed)
    with scratch_dir("fallback") as work_s:
        work = Path(work_s)
        base_model, base_rec, qconfig = _base(Path(intake), model, model_path, note, digest, work, base, quantize_config, calibration_set)
        scorer = Scorer(search_refs, metric, config.target, early_stop=config.early_stop)
        rec = _recover(config, model, model_path, note, base_model, base_rec, qconfig, calibration_set, scorer, work)
        names = check_names(rec.model)
        units = "tensors" if config.search == "sqnr" else "nodes"
        total = (window_rounds(len(names), config.prune) if config.search == "bisect" else
                 min(MAX_UNITS, len(names)) + 3 + math.ceil(math.log2(min(MAX_UNITS, len(names)) + 1)) if config.search == "sensitivity" else
                 -(-min(48, len(names)) // config.step))
        bar = iter(progress(range(total + 1), total=total + 1, desc="fallback", unit="round"))
        probe = Prober(Builder(rec.model, model_path, note, rec.config, rec.record, config.strategy, work / "rounds", rec.exact), scorer,
                       units, on_round=lambda: next(bar, None))
        r0 = probe([], {}, full=True)
        if rec.steps:  # the last step's model is the one round 0 measured
            rec.steps[-1] = dataclasses.replace(rec.steps[-1], metric_after=r0.metric)
        stats = {"confidence": config.confidence, "resamples": config.bootstrap_resamples, "seed": config.seed}
        cands = [Candidate([], {}, None)] if r0.met or _base_holds(probe, held_refs, metric, config, stats) else \
            _search(config, rec.model, names, probe, search_refs, work, base_model, base_rec)
        for _ in bar:
            pass
        choice = pick(cands, probe, config, model_path, _feeds(search_refs), transitions_of=lambda k: transitions(rec.model, k))
        final, final_score, choice = final_candidate(probe, scorer, choice)
        why, window = choice.why, choice.window
        t_search = time.perf_counter() - t0
        held = held_refs if held_refs.images else search_refs  # holdout 0: the in-sample figure, labelled so
        after = measure_sets(final.folder / MODEL_FILE, held, metric, **stats)
        before = measure_sets(probe.seen[()].folder / MODEL_FILE, held, metric, **stats) if final is not probe.seen[()] else after
        worst = min(after, key=lambda k: (after[k][0], k))
        models = {"fp32": model_path, "base": probe.seen[()].folder / MODEL_FILE, "candidate": final.folder / MODEL_FILE}
        if deployed is not None:
            models["deployed"] = Path(deployed) / MODEL_FILE if Path(deployed).is_dir() else Path(deployed)
        lat = _latency(config, refs, models) if config.timings else ()
        chosen = list(probe.key_of(final))
        promoted = chosen if units == "nodes" else nodes_of_tensors(rec.model, chosen)
        index = {n.name: (i, n.op_type) for i, n in enumerate(rec.model.graph.node)}
        record = dataclasses.replace(final.record, calibration={**final.record.calibration, "recovery": [s.to_dict() for s in rec.steps],
                                                                "fallback": {"target": config.target, "metric": describe(metric), "promoted": len(chosen)}})
        result = FallbackResult(
            met=after[worst][0] >= config.target, target=config.target, metric=describe(metric), strategy=config.strategy,
            search=config.search, metric_before=min(v for v, _ in before.values()), metric_after=after[worst][0],
            metric_before_per_set={k: v for k, (v, _) in before.items()}, metric_after_per_set={k: v for k, (v, _) in after.items()},
            metric_after_ci=after[worst][1], met_on_search=final_score.complete and final_score.metric >= config.target,
            figures=figures(search_refs, held_refs, final_score.per_set, after), holdout=config.holdout, seed=config.seed,
            confidence=config.confidence, window_kind=window_family(window, len(names)) if window else None, reference_sets=tuple(refs.sets),
            kept=tuple(KeptNode(name=n, index=index[n][0] if n in index else -1, op_type=index[n][1] if n in index else "tensor",
                                reason=why.get(n, "")) for n in chosen),
            islands=tuple(islands(names, promoted)), transitions=transitions(rec.model, promoted), rounds=tuple(probe.rounds), latency=lat,
            record_fingerprint=record.fingerprint, base_record_fingerprint=base_rec.fingerprint, model_digest=digest, window=window,
            slower_than_fp32=tuple(f"{r.runtime}@{r.threads}" for r in lat if r.candidate_ms >= r.fp32_ms), recovery=tuple(rec.steps),
            renamed_nodes=renamed, seconds={"search": round(t_search, 1), "total": round(time.perf_counter() - t0, 1)} if config.timings else {})
        if not config.timings:
            result = dataclasses.replace(result, rounds=tuple(dataclasses.replace(r, seconds=0.0) for r in result.rounds))
        with atomic_output_dir(out, command="fallback", inputs=inputs) as tmp:
            (tmp / MODEL_FILE).write_bytes((final.folder / MODEL_FILE).read_bytes())
            record.save(tmp / RECORD_FILE)
            result.save(tmp / FallbackResult.FILENAME)
    return result


def _recover(config: FallbackConfig, model: Any, model_path: Path, note: Any, base_model: Path, base_rec: CalibrationRecord,
             qconfig: StaticQuantConfig, calibration_set: Any, scorer: Scorer, work: Path) -> Any:
    """Apply the recovery techniques; each step but the last is scored here (round 0 scores the last)."""
    from ..recovery.apply import apply_recovery

    rc = config.recovery
    if not rc.any:
        return apply_recovery(model, base_rec, qconfig, rc)
    images = _calibration_images(base_rec, calibration_set, note, rc.images) if rc.needs_images else []
    from ..recovery.apply import STEPS

    last = sum(bool(getattr(rc, name)) for name, _ in STEPS)
    done = []

    def measure(m: Any, r: CalibrationRecord, c: StaticQuantConfig) -> float | None:
        done.append(1)
        if len(done) == last:
            return None
        b = Builder(m, model_path, note, c, r, "float", work / f"recovery{len(done)}")
        return Prober(b, scorer, "nodes")([], {}, full=True).metric

    before = scorer.score(base_model, full=True).metric
    return apply_recovery(model, base_rec, qconfig, rc, images=images, input_name=scorer.refs.input_name, measure=measure, metric_before=before)


__all__ = ["precision_fallback"]

"""One INT8 file per target runtime, chosen by measurement among recipes (params ``targets.<runtime>.recipes``).

No recipe is best for every model and runtime (issue 37, ``docs/benchmarks.md``): NNCF's file agrees with FP32 far
better than ORT's placement on some detector heads and runs well on OpenVINO, but ONNX Runtime does not fuse its Q/DQ
pairs (it ran at 0.58-0.75x ORT's FP32 on two layout detectors); ORT's placement with the decode tail in float fixed
one head and not another. So the main job builds every recipe a target lists from one calibration set and keeps the
one the measurement picks, and the record says which and why.

A recipe name (:func:`parse_recipe`):

* ``<placement>`` (``ort``, ``ort-float-decode``, ``openvino``, ...): the calibrated ranges of the given record (the
  deployed one) with that Q/DQ placement (:func:`quantkit.quantize.reuse.quantize_with_ranges`);
* ``nncf``: NNCF's own file (its range estimators, fast bias correction, its placement) from the record's calibration set;
* ``nncf:<placement>``: NNCF's ranges with one of our placements (ORT's quantizer), so ORT gets NNCF's grids in a file it fuses;
* ``fallback``: built only when no other recipe meets (rule 1 below): the precision fallback
  (:func:`quantkit.quantize.fallback.precision_fallback`, its default bisection of node windows) from the most agreeing file
  faster than float that ORT's quantizer placed, keeping the fewest nodes in float until the file agrees with FP32 within
  the tolerance of the best recipe (and at least the target) on the calibration set's first :data:`FALLBACK_IMAGES`
  images (the search scores with ONNX Runtime, as ``quantkit fallback`` does); it is then judged like the others on the reference images, which its search never saw. On ONNX Runtime a
  float island costs less than NNCF's whole file, which ORT cannot fuse (the PP-OCR detector: 107 float nodes, pixel IoU
  0.955 -> 0.978 at 1.26x FP32, where NNCF's file agreed at 0.987 and ran at 0.83x).

Each file is judged on the target runtime itself, at its deployment settings (:data:`quantkit.runtimes.latency.RUNTIMES`):

* agreement: the task adapter's primary metric against ORT's FP32 decisions on the reference images (the model's
  deployed reference set, never seen by calibration), pooled over them, with a 95 % interval over images
  (:func:`quantkit.quantize.fallback.holdout.measure_sets`: Clopper-Pearson or BCa bootstrap);
* speed: median latency, interleaved with the runtime's float runs (:data:`quantkit.runtimes.latency.FLOAT_RUNS`; the
  best float run is the fastest of them), as ``vs_best_float`` = best float ms / the file's ms.

The choice (:func:`choose`, one rule per row of :data:`RULES`, first that applies):

1. ``meets``: among files faster than the best float run, those whose agreement is at least ``target`` (the report's
   green line) and within ``tolerance`` (0.01) of the best agreement any recipe reached: the fastest; a file whose
   median is within ``noise`` (:data:`NOISE`, 10 %) of that one's and agrees better is taken instead (timings on a
   shared machine move: two files of the same speed measured 15.5 / 15.7 ms on one quiet run and 17.9 / 16.5 ms on
   another, the demo's ddddocr_det with and without its decode tail in float);
2. ``most-agreeing``: none meets both: the most agreeing file that is faster than the best float run;
3. ``no-int8-faster``: no file beats the best float run on this runtime: the most agreeing, and the record says so
   (the report's speed rule then says not to quantize for this runtime).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, QuantkitError

log = logging.getLogger(__name__)

CHOICE_FILE = "choice.json"
"""The choice's record beside the chosen ``model_int8.onnx`` and ``record.json``."""

RULES: tuple[tuple[str, str], ...] = (
    ("meets", "the fastest file that agrees with FP32 at or above the target and within the tolerance of the best recipe"),
    ("most-agreeing", "no file meets both, so the most agreeing file that is faster than the runtime's best float run"),
    ("no-int8-faster", "no INT8 file is faster than the runtime's best float run, so the most agreeing one; this runtime is "
                       "better served by its float model"),
)
"""The choice's rules, in the order :func:`choose` tries them: ``(name, what it picks)``."""


FALLBACK = "fallback"
"""The recipe name of the precision fallback from the best fast file (module docstring)."""
FALLBACK_IMAGES = 16
"""Calibration images the ``fallback`` recipe's search scores candidates on (fewer rounds of a whole set: the search's cost
grows with images x rounds, about 20 rounds)."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A parsed recipe name: ``engine`` makes the ranges (``ort``: the given record's; ``nncf``), ``placement`` places
    the Q/DQ pairs (``nncf`` with engine ``nncf``: NNCF's own file); :data:`FALLBACK` has engine and placement ``fallback``."""

    name: str
    engine: str
    placement: str


def parse_recipe(name: str, where: str = "targets.RUNTIME.recipes") -> Recipe:
    """``ort`` / ``openvino`` / ... (a placement), ``nncf`` or ``nncf:<placement>`` (module docstring).

    Raises:
        ConfigError: an unknown placement or engine, naming ``where``.
    """
    from .placement import PLACEMENTS

    if name == FALLBACK:
        return Recipe(name, FALLBACK, FALLBACK)
    engine, _, placement = name.partition(":") if ":" in name else ("nncf", "", "nncf") if name == "nncf" else ("ort", "", name)
    if engine not in ("ort", "nncf"):
        raise ConfigError(f"{where}: {name!r}: engine {engine!r} is not known; write a placement ({', '.join(sorted(PLACEMENTS))}), nncf, "
                          "nncf:<placement> or fallback")
    if placement not in PLACEMENTS or (engine == "ort" and PLACEMENTS[placement].engine != "ort") or (engine == "nncf" and ":" in name
                                                                                                      and placement == "nncf"):
        ours = sorted(p for p, r in PLACEMENTS.items() if r.engine == "ort")
        raise ConfigError(f"{where}: {name!r} is not a recipe; use a placement ({', '.join(ours)}), nncf, nncf:<placement> or fallback")
    return Recipe(name, engine, placement)


@dataclasses.dataclass(frozen=True)
class RecipeFigure:
    """One recipe's file measured on one runtime: agreement (primary metric, 0..1) over ``images`` reference images with
    its 95 % ``ci`` (None when the metric has no per-image counts), median latency ``median_ms`` (ms per inference) and
    the best float run's (``best_float``: its label, ``best_float_ms``), ``fingerprint`` of its record."""

    name: str
    agreement: float
    ci: tuple[float, float] | None
    images: int
    median_ms: float
    best_float: str
    best_float_ms: float
    fingerprint: str = ""

    @property
    def vs_best_float(self) -> float:
        """Best float ms / this file's ms (> 1: faster than float)."""
        return self.best_float_ms / self.median_ms if self.median_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ci"] = list(self.ci) if self.ci is not None else None
        d["vs_best_float"] = round(self.vs_best_float, 4)
        return d


@dataclasses.dataclass(frozen=True)
class Choice:
    """:func:`choose`'s answer: the recipe ``chosen``, the ``rule`` (a name of :data:`RULES`) and ``reason`` (a sentence
    with the figures)."""

    chosen: str
    rule: str
    reason: str


TOLERANCE = 0.01
"""How far below the best recipe's agreement a file may be and still meet it (:func:`choose`): issue 37's "within 0.01 of
the best engine measured in the same run"; written to choice.json beside the figures."""


NOISE = 0.10
"""Relative latency difference :func:`choose` reads as a tie between files that meet (module docstring, rule 1)."""


def choose(figures: Sequence[RecipeFigure], *, target: float, tolerance: float = TOLERANCE, noise: float = NOISE) -> Choice:
    """The file a runtime gets (module docstring, :data:`RULES`).

    Args:
        figures: one per recipe, all measured on one runtime in one run.
        target: agreement a file must reach (0..1, the report's green line ``report.min_agreement``).
        tolerance: how far below the best recipe's agreement a file may be and still meet it.
        noise: relative latency difference read as a tie (:data:`NOISE`).

    Raises:
        ConfigError: no figures.
    """
    if not figures:
        raise ConfigError("recipes: nothing to choose from; list at least one recipe in targets.RUNTIME.recipes")
    best = max(f.agreement for f in figures)
    faster = [f for f in figures if f.vs_best_float > 1.0]
    meets = [f for f in faster if f.agreement >= target and f.agreement >= best - tolerance - 1e-12]

    def line(f: RecipeFigure) -> str:
        return f"{f.name}: agreement {f.agreement:.3f}, {f.vs_best_float:.2f}x the best float run ({f.best_float})"

    if meets:
        fastest = min(meets, key=lambda f: f.median_ms)
        tied = [f for f in meets if f.median_ms <= fastest.median_ms * (1 + noise)]
        pick = max(tied, key=lambda f: (f.agreement, -f.median_ms))
        return Choice(pick.name, "meets", f"{line(pick)}: the fastest file at or above the target {target:.2f} and within {tolerance:.2f} "
                                          f"of the best agreement measured ({best:.3f})")
    if faster:
        pick = max(faster, key=lambda f: (f.agreement, -f.median_ms))
        return Choice(pick.name, "most-agreeing", f"{line(pick)}: no file faster than float reaches {max(target, best - tolerance):.3f}; "
                                                  "the most agreeing of those faster than float")
    pick = max(figures, key=lambda f: (f.agreement, -f.median_ms))
    return Choice(pick.name, "no-int8-faster", f"{line(pick)}: no INT8 file is faster than this runtime's best float run; the most "
                                               "agreeing one is kept, and the float model serves this runtime better")


def build_recipe(recipe: Recipe, intake: str | Path, ranges: Any, config: Any, calibration_set: Any, out: Path,
                 nncf_file: Path | None = None) -> Any:
    """Write ``recipe``'s file to ``out`` (``model_int8.onnx`` + ``record.json``) and return its record.

    Args:
        ranges: the record whose calibrated ranges the ``ort`` recipes place (the deployed record).
        config: the deployed quantize section (:class:`~quantkit.quantize.config.StaticQuantConfig`); each recipe
            replaces its ``engine`` and ``placement``.
        calibration_set: the set ``ranges`` was calibrated on (NNCF calibrates on it).
        nncf_file: an NNCF output folder already made from the same set and config, reused by ``nncf:<placement>``
            (NNCF runs once per call of :func:`choose_for_runtime`).
    """
    from .engines import quantize
    from .reuse import quantize_with_ranges

    if recipe.engine == "ort":
        return quantize_with_ranges(ranges, intake, config.replace(engine="ort", placement=recipe.placement), out=out)
    nncf_config = config.replace(engine="nncf", placement="nncf")
    if recipe.placement == "nncf":
        return quantize(intake, nncf_config, out=out, calibration_set=calibration_set)
    own = nncf_file if nncf_file is not None else out.parent / f".{out.name}.nncf"
    if nncf_file is None:
        quantize(intake, nncf_config, out=own, calibration_set=calibration_set)
    return quantize_with_ranges(own, intake, nncf_config.replace(engine="ort", placement=recipe.placement), out=out)


def measure_recipes(files: dict[str, Path], fp32: Path, refs: Any, metric: Any, runtime: str, *, threads: int = 0, repeats: int = 7,
                    timing_images: int = 4, fingerprints: dict[str, str] | None = None) -> list[RecipeFigure]:
    """Each file of ``files`` (recipe name -> ``model_int8.onnx``) judged on ``runtime`` (module docstring).

    Args:
        fp32: the intake's float model (timed as the runtime's float runs).
        refs: :class:`~quantkit.quantize.fallback.candidates.ReferenceData` (FP32's outputs on the reference images).
        metric: the task's agreement metric (:func:`quantkit.quantize.fallback.metric.agreement_metric`).
        threads: intra-op threads (0: the runtime's default). repeats: timed runs per file (interleaved, >= 3).
        timing_images: reference images cycled through while timing.

    Raises:
        ConfigError: an unknown runtime or ``repeats`` < 3. ModelError: the runtime cannot load a file.
    """
    from ..runtimes.latency import FLOAT_RUNS, interleaved_latency, runner_factory
    from .fallback.holdout import measure_sets

    make = runner_factory(runtime)
    if repeats < 3:
        raise ConfigError(f"recipes: repeats {repeats} must be >= 3 (a median of fewer runs is noise)")
    agreement: dict[str, tuple[float, tuple[float, float] | None]] = {}
    for k, (name, path) in enumerate(files.items(), 1):
        log.info("recipe %d/%d %s: agreement with FP32 on %s over %d reference images", k, len(files), name, runtime, refs.images)
        per = measure_sets(path, refs, metric, confidence=0.95, resamples=1000, seed=0, runner=lambda m: make(m, threads))
        agreement[name] = pooled(per)
    feeds = [{refs.input_name: x} for xs in refs.feeds for x in xs][:max(1, timing_images)]
    floats = {f"float:{label}": f for label, f in FLOAT_RUNS.get(runtime, {"fp32": make}).items()}
    log.info("timing %d files and %d float runs on %s, interleaved, %d repeats", len(files), len(floats), runtime, repeats)
    timed = interleaved_latency({**files, **{label: fp32 for label in floats}}, feeds, threads=threads, repeats=repeats, runtime=runtime,
                                label_factories=floats)
    best_label = min(floats, key=lambda k: timed[k].median_ms)
    out = []
    for name in files:
        value, ci = agreement[name]
        out.append(RecipeFigure(name, round(value, 6), (round(ci[0], 6), round(ci[1], 6)) if ci else None, refs.images,
                                round(timed[name].median_ms, 3), best_label.split(":", 1)[1], round(timed[best_label].median_ms, 3),
                                (fingerprints or {}).get(name, "")))
    return out


def _fallback_recipe(intake: str | Path, model_path: Path, figures: list[RecipeFigure], records: dict[str, Any], work: Path, cs: Any, refs: Any,
                     metric: Any, runtime: str, *, target: float, threads: int, repeats: int) -> tuple[tuple[RecipeFigure, dict[str, Any]] | None, str]:
    """The ``fallback`` recipe (module docstring): written to ``work/fallback`` and measured on ``runtime``; ``(None, why)`` when
    no file ORT's quantizer placed runs faster than float to start from."""
    from .fallback import FallbackConfig, precision_fallback

    bases = [f for f in figures if f.vs_best_float > 1.0 and records[f.name].config.get("engine", "ort") == "ort"]
    if not bases:
        return None, "no file placed by ORT's quantizer runs faster than float here to start a fallback from"
    base = max(bases, key=lambda f: (f.agreement, -f.median_ms))
    goal = round(min(1.0, max(target, max(f.agreement for f in figures) - TOLERANCE)), 6)
    log.info("recipe fallback: from %s (agreement %.3f) to %.3f on %d images of %s", base.name, base.agreement, goal, FALLBACK_IMAGES, cs.name)
    config = FallbackConfig(target=goal, holdout=0.0, timings=False, fail_if_missed=False, max_reference_images=FALLBACK_IMAGES)
    result = precision_fallback(intake, config, reference_sets=[cs], out=work / FALLBACK, base=work / base.name.replace(":", "_"), metric=metric)
    from .files import RECORD_FILE
    from ..artifacts.record import CalibrationRecord

    records[FALLBACK] = CalibrationRecord.load(work / FALLBACK / RECORD_FILE)
    fig = measure_recipes({FALLBACK: work / FALLBACK / "model_int8.onnx"}, model_path, refs, metric, runtime, threads=threads,
                          repeats=repeats)[0]
    return (dataclasses.replace(fig, fingerprint=records[FALLBACK].fingerprint),
            {"from": base.name, "target": goal, "search_images": sum(s.count for s in result.reference_sets), "kept_in_float": len(result.kept),
             "met_on_search": result.met, "on_search": round(result.metric_after, 6)}), ""


def check_fp32_decides(refs: Any, metric: Any) -> None:
    """Refuse a reference set on which FP32 itself decides nothing through the task adapter (the metric's denominator of FP32
    against itself is 0 on every image): every file would then agree 1.000 with it, a choice made on nothing (a new user's
    trial: a GFL head the box adapter does not decode). Metrics without per-image counts are not checked.

    Raises:
        ConfigError: naming the set, the metric and the fix.
    """
    counts = getattr(metric, "counts", None)
    if counts is None:
        return
    for s, outs in zip(refs.sets, refs.fp32):
        if outs and float(counts(outs, outs).den.sum()) == 0.0:
            raise ConfigError(f"{s.path}: FP32 decides nothing on its {len(outs)} images with {getattr(metric, 'description', 'the task')}, so every "
                              "file would agree 1.000 with it; fix the model's task section (its layout, outputs, thresholds) or use images "
                              "where FP32 finds something")


def pooled(per_set: dict[str, tuple[float, tuple[float, float] | None]]) -> tuple[float, tuple[float, float] | None]:
    """The worst set's ``(agreement, interval)``: a file is only as good as its worst reference set."""
    return min(per_set.values(), key=lambda v: v[0])


def choose_for_runtime(intake: str | Path, ranges: str | Path, calibration_set: Any, reference_sets: Sequence[Any], config: Any, runtime: str,
                       recipes: Sequence[str], metric: Any, *, target: float, out: str | Path, max_images: int = 24, repeats: int = 7,
                       threads: int = 0) -> tuple[Any, dict[str, Any]]:
    """Build every recipe of ``recipes``, judge each on ``runtime`` and write the chosen one to ``out`` (``model_int8.onnx``,
    ``record.json`` and :data:`CHOICE_FILE`), all at once or nothing.

    Args:
        ranges: the deployed record (folder or ``record.json``) whose ranges the ``ort`` recipes place.
        calibration_set: the set ``ranges`` was calibrated on (checked by id); NNCF calibrates on it.
        reference_sets: the sets the files are judged on (the model's deployed reference set), first ``max_images`` of each.
        config: the deployed quantize section (:class:`~quantkit.quantize.config.StaticQuantConfig`).
        target: the agreement a file must reach (``report.min_agreement``).

    Returns:
        ``(chosen record, the choice as written to choice.json)``.

    Raises:
        ConfigError: an unknown recipe or runtime; ``calibration_set`` is not the one ``ranges`` was calibrated on.
    """
    from .._io import atomic_output_dir, atomic_write_json, remove_dead_temps, temp_dir_beside
    from ..artifacts.record import CalibrationRecord
    from ..calibset import CalibrationSet
    from ..runtimes.precision import cpu_label
    from .fallback.candidates import load_references
    from .files import RECORD_FILE, load_intake
    from .reuse import static_record_and_intake

    parsed = [parse_recipe(r, f"targets.{runtime}.recipes") for r in dict.fromkeys(recipes)]
    with_fallback = any(r.engine == FALLBACK for r in parsed)
    parsed = [r for r in parsed if r.engine != FALLBACK]  # built after the others are measured, when none meets
    if not parsed:
        raise ConfigError(f"targets.{runtime}.recipes: fallback starts from another recipe's file; list one before it (ort, nncf:ort, ...)")
    skipped = []
    if any(r.engine == "nncf" for r in parsed) and importlib.util.find_spec("nncf") is None:
        skipped = [{"recipe": r.name, "why": "nncf is not installed here (pip install 'quantkit[nncf]')"} for r in parsed if r.engine == "nncf"]
        parsed = [r for r in parsed if r.engine != "nncf"]
        log.warning("targets.%s.recipes: %s left out: nncf is not installed here (pip install 'quantkit[nncf]')", runtime,
                    ", ".join(s["recipe"] for s in skipped))
        if not parsed:
            raise ConfigError(f"targets.{runtime}.recipes: every recipe needs nncf, which is not installed here; pip install 'quantkit[nncf]' "
                              "or list a placement (ort, openvino, ...)")
    from ..runtimes.latency import runner_factory

    runner_factory(runtime)  # an unknown runtime is one line now, not after the builds
    refsets = [s if isinstance(s, CalibrationSet) else CalibrationSet.load(s, verify=True) for s in reference_sets]  # a missing set too
    rec = static_record_and_intake(ranges, intake, "placed for a target runtime", engines=("ort", "nncf"))[0]
    cs = calibration_set if isinstance(calibration_set, CalibrationSet) else CalibrationSet.load(calibration_set, verify=True)
    if rec.calibration_set is not None and rec.calibration_set.set_id != cs.set_id:
        raise ConfigError(f"{cs.root}: set id {cs.set_id[:12]} is not the deployed record's calibration set ({rec.calibration_set.name}, "
                          f"{rec.calibration_set.set_id[:12]}); pass the set the record was calibrated on, or quantize again")
    model_path, _, note = load_intake(intake)
    refs = load_references(refsets, note, model_path, max_images)
    check_fp32_decides(refs, metric)  # before any build: agreement with nothing is no judgement
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(out)  # what a killed run left beside out
    work = temp_dir_beside(out)
    try:
        records: dict[str, Any] = {}
        nncf_first = sorted(parsed, key=lambda r: r.name != "nncf")  # NNCF's own file first: nncf:<placement> reuses it
        for k, r in enumerate(nncf_first, 1):
            log.info("recipe %d/%d: %s (engine %s, placement %s)", k, len(parsed), r.name, r.engine, r.placement)
            if r.engine == "nncf" and any(x["recipe"] == "nncf" for x in skipped):
                skipped.append({"recipe": r.name, "why": next(x["why"] for x in skipped if x["recipe"] == "nncf")})
                continue
            own = work / "nncf" if "nncf" in records else None
            try:
                records[r.name] = build_recipe(r, intake, ranges, config, cs, work / r.name.replace(":", "_"), nncf_file=own)
            except QuantkitError as e:
                if r.engine != "nncf":
                    raise
                why = f"NNCF could not quantize the model: {e}"  # another engine's limit is not this runtime's: the others still run
                log.warning("targets.%s.recipes: %s left out: %s", runtime, r.name, why)
                skipped.append({"recipe": r.name, "why": why})
        parsed = [r for r in parsed if r.name in records]
        if not parsed:
            raise ConfigError(f"targets.{runtime}.recipes: no recipe could be built ({skipped[0]['why']}); list a placement (ort, openvino, ...)")
        same: dict[str, str] = {}  # a recipe whose file is byte-identical to an earlier one's (no decode tail: ort-float-decode = ort)
        for r in parsed:
            same.setdefault(records[r.name].quantized_model_digest, r.name)
        files = {r.name: work / r.name.replace(":", "_") / "model_int8.onnx" for r in parsed if same[records[r.name].quantized_model_digest] == r.name}
        measured = {f.name: f for f in measure_recipes(files, model_path, refs, metric, runtime, threads=threads, repeats=repeats)}
        figures = [dataclasses.replace(measured[same[records[r.name].quantized_model_digest]], name=r.name,
                                       fingerprint=records[r.name].fingerprint) for r in parsed]
        pick = choose(figures, target=target)
        fallback = None
        if with_fallback:
            if pick.rule == "meets":
                skipped.append({"recipe": FALLBACK, "why": f"not needed: {pick.chosen} meets the target within the tolerance"})
            else:
                fallback, why = _fallback_recipe(intake, model_path, figures, records, work, cs, refs, metric, runtime, target=target,
                                                 threads=threads, repeats=repeats)
                if fallback is None:
                    skipped.append({"recipe": FALLBACK, "why": why})
                else:
                    figures.append(fallback[0])
                    pick = choose(figures, target=target)
        choice = {"runtime": runtime, "chosen": pick.chosen, "rule": pick.rule, "reason": pick.reason, "target": target,
                  "tolerance": TOLERANCE, "metric": getattr(metric, "description", "agreement"), "cpu": cpu_label(), "threads": threads,
                  "reference_sets": [{"name": s.name, "set_id": s.set_id, "images": s.count} for s in refs.sets],
                  "calibration_set": {"name": cs.name, "set_id": cs.set_id}, "figures": [f.to_dict() for f in figures],
                  "skipped": skipped, **({"fallback": fallback[1]} if fallback else {})}
        src = work / pick.chosen.replace(":", "_")
        with atomic_output_dir(out, command="quantize", inputs=[intake, ranges]) as tmp:
            for f in ("model_int8.onnx", RECORD_FILE):
                shutil.copy2(src / f, tmp / f)
            atomic_write_json(tmp / CHOICE_FILE, choice)
        return CalibrationRecord.load(out / RECORD_FILE), choice
    finally:
        shutil.rmtree(work, ignore_errors=True)


__all__ = ["CHOICE_FILE", "FALLBACK", "FALLBACK_IMAGES", "NOISE", "Choice", "check_fp32_decides", "Recipe", "RecipeFigure", "RULES", "TOLERANCE", "build_recipe", "choose", "choose_for_runtime", "measure_recipes", "parse_recipe"]

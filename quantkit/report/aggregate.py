"""Read one model's artifacts (evaluations, drift results, records, threshold sets) into a :class:`ModelReport`.

Only aggregates are read (``summary.json``, the counts in ``per_image.csv``, ``score_hist.json``), so building
costs little next to the inference it summarises. Before anything is combined, the artifacts must name each
other: every evaluation was made with this deployed/candidate record and threshold set and this FP32 model, and
every drift result with this deployed record; a mismatch is refused naming both sides.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any


from .. import metrics as dist
from .._io import read_json
from ..artifacts.drift import DriftResult
from ..artifacts.evaluation import EvalSummary
from ..artifacts.record import CalibrationRecord, scale_diff
from ..artifacts.thresholds import ThresholdSet
from ..errors import BindingMismatchError, InputFileError
from ..pipeline import ORT_TARGET, deployed_files
from ..thresholds.binding import QUANT_MODEL
from ..thresholds.stats import bootstrap_ratio
from .config import ReportConfig
from ..artifacts.verification import DeploymentVerification
from .model import INT8_ROLES, Example, ModelReport, ShiftMetrics, SiteReport
from .paired import PairedDifference, paired_difference
from .verdict import decide_model

log = logging.getLogger(__name__)

VARIANT_ORDER = ("fp32", "deployed", "candidate", "deployed@fp32-thresholds", "candidate@fp32-thresholds")


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """Where one model's report inputs are. ``eval_dir`` holds one folder per site set; ``drift_dir`` one
    ``<site>.json`` per site set; ``fallback``: the candidate's ``fallback.json`` when it came from a fallback."""

    name: str
    eval_dir: Path
    deployed: Path
    deployed_thresholds: Path
    candidate: Path | None = None
    candidate_thresholds: Path | None = None
    drift_dir: Path | None = None
    site_sets: Path | None = None
    verification: Path | None = None
    """The deployed bundle's ``verify.json``; None or a missing file: the report says "not verified"."""
    targets: tuple[tuple[str, Path], ...] = ()
    """``(runtime, folder)`` per target runtime (params ``targets``): ``folder`` holds ``quantize/`` (the deployed record's
    ranges placed for that runtime), ``thresholds.json`` and ``verify.json`` (its bundle verified on that runtime). When
    given, these verifications replace ``verification``."""
    measurements: Path | None = None
    """``reports/machine/<model>/measurements.json`` (``quantkit measure``) when present: the candidate's speed per runtime
    against the deployed file and the runtime's best float run, evidence for the decision (no switch where it is slower)."""

    @classmethod
    def from_work_dir(cls, work: str | Path, *, site_sets: Path | None = None, targets: Sequence[str] = (),
                      measurements: Path | None = None) -> "ModelInputs":
        """The pipeline's layout under one model's work folder: ``eval/``, ``drift/``, ``quantize/{deployed,candidate}``,
        ``thresholds/{deployed,candidate}.json`` (the candidate only when present), and ``targets/<runtime>/`` per runtime of
        ``targets`` (else one ``verify.json``). With an ``onnxruntime`` target, the deployed model is that target's file and
        thresholds (``targets/onnxruntime/quantize``, ``thresholds.json``: the recipe chosen for ONNX Runtime, on which the
        pipeline's evaluate, drift and fleet stages run it)."""
        w = Path(work)
        cand, cand_t = w / "quantize" / "candidate", w / "thresholds" / "candidate.json"
        has_cand = cand.is_dir() and cand_t.is_file()
        dep, dep_t = deployed_files(w, chosen=ORT_TARGET in targets)
        return cls(w.name, w / "eval", dep, dep_t,
                   cand if has_cand else None, cand_t if has_cand else None, w / "drift" if (w / "drift").is_dir() else None, site_sets,
                   None if targets else w / "verify.json", tuple((rt, w / "targets" / rt) for rt in targets), measurements)


def _per_image(path: Path) -> Any:
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise InputFileError(f"{path}: per_image.csv not found; run 'quantkit evaluate' for this site set") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputFileError(f"{path}: not a valid CSV ({str(e).splitlines()[0]}); rerun 'quantkit evaluate'") from None
    missing = [c for c in ("image", "variant", "n_detections") if c not in frame.columns]
    if missing:
        raise InputFileError(f"{path}: column {missing[0]!r} missing; rerun 'quantkit evaluate'")
    if frame.empty:
        raise InputFileError(f"{path}: no rows; rerun 'quantkit evaluate' on a non-empty set")
    return frame


def _ci(frame: Any, variant: str, num: str, den: str, factor: float, empty: float) -> tuple[float, float] | None:
    rows = frame[frame["variant"] == variant]
    if num not in rows or den not in rows or rows.empty:
        return None
    est = bootstrap_ratio(rows[num].fillna(0).to_numpy(float), rows[den].fillna(0).to_numpy(float), resamples=1000, seed=0,
                          confidence=0.95, empty=empty, factor=factor)
    return est.ci


def site_metrics(summary: EvalSummary, frame: Any, hist: dict[str, Any] | None, cfg: ReportConfig, spec: Any) -> list[ShiftMetrics]:
    """One :class:`ShiftMetrics` per variant of an evaluation; ``spec`` is the primary metric's MetricSpec-like
    ``(num, den, factor, empty)``. Variants ``<role>@fp32-thresholds`` are left out when the role's thresholds
    are FP32's (the column would repeat the role's)."""
    fp32 = summary.variants.get("fp32")
    fp32_dpi = fp32.detections_per_image if fp32 else float("nan")
    counts = (hist or {}).get("counts", {})
    out = []
    for v in sorted(summary.variants, key=lambda k: (VARIANT_ORDER.index(k) if k in VARIANT_ORDER else 99, k)):
        role = v.split("@")[0]
        if "@" in v and role in summary.models and summary.models[role].values == summary.models[role].fp32_values:
            continue
        s = summary.variants[v]
        change = (s.detections_per_image - fp32_dpi) / fp32_dpi if fp32_dpi > 0 else (0.0 if s.detections_per_image == fp32_dpi else 1.0)
        d = None
        if v != "fp32" and role in counts and sum(counts.get("fp32", [])) > 0 and sum(counts[role]) > 0:
            d = dist.compare_histograms(hist.get("bin_edges", []), counts["fp32"], counts[role])  # type: ignore[union-attr]
        primary = s.agreement.get(summary.primary_metric)
        status = "green" if v == "fp32" else cfg.status(primary if primary is not None else 0.0, change)
        ci = None if v == "fp32" else _ci(frame, v, *spec)
        out.append(ShiftMetrics(summary.site_set.name, v, s.images, s.detections_per_image, s.alarm_rate, float(change),
                                dict(s.agreement), ci, dict(s.accuracy), d.psi if d else None, d.ks if d else None,
                                d.wasserstein if d else None, d.js if d else None, status))
    return out


def examples(frame: Any, detections: dict[str, Any] | None, primary: str, k: int) -> list[Example]:
    """The ``k`` images where the INT8 variants' mean per-image primary metric is lowest, with their decisions."""
    if k == 0 or primary not in frame:
        return []
    int8 = frame[frame["variant"].isin(INT8_ROLES)].dropna(subset=[primary])
    if int8.empty:
        return []
    worst = int8.groupby("image")[primary].mean().sort_values(kind="stable").head(k)
    images = (detections or {}).get("images", {})
    out = []
    for image in worst.index:
        per = frame[frame["image"] == image].set_index("variant")[primary].dropna().to_dict()
        decs = images.get(image, {})
        out.append(Example(str(image), {v: float(x) for v, x in per.items()},
                           {v: d.get("polygons", []) for v, d in decs.items() if "@" not in v},
                           {v: d["texts"] for v, d in decs.items() if "@" not in v and d.get("texts")}))
    return out


def threshold_table(deployed: ThresholdSet, candidate: ThresholdSet | None) -> list[dict[str, Any]]:
    """Rows ``{name, fp32, deployed, deployed_int, candidate, candidate_int, dtype, tensor, comparison}`` (``*_int``:
    the integer code the INT8 decision compares with)."""
    names = sorted(set(deployed.values) | set(candidate.values if candidate else {}) | set(deployed.fp32_values))
    rows = []
    for n in names:
        dom = deployed.integer_domain.get(n) or (candidate.integer_domain.get(n) if candidate else None)
        rows.append({"name": n, "fp32": deployed.fp32_values.get(n), "deployed": deployed.values.get(n),
                     "deployed_int": deployed.integer_domain[n].decision_value if n in deployed.integer_domain else None,
                     "candidate": candidate.values.get(n) if candidate else None,
                     "candidate_int": candidate.integer_domain[n].decision_value if candidate and n in candidate.integer_domain else None,
                     "dtype": dom.dtype if dom else "", "tensor": dom.tensor if dom else "", "comparison": dom.comparison if dom else "",
                     "scale": dom.scale if dom else None})
    return rows


def scale_moves(deployed: CalibrationRecord, candidate: CalibrationRecord, top: int) -> list[dict[str, Any]]:
    """Tensors whose scales moved most between two records (:func:`quantkit.artifacts.scale_diff`)."""
    df = scale_diff(deployed, candidate)
    df = df[(df["status"] == "both") & df["rel_change"].notna()].head(top)
    return [{"tensor": str(r.name), "role": str(r.role), "deployed_scale": float(r.scale_a), "candidate_scale": float(r.scale_b),
             "ratio": float(r.scale_b / r.scale_a), "log2_ratio": float(r.log2_ratio), "rel_change": float(r.rel_change)}
            for r in df.itertuples(index=False)]


def _thresholds(path: Path, quantized: Path) -> ThresholdSet:
    model = quantized / QUANT_MODEL
    return ThresholdSet.load_bound(path, quantized, model_path=model if model.is_file() else None)


def _check_belongs(summary: EvalSummary, where: Path, roles: dict[str, tuple[CalibrationRecord, ThresholdSet, Path]]) -> None:
    """Refuse an evaluation made with other records or threshold sets than the ones the report is given."""
    for role, (rec, ts, qdir) in roles.items():
        got = summary.models.get(role)
        if got is None:
            raise InputFileError(f"{where}: has no '{role}' evaluation but --{role} {qdir} was given; rerun 'quantkit evaluate' with it")
        if got.record_fingerprint != rec.fingerprint or got.thresholds_fingerprint != ts.fingerprint:
            raise BindingMismatchError(f"{where}: evaluates {role} record {got.record_fingerprint[:12]} / thresholds "
                                       f"{got.thresholds_fingerprint[:12]} but {qdir} is record {rec.fingerprint[:12]} / thresholds "
                                       f"{ts.fingerprint[:12]}; rerun 'quantkit evaluate' (dvc repro) for these models")
        if ts.binding.model_digest != summary.fp32_model_digest:
            raise BindingMismatchError(f"{where}: made with FP32 model {summary.fp32_model_digest[:12]} but {role}'s thresholds are bound "
                                       f"to FP32 model {ts.binding.model_digest[:12]}; rerun 'quantkit evaluate'")


def _drift(path: Path, deployed: CalibrationRecord) -> DriftResult | None:
    if not path.is_file():
        return None
    d = DriftResult.load(path)
    if d.record_fingerprint and d.record_fingerprint != deployed.fingerprint:
        raise BindingMismatchError(f"{path}: measured clipping of record {d.record_fingerprint[:12]} but the deployed record is "
                                   f"{deployed.fingerprint[:12]}; rerun 'quantkit drift' (dvc repro)")
    return d


def _verification(path: Path | None, deployed: CalibrationRecord, thresholds: ThresholdSet) -> DeploymentVerification | None:
    """The deployed bundle's verification, checked to be of this record and threshold set; None when there is none."""
    if path is None or not DeploymentVerification.path_in(path).is_file():
        return None
    v = DeploymentVerification.load(path)
    if v.record_fingerprint != deployed.fingerprint or v.threshold_fingerprint != thresholds.fingerprint:
        raise BindingMismatchError(f"{path}: verifies a bundle of record {v.record_fingerprint[:12]} / thresholds {v.threshold_fingerprint[:12]} "
                                   f"but the deployed model is record {deployed.fingerprint[:12]} / thresholds {thresholds.fingerprint[:12]}; "
                                   "rebuild and verify the bundle (dvc repro)")
    return v


def same_calibration(rec: CalibrationRecord, deployed: CalibrationRecord) -> bool:
    """Whether a target runtime's file comes from the deployed calibration: the deployed record's ranges placed for it
    (``calibration.ranges_from``), or a recipe built from the same calibration set (:mod:`quantkit.quantize.recipes`:
    NNCF's file, NNCF's ranges re-placed; same set id)."""
    if (rec.calibration or {}).get("ranges_from") == deployed.fingerprint:
        return True
    mine, theirs = rec.calibration_set, deployed.calibration_set
    return mine is not None and theirs is not None and mine.set_id == theirs.set_id


def _target_verifications(targets: Sequence[tuple[str, Path]], deployed: CalibrationRecord) -> tuple[DeploymentVerification | None, list[str]]:
    """Every target runtime's verification merged into one (a :class:`RuntimeResult` per runtime, each of that runtime's
    own bundle), and the runtimes without one. Each is checked to verify the bundle of its folder's record and
    thresholds, made from the deployed calibration (:func:`same_calibration`)."""
    found, missing = [], []
    for runtime, folder in targets:
        path = folder / "verify.json"
        if not path.is_file() or not (folder / "quantize").is_dir() or not (folder / "thresholds.json").is_file():
            missing.append(runtime)
            continue
        rec = CalibrationRecord.load(folder / "quantize")
        if not same_calibration(rec, deployed):
            raise BindingMismatchError(f"{folder / 'quantize'}: not made from the deployed record's calibration ({deployed.fingerprint[:12]}); "
                                       f"rerun 'dvc repro place' (quantkit quantize --ranges-from the deployed record --target {runtime})")
        v = _verification(path, rec, ThresholdSet.load(folder / "thresholds.json"))
        if v is not None:
            found.append(v)
    return _merged(found), missing


def _merged(found: Sequence[DeploymentVerification]) -> DeploymentVerification | None:
    """Verifications of one runtime each merged into one (their runtimes in order, their distinct bundles named); None for none."""
    if not found:
        return None
    return dataclasses.replace(found[0], bundle=", ".join(dict.fromkeys(v.bundle for v in found)),
                               runtimes=tuple(r for v in found for r in v.runtimes))


def _candidate_verifications(targets: Sequence[tuple[str, Path]], cand: CalibrationRecord, thresholds: ThresholdSet
                             ) -> DeploymentVerification | None:
    """The candidate's bundle verified on each target runtime (``targets/<runtime>/verify-candidate.json``, the pipeline's
    ``verify_candidate`` stage), merged into one; None where none was verified. Each is checked to verify the candidate's
    own record and thresholds."""
    return _merged([v for _, folder in targets if (path := folder / CANDIDATE_VERIFICATION).is_file()
                    and (v := _verification(path, cand, thresholds)) is not None])


def _verified_on(v: DeploymentVerification | None, runtimes: Sequence[str]) -> bool:
    """Whether the candidate's bundle is verified (deployable) on one of ``runtimes``: its commands are then not needed."""
    return v is not None and any(r.runtime in runtimes and r.passes for r in v.runtimes)


CANDIDATE_VERIFICATION = "verify-candidate.json"
"""The candidate bundle's verification on one target runtime, in ``targets/<runtime>/`` beside the deployed one's."""


def _paired(frames: dict[str, Any], spec: Any, primary: Any) -> tuple[Any, ...]:
    """Candidate minus deployed of the primary metric on the same images: over every site set, then per set."""
    def one(fr: dict[str, Any]) -> PairedDifference:
        return paired_difference(fr, primary.name, spec.num, spec.den, factor=spec.factor, empty=spec.empty,
                                 higher_is_better=primary.higher_is_better)

    return (one(frames), *(one({name: f}) for name, f in sorted(frames.items())))


def _images_dir(summary: EvalSummary, site_sets: Path | None) -> Path | None:
    """The site set's folder for thumbnails: ``site_sets/<name>`` when given, else the folder evaluate recorded, else
    ``./site_sets/<name>``; None (logged: the report shows "image not available") when none exists here."""
    ref = summary.site_set
    candidates = [Path(site_sets) / ref.name if site_sets else None, Path(ref.path) if ref.path else None, Path("site_sets") / ref.name]
    found = next((c for c in candidates if c is not None and (c / "images").is_dir()), None)
    if found is None:
        log.warning("site set %r: images not found at %s; thumbnails are left out (pass --site-sets FOLDER)", ref.name,
                    " or ".join(str(c) for c in candidates if c is not None))
    return found


def _site_dirs(eval_dir: Path) -> list[Path]:
    if not eval_dir.is_dir():
        raise InputFileError(f"{eval_dir}: evaluation folder not found; run 'quantkit evaluate' (dvc repro evaluate)")
    dirs = sorted(d for d in eval_dir.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not dirs:
        raise InputFileError(f"{eval_dir}: no site folders with summary.json; run 'quantkit evaluate' on at least one site set")
    return dirs


def build_model_report(inputs: ModelInputs, cfg: ReportConfig) -> ModelReport:
    """Read and check one model's artifacts and aggregate them (nothing is written).

    Raises:
        InputFileError: a folder or file is missing or malformed (names it and the stage to rerun).
        BindingMismatchError: artifacts that do not belong together (names both sides).
    """
    from ..tasks import adapter_class
    from .candidate import deploy_commands

    dep_rec = CalibrationRecord.load(inputs.deployed)
    roles = {"deployed": (dep_rec, _thresholds(inputs.deployed_thresholds, inputs.deployed), inputs.deployed)}
    if inputs.candidate is not None and inputs.candidate_thresholds is not None:
        roles["candidate"] = (CalibrationRecord.load(inputs.candidate), _thresholds(inputs.candidate_thresholds, inputs.candidate), inputs.candidate)
    sites: list[SiteReport] = []
    frames: dict[str, Any] = {}
    summary = None
    for d in _site_dirs(inputs.eval_dir):
        summary = EvalSummary.load(d)
        _check_belongs(summary, d, roles)
        spec = adapter_class(summary.task).primary_metric()
        frame = _per_image(d / "per_image.csv")
        frames[d.name] = frame
        hist = read_json(d / "score_hist.json", "score histogram") if (d / "score_hist.json").exists() else None
        dets = read_json(d / "detections.json", "detections") if (d / "detections.json").exists() else None
        drift = _drift(inputs.drift_dir / f"{d.name}.json", dep_rec) if inputs.drift_dir else None
        sites.append(SiteReport(d.name, tuple(site_metrics(summary, frame, hist, cfg, (spec.num, spec.den, spec.factor, spec.empty))), hist,
                                drift, tuple(examples(frame, dets, summary.primary_metric, cfg.examples_per_site)),
                                _images_dir(summary, inputs.site_sets), summary.labelled, summary.site_set.camera, summary.site_set.lighting,
                                {r: nl for r, nl in summary.near_line.items() if r in roles}))
    assert summary is not None  # _site_dirs refuses an empty folder
    cand = roles.get("candidate")
    same = cand is not None and cand[0].fingerprint == dep_rec.fingerprint
    primary = summary.metric(summary.primary_metric)
    evidence = _paired(frames, adapter_class(summary.task).primary_metric(), primary) if cand is not None and not same else ()
    cand_verification = None
    if inputs.targets:
        verification, unverified = _target_verifications(inputs.targets, dep_rec)
        if cand is not None and not same:
            cand_verification = _candidate_verifications(inputs.targets, cand[0], cand[1])
    else:
        verification, unverified = _verification(inputs.verification, dep_rec, roles["deployed"][1]), []
    fallback = _fallback(inputs.candidate) if inputs.candidate else None
    site_paths = [s.images_dir.as_posix() if s.images_dir else f"site_sets/{s.name}" for s in sites]
    from_fallback = fallback is not None and inputs.candidate is not None and inputs.candidate_thresholds is not None
    how = None
    if from_fallback:  # a fallback candidate keeps nodes in float: a new calibration alone would not reproduce it
        how = (f"it came from the precision fallback ({len(fallback.kept)} nodes kept in float), so recalibrating the deployed model on "
               f"its set would not reproduce it" if fallback.kept else
               "it is the precision fallback's output (every node in 8 bits" + (f", after {', '.join(st.name for st in fallback.recovery)}"
                                                                               if fallback.recovery else "") + ")")
        how += "; bundle it and verify that bundle on each runtime it is to run on with the commands below ('quantkit bundle', then 'quantkit verify')."
    choice, lines = decide_model(sites, primary, summary.item, dep_rec.set_name, _calibration_words(cand[0]) if cand else None, cfg,
                                 metrics=summary.metrics, same_calibration=same, paired=evidence[0] if evidence else None,
                                 paired_sites=evidence[1:], verification=verification, with_verification=True,
                                 per_runtime=bool(inputs.targets), unverified=tuple(unverified),
                                 calibration=(cs.camera, cs.lighting) if (cs := dep_rec.calibration_set) else ("", ""),
                                 measurements=_measurements(inputs.measurements, inputs.name), deploy_how=how,
                                 candidate_verification=cand_verification, bundle_dir=f"dist/{inputs.name}-candidate")
    on = choice.keys or tuple(rt for rt, _ in inputs.targets)  # a switch on some runtimes verifies on those, else on every target
    deploy = tuple(deploy_commands(inputs.name, inputs.candidate, inputs.candidate_thresholds, fallback, site_paths, on)) \
        if from_fallback and not _verified_on(cand_verification, on) else ()  # type: ignore[arg-type]
    provenance = {role: {"record": r.fingerprint, "model_digest": r.model_digest, "quantized_model_digest": r.quantized_model_digest,
                         "calibration_set": r.set_name, "calibration_set_id": r.set_id, "method": r.config.get("method"),
                         "thresholds": ts.fingerprint, "versions": r.versions} for role, (r, ts, _) in roles.items()}
    return ModelReport(inputs.name, summary.task, summary.item, summary.scores, primary, summary.metrics, tuple(sites), choice.decision,
                       tuple(lines), dep_rec.set_name, cand[0].set_name if cand else None,
                       tuple(threshold_table(roles["deployed"][1], cand[1] if cand else None)),
                       tuple(scale_moves(dep_rec, cand[0], cfg.top_tensors)) if cand and not same else (), fallback, provenance, deploy,
                       evidence, verification, choice, _recipes(inputs.targets), bool(choice.deploys and _verified_on(cand_verification, on)))


def _recipes(targets: Sequence[tuple[str, Path]]) -> tuple[dict[str, Any], ...]:
    """Each target runtime's ``quantize/choice.json`` (:mod:`quantkit.quantize.recipes`) where its file was chosen among recipes."""
    from ..quantize.recipes import CHOICE_FILE

    return tuple(read_json(f, "recipe choice") for _, folder in targets if (f := folder / "quantize" / CHOICE_FILE).is_file())


def _calibration_words(record: CalibrationRecord) -> str:
    """The set a record was calibrated on, for a reader: its name, and for a composed set (``day+night``) what it holds
    (``ppocr_det-candidate (cam1, day+night)``), since a composed set's own name says nothing of its images."""
    ref = record.calibration_set
    if ref is None or "+" not in f"{ref.camera}{ref.lighting}":
        return record.set_name
    return f"{ref.name} ({ref.camera}, {ref.lighting})"


def _measurements(path: Path | None, model: str) -> list[dict[str, Any]]:
    """This model's rows of ``measurements.json`` (``quantkit measure``); none without the file. The file is machine-
    dependent: it changes the decision only where it shows the candidate slower than the deployed file."""
    if path is None or not path.is_file():
        return []
    rows = read_json(path, "measurements").get("latency", [])
    return [r for r in rows if isinstance(r, dict) and r.get("model") == model]


def _fallback(candidate: Path) -> Any:
    """The candidate's typed ``fallback.json`` (:class:`quantkit.artifacts.FallbackResult`), or None without one."""
    from ..artifacts.fallback import FallbackResult

    p = candidate / FallbackResult.FILENAME
    return FallbackResult.load(p) if p.is_file() else None


def build_report(models: Sequence[ModelInputs], config: ReportConfig | None = None) -> Any:
    """Build the :class:`ShiftReport` of every model (nothing is written)."""
    from ..progress import progress
    from .model import ShiftReport

    cfg = config or ReportConfig()
    if not models:
        raise InputFileError("no model to report on; pass --model WORK_DIR (e.g. work/models/ppocr_det)")
    reports = [build_model_report(m, cfg) for m in progress(list(models), total=len(models), desc="report", unit="model")]
    return ShiftReport(cfg.title, tuple(reports), cfg)

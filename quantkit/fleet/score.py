"""``quantkit fleet score``: a Dask graph over shards (camera x time window) of image paths.

The driver plans shards from the manifest, skips those already done (their summary file exists under
the same key: shard content + models + thresholds + edges + options), sends the rest to Dask as one
task each (paths only, never pixels) and rolls the shard summaries up camera -> site -> fleet. Workers
write rows and shard summaries themselves (the output folder must be on storage every worker sees),
so the driver holds only the plan and one camera's summaries at a time.

Where the tasks run:

* ``workers=N`` (default: one per core): an embedded ``distributed.LocalCluster`` of N single-threaded
  worker processes; ONNX Runtime gets ``cores // N`` intra-op threads in each;
* ``scheduler="tcp://HOST:PORT"``: an existing Dask cluster (``dask scheduler`` / ``dask worker``);
* ``workers=0``: no cluster; the same task function runs synchronously in this process.

Ctrl-C or SIGTERM stops the cluster quietly (:mod:`.cluster`: the embedded workers ignore Ctrl-C, Dask's shutdown
logging is off) and re-raises with ``kept`` naming the shards finished and kept: the same call resumes.

Dask retries a task whose worker died (``distributed.scheduler.allowed-failures``, default 3); the driver
notices workers that left and reports them. A failed image is a row with an ``error``. Results do not
depend on the worker count: rows are sorted within each shard and every merge runs in key order.

Output folder (``out``): ``rows/`` (Parquet dataset, Hive-partitioned by camera and date),
``shards/<key>.json`` (one summary per shard), ``edges.json`` (the frozen bin edges),
``summary.json`` (plan, rollups, error examples; deterministic) and ``run.json`` (workers, timings,
throughput; differs between runs; ``run_info`` puts it elsewhere).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

from .. import __version__
from .._io import atomic_write_json, fingerprint, read_json, sha256_file
from ..errors import ConfigError, InputFileError
from ..extras import require
from .cluster import start_client, stop_quietly
from .config import FleetScoreConfig
from .scorer import Scorer, ScoringSpec, Shard, run_shard, shard_summary_path
from .summaries import Edges, Summary, merge_all

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """What a scoring run did: shards planned / run / skipped (already done), images in the manifest,
    scored (FP32 + INT8) and failed, seconds, workers (-1 = an attached cluster), ``workers_lost`` (addresses
    of workers that left during the run) and ``images_run`` (images of the shards run this time)."""

    out: str
    shards: int
    shards_run: int
    shards_skipped: int
    images: int
    scored: int
    errors: int
    seconds: float
    workers: int
    workers_lost: tuple[str, ...] = ()
    images_run: int = 0

    @property
    def images_per_s(self) -> float:
        """Images of the shards run this time per second of the run (0 when nothing ran)."""
        return self.images_run / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "workers_lost": list(self.workers_lost), "images_per_s": round(self.images_per_s, 3)}

    def __repr__(self) -> str:
        return (f"ScoreResult({self.images} images in {self.shards} shards ({self.shards_skipped} already done), "
                f"{self.errors} errors, {self.images_per_s:.1f} img/s)")


def _spec(manifest: Any, fp32_dir: Path, quantized: Path, thresholds: Path, calibration_set: Path,
          config: FleetScoreConfig, out: Path, ort_threads: int, task: str | None) -> tuple[ScoringSpec, Edges, dict[str, Any]]:
    from ..artifacts.record import CalibrationRecord
    from ..calibset import CalibrationSet
    from ..note import ExportNote
    from . import decisions

    fmodel, qmodel = fp32_dir / "model.onnx", quantized / "model_int8.onnx"
    for p, how in ((fmodel, "run 'quantkit intake'"), (qmodel, "run 'quantkit quantize'")):
        if not p.is_file():
            raise InputFileError(f"{p}: model not found; {how} first")
    if task is not None:
        decisions.check_task(thresholds, task)
    summarizer = decisions.DecisionSummarizer(thresholds, quantized, qmodel)  # refuses a set bound to another record/model
    ts_fp = summarizer.fingerprint
    note = ExportNote.load(fp32_dir / "export_note.json")
    cset = CalibrationSet.load(calibration_set, verify=True)
    CalibrationRecord.load(quantized).check_calibrated_on(cset, CalibrationRecord.path_in(quantized))
    edges = Edges.from_calibration(cset.stats(), config.bins, {"name": cset.name, "set_id": cset.set_id, "path": str(calibration_set)})
    models = {"fp32_digest": sha256_file(fmodel), "int8_digest": sha256_file(qmodel), "thresholds_fingerprint": ts_fp,
              "calibration_set": cset.name, "calibration_set_id": cset.set_id}
    fp = fingerprint({"models": models, "preprocessing": note.preprocessing.to_dict(),
                      "config": config.result_dict(), "edges": edges.fingerprint(), "quantkit": __version__})
    spec = ScoringSpec(str(fmodel.resolve()), str(qmodel.resolve()), str(thresholds.resolve()), str(quantized.resolve()),
                       note.preprocessing.to_dict(), config.to_dict(), edges.to_dict(), ort_threads, str(out.resolve()), fp)
    return spec, edges, models


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """A shard without its paths: rows ``start:stop`` of the sorted manifest frame (one camera, one window)."""

    key: str
    camera: str
    site: str
    line: str
    window: str
    start: int
    stop: int

    @property
    def images(self) -> int:
        return self.stop - self.start

    def identity(self) -> dict[str, Any]:
        return {"key": self.key, "camera": self.camera, "site": self.site, "line": self.line, "window": self.window}


def plan_shards(manifest: Any, spec_fingerprint: str, window_hours: int) -> list[ShardPlan]:
    """One plan per camera and window, keyed by the shard's content (URI, SHA-256, size, time of each image)
    and ``spec_fingerprint``, in manifest order (camera, then time). Paths are not kept: see :func:`shard_of`."""
    import numpy as np
    import pandas as pd

    f = manifest.frame
    win = f["captured_at"].dt.floor(f"{window_hours}h")
    cam = pd.factorize(f["camera"])[0]  # integer codes: no Python string per row
    w = win.dt.tz_localize(None).to_numpy()
    cut = np.flatnonzero((cam[1:] != cam[:-1]) | (w[1:] != w[:-1])) + 1
    bounds = [0, *cut.tolist(), len(f)]
    plans = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == b:
            continue
        g = f.iloc[a:b]  # one shard's rows at a time: no whole-manifest Python lists
        content = [[u, "" if pd.isna(h) else str(h), "" if pd.isna(n) else int(n), t.isoformat()]
                   for u, h, n, t in zip(g["uri"], g["sha256"], g["bytes"], g["captured_at"])]
        window = win.iloc[a].isoformat()
        camera = str(f["camera"].iat[a])
        key = fingerprint({"camera": camera, "window": window, "images": content, "spec": spec_fingerprint})
        plans.append(ShardPlan(key, camera, str(f["site"].iat[a]), str(f["line"].iat[a]), window, a, b))
    return plans


def shard_of(manifest: Any, plan: ShardPlan) -> Shard:
    """The :class:`Shard` (identity and paths) of a plan."""
    import pandas as pd

    g = manifest.frame.iloc[plan.start:plan.stop]
    images = tuple((u, manifest.resolve(u), t.isoformat(), "" if pd.isna(li) else str(li))
                   for u, t, li in zip(g["uri"], g["captured_at"], g["lighting"]))
    return Shard(plan.key, plan.camera, plan.site, plan.line, plan.window, images)


def _done(out: Path, shard: ShardPlan) -> bool:
    p = shard_summary_path(out, shard.key)
    if not p.is_file():
        return False
    try:
        return read_json(p, "shard summary").get("key") == shard.key
    except InputFileError:
        return False


class _Log:
    """Progress: a bar on a terminal, else a log line every ``every`` seconds."""

    def __init__(self, total: int, every: float) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc="fleet score", unit="shard", disable=None, leave=False)
        self.total, self.every, self.done, self.images = total, every, 0, 0
        self.t0 = self.last = time.monotonic()

    def step(self, images: int) -> None:
        self.done += 1
        self.images += images
        self.bar.update(1)
        now = time.monotonic()
        if self.bar.disable and now - self.last >= self.every:
            self.last = now
            log.warning("fleet score: %d/%d shards, %d images, %.1f images/s", self.done, self.total, self.images,
                        self.images / max(now - self.t0, 1e-9))

    def close(self) -> None:
        self.bar.close()


def _run_local(todo: list[ShardPlan], manifest: Any, spec: ScoringSpec, progress: _Log) -> Iterator[dict[str, Any]]:
    scorer = Scorer(spec)
    try:
        for plan in todo:
            doc = run_shard(shard_of(manifest, plan), spec.plugin_name, scorer)
            progress.step(plan.images)
            yield doc
    finally:
        scorer.close()


def _run_dask(todo: list[ShardPlan], manifest: Any, spec: ScoringSpec, client: Any, progress: _Log, lost: set[str]) -> Iterator[dict[str, Any]]:
    """Submit shards as tasks, at most twice the cluster's threads (and at least 4) in flight, so neither
    the driver nor the scheduler holds the whole plan's paths; yields each shard's document."""
    as_completed = require("distributed", "fleet", "quantkit fleet").as_completed

    from .plugin import ScorerPlugin

    client.register_plugin(ScorerPlugin(spec), name=spec.plugin_name)
    info = client.scheduler_info()["workers"]
    seen = set(info)
    slots = max(4, 2 * sum(int(w.get("nthreads", 1)) for w in info.values()))
    pending = iter(todo)
    size: dict[str, int] = {}

    def submit(plan: ShardPlan) -> Any:
        fut = client.submit(run_shard, shard_of(manifest, plan), spec.plugin_name, key=f"fleet-shard-{plan.key[:24]}", pure=False)
        size[fut.key] = plan.images
        return fut

    queue = as_completed([submit(p) for _, p in zip(range(slots), pending)])
    last = 0.0
    interrupted = False
    try:
        for fut in queue:
            doc = fut.result()
            if time.monotonic() - last > 1.0:  # one scheduler round trip a second at most
                last = time.monotonic()
                now = set(client.scheduler_info()["workers"])
                for gone in sorted(seen - now - lost):
                    log.warning("fleet score: worker %s left during the run; Dask retries its shards elsewhere", gone)
                    lost.add(gone)
                seen |= now
            progress.step(size.pop(fut.key))
            fut.release()
            nxt = next(pending, None)
            if nxt is not None:
                queue.add(submit(nxt))
            yield doc
    except KeyboardInterrupt:  # the driver stops the cluster (score_fleet); no broadcast to workers that may be gone
        interrupted = True
        raise
    finally:
        if not interrupted:
            with contextlib.suppress(Exception):  # the cluster may be gone already (that error is the one to show)
                client.unregister_worker_plugin(spec.plugin_name)


def _relative_root(root: Path, out: Path) -> str:
    """The manifest's image root relative to the scores folder ``out`` (POSIX): ``summary.json`` is then the
    same bytes wherever the project is cloned (an absolute path made every clone's ``dvc.lock`` differ)."""
    return Path(os.path.relpath(Path(root).resolve(), Path(out).resolve())).as_posix()


def score_fleet(manifest_path: str | os.PathLike[str], fp32_dir: str | os.PathLike[str], quantized: str | os.PathLike[str],
                thresholds: str | os.PathLike[str], calibration_set: str | os.PathLike[str], out: str | os.PathLike[str],
                config: FleetScoreConfig | None = None, *, scheduler: str | None = None, task: str | None = None,
                run_info: str | os.PathLike[str] | None = None) -> ScoreResult:
    """Score every image of a fleet manifest with the deployed FP32 + INT8 models, resumably.

    Args:
        manifest_path: fleet manifest (``quantkit fleet register``).
        fp32_dir: intake folder (``model.onnx`` + ``export_note.json``).
        quantized: deployed quantized folder (``model_int8.onnx`` + ``record.json``).
        thresholds: the deployed threshold set bound to that record.
        calibration_set: the deployed calibration set (its statistics freeze the histogram edges).
        out: output folder (see the module docstring); shards already there under the same key are skipped.
        config: ``fleet.score`` options; ``scheduler``: attach to this Dask scheduler instead.
        task: the scored model's task adapter name (``models.<name>.task.adapter``); the threshold set must be
            bound for it (None: not checked). Decisions and agreement are the set's adapter's (:mod:`.decisions`).
        run_info: where ``run.json`` (workers, timings, throughput) is written; default ``out/run.json``. Outside
            ``out``, the scores folder is the same bytes on every run (a DVC output that does not change ``dvc.lock``).

    Raises:
        InputFileError / ModelError / CalibrationSetError / ConfigError: bad inputs (one line each).
        BindingMismatchError: the threshold set belongs to another calibration or model.
    """
    from .manifest import load_manifest

    cfg = config or FleetScoreConfig()
    out_p = Path(out)
    if out_p.is_file():
        raise InputFileError(f"{out_p}: is a file; --out takes a folder for the fleet scores")
    manifest = load_manifest(manifest_path)
    workers = (os.cpu_count() or 1) if cfg.workers is None else cfg.workers
    if scheduler and cfg.workers == 0:
        raise ConfigError("--scheduler and --workers 0 exclude each other; drop one")
    threads = cfg.ort_threads or (1 if scheduler else max(1, (os.cpu_count() or 1) // max(workers, 1)))
    spec, edges, models = _spec(manifest, Path(fp32_dir), Path(quantized), Path(thresholds), Path(calibration_set), cfg, out_p,
                                threads, task)
    shards = plan_shards(manifest, spec.fingerprint, cfg.window_hours)
    todo = [s for s in shards if not _done(out_p, s)]
    log.info("fleet score: %d shards, %d to run, %d already done", len(shards), len(todo), len(shards) - len(todo))
    atomic_write_json(out_p / "edges.json", edges.to_dict())
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    lost: set[str] = set()
    progress = _Log(len(todo), cfg.log_every_s)
    client = cluster = None
    try:
        if todo and (workers > 0 or scheduler):
            client, cluster = start_client(workers, scheduler)
            docs = _run_dask(todo, manifest, spec, client, progress, lost)
        else:
            docs = _run_local(todo, manifest, spec, progress)
        for doc in docs:
            for k, v in doc["timing"].items():
                timing[k] = timing.get(k, 0.0) + v
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: stop Dask quietly; say what is kept (quantkit.cli.main prints it)
        progress.close()
        stop_quietly(client, cluster)
        client = cluster = None
        done = sum(_done(out_p, s) for s in shards)
        e.kept = (f"{done} of {len(shards)} shards finished and are kept in {out_p}; "  # type: ignore[attr-defined]
                  f"a rerun scores only the other {len(shards) - done}")
        raise
    finally:
        progress.close()
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    seconds = time.perf_counter() - t0
    summary = _write_summary(out_p, manifest, shards, edges, models, cfg, spec)
    _prune(out_p, shards)
    images_run = sum(p.images for p in todo)
    result = ScoreResult(str(out_p), len(shards), len(todo), len(shards) - len(todo), summary["images"], summary["scored"],
                         summary["errors"]["count"], round(seconds, 3), workers if not scheduler else -1, tuple(sorted(lost)), images_run)
    info = Path(run_info) if run_info is not None else out_p / "run.json"
    info.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(info, {**result.to_dict(), "scheduler": scheduler or ("local" if workers else "synchronous"),
                                           "ort_threads": threads, "timing_s": {k: round(v, 3) for k, v in sorted(timing.items())}})
    return result


def _write_summary(out: Path, manifest: Any, shards: list[ShardPlan], edges: Edges, models: dict[str, Any],
                   cfg: FleetScoreConfig, spec: ScoringSpec) -> dict[str, Any]:
    """Roll shard summaries up (read back from disk in key order, one camera at a time) into ``summary.json``."""
    entries, errors, n_err, primary = [], [], 0, None
    cams: dict[str, Summary] = {}
    site_of: dict[str, str] = {}
    for camera in sorted({s.camera for s in shards}):
        pairs = []
        for s in sorted((s for s in shards if s.camera == camera), key=lambda s: s.key):
            doc = read_json(shard_summary_path(out, s.key), "shard summary")
            summ = Summary.from_dict(doc["summary"], edges)
            primary = doc.get("primary", primary)
            pairs.append((s.identity(), summ))
            entries.append({**s.identity(), "images": summ.images, "scored": summ.scored, "errors": summ.errors})
            n_err += summ.errors
            errors = sorted([*errors, *doc.get("error_examples", [])], key=lambda e: e["uri"])[:50]
        cams[camera] = merge_all(summ for _, summ in pairs)
        site_of[camera] = pairs[0][0]["site"]
    sites = {site: merge_all(cams[c] for c in sorted(cams) if site_of[c] == site) for site in sorted(set(site_of.values()))}
    fleet = merge_all(sites[s] for s in sorted(sites))
    doc = {"schema_version": SCHEMA_VERSION, "manifest": {"path": str(manifest.path), "root": _relative_root(manifest.root, out), "images": len(manifest)},
           "models": models, "primary": primary, "config": cfg.result_dict(), "edges_fingerprint": edges.fingerprint(),
           "spec_fingerprint": spec.fingerprint, "images": fleet.images, "scored": fleet.scored,
           "errors": {"count": n_err, "examples": sorted(errors, key=lambda e: e["uri"])[:50]},
           "shards": sorted(entries, key=lambda e: (e["camera"], e["window"])),
           "cameras": {c: {"site": site_of[c], "summary": cams[c].to_dict(exact_sketches=True)} for c in sorted(cams)},
           "sites": {s: sites[s].to_dict(exact_sketches=True) for s in sorted(sites)}, "fleet": fleet.to_dict(exact_sketches=True)}
    atomic_write_json(out / "summary.json", doc)
    return {"images": fleet.images, "scored": fleet.scored, "errors": doc["errors"]}


def _prune(out: Path, shards: list[ShardPlan]) -> None:
    """Remove shard files of earlier runs that this plan no longer has (another model, config or content)."""
    from .scorer import rows_path

    keep = {shard_summary_path(out, s.key).resolve() for s in shards} | {rows_path(out, s.camera, s.window[:10], s.key).resolve() for s in shards}
    for sub, pattern in (("shards", "*.json"), ("rows", "*.parquet")):
        for p in sorted((out / sub).rglob(pattern)) if (out / sub).is_dir() else []:
            if p.resolve() not in keep:
                p.unlink()
    rows = out / "rows"
    if rows.is_dir():
        for d in sorted(rows.rglob("*"), key=lambda p: -len(p.parts)):
            if d.is_dir() and not any(d.iterdir()):
                shutil.rmtree(d)

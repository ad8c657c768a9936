"""Worker side of ``quantkit fleet score``: ONNX Runtime sessions built once, one shard of paths at a time.

A :class:`Scorer` holds the FP32 and INT8 sessions (and, when clipping is sampled, an FP32 session with
every calibrated activation as an output), each with ``intra_op_num_threads`` set explicitly to the
cores its worker owns: ONNX Runtime ignores ``OMP_NUM_THREADS`` and would otherwise start one thread
per core in every worker. Sessions cannot be pickled, so a Dask worker builds its scorer once in a
:class:`~quantkit.fleet.plugin.ScorerPlugin` (``distributed.WorkerPlugin``) and every task finds it there; ``--workers 0`` builds
one in the calling process and runs the same :func:`run_shard`.

Per image one row (:data:`ROW_SCHEMA`): the manifest's fields, the image statistics of the drift check
(:func:`quantkit.calibset.stats.image_statistics`), ``scored`` and the FP32/INT8 decision summary
(:mod:`quantkit.fleet.decisions`) on every ``model_every``-th image, ``clip_rate`` (mean over calibrated
activations of the fraction of FP32 values outside the INT8 range, as ``quantkit drift``) on sampled
images, and ``error`` (the image failed; its other columns are empty). A shard's rows are written to
``rows/camera=<camera>/date=<YYYY-MM-DD>/<key>.parquet`` and then its summary to ``shards/<key>.json``
(both atomically; the summary marks the shard done).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_bytes, atomic_write_json
from ..calibset.stats import STAT_COLUMNS
from ..extras import require
from . import decisions
from .summaries import Edges, Summary

log = logging.getLogger(__name__)

ERROR_EXAMPLES = 5


@dataclasses.dataclass(frozen=True)
class ScoringSpec:
    """Everything a worker needs to score shards (picklable; paths absolute).

    ``fingerprint`` covers everything that changes a row (models' digests, threshold set, edges,
    result-changing options); it is part of every shard's key.
    """

    fp32_model: str
    int8_model: str
    thresholds: str
    record: str
    preprocessing: dict[str, Any]
    config: dict[str, Any]
    edges: dict[str, Any]
    ort_threads: int
    out: str
    fingerprint: str

    @property
    def plugin_name(self) -> str:
        return f"quantkit-fleet-{self.fingerprint[:16]}"


@dataclasses.dataclass(frozen=True)
class Shard:
    """One camera x one time window: the identity and the images' paths (never pixels).

    ``images``: ``(uri as in the manifest, resolved path or URI, captured_at ISO, lighting or "")``
    sorted by capture time, then URI.
    """

    key: str
    camera: str
    site: str
    line: str
    window: str
    images: tuple[tuple[str, str, str, str], ...]

    @property
    def date(self) -> str:
        return self.window[:10]

    def identity(self) -> dict[str, Any]:
        return {"key": self.key, "camera": self.camera, "site": self.site, "line": self.line, "window": self.window}


def row_schema() -> Any:
    """The arrow schema of a shard's rows file (``camera`` and ``date`` are the partition folders)."""
    pa = require("pyarrow", "fleet", "quantkit fleet")

    kinds = {"int64": pa.int64(), "float64": pa.float64()}
    return pa.schema([("uri", pa.string()), ("site", pa.string()), ("line", pa.string()),
                      ("captured_at", pa.timestamp("us", tz="UTC")), ("lighting", pa.string()), ("window", pa.string()),
                      ("error", pa.string()), *[(c, pa.float64()) for c in STAT_COLUMNS], ("scored", pa.bool_()),
                      *[(c, kinds[t]) for c, t in decisions.COLUMNS], ("clip_rate", pa.float64())])


def rows_path(out: str | os.PathLike[str], camera: str, date: str, key: str) -> Path:
    """Where a shard's rows go (Hive partitioning; the camera id is URI-encoded)."""
    return Path(out) / "rows" / f"camera={urllib.parse.quote(camera, safe='')}" / f"date={date}" / f"{key[:24]}.parquet"


def shard_summary_path(out: str | os.PathLike[str], key: str) -> Path:
    return Path(out) / "shards" / f"{key[:24]}.json"


def clip_sampled(uri: str, fraction: float) -> bool:
    """Whether an image's clipping is measured: the first 8 hex digits of SHA-256(uri) as a fraction < ``fraction``."""
    return fraction > 0 and int(hashlib.sha256(uri.encode("utf-8")).hexdigest()[:8], 16) / 2**32 < fraction


def _load(uri: str) -> np.ndarray:
    from ..imageio import load_image
    from .manifest import read_bytes

    if "://" not in uri:
        return load_image(uri)
    with tempfile.NamedTemporaryFile(suffix=Path(urllib.parse.urlparse(uri).path).suffix) as tmp:
        tmp.write(read_bytes(uri))
        tmp.flush()
        return load_image(tmp.name)


class _ClippingProbe:
    """FP32 run with every calibrated activation as an output; per image the mean clipped fraction."""

    def __init__(self, fp32_model: str, record: str, threads: int) -> None:
        import onnx

        from ..artifacts import CalibrationRecord
        from ..runner import OrtRunner, with_outputs

        model = onnx.load(fp32_model)
        produced = {o for n in model.graph.node for o in n.output}
        self.acts = [t for t in CalibrationRecord.load(record).tensors if t.role == "activation" and t.name in produced]
        self.names = [t.name for t in self.acts]
        self.bounds = [t.representable() for t in self.acts]
        self.runner = OrtRunner(with_outputs(model, self.names).SerializeToString(), graph_optimization_level="disable",
                                intra_op_num_threads=threads, name="fp32-activations")
        self.runner.activate()

    def rate(self, feed: dict[str, np.ndarray]) -> float:
        out = self.runner.infer(feed, self.names)
        rates = []
        for t, (lo, hi) in zip(self.acts, self.bounds):
            x = out[t.name]
            if lo.size > 1:
                shape = [1] * x.ndim
                shape[t.axis or 0] = lo.size
                lo, hi = lo.reshape(shape), hi.reshape(shape)
            rates.append(np.count_nonzero((x < lo) | (x > hi)) / max(x.size, 1))
        return float(np.mean(rates)) if rates else 0.0


class Scorer:
    """Sessions and settings of one worker (build once, score many shards).

    Raises:
        ModelError / InputFileError / ConfigError: a model, threshold set or record is unusable.
    """

    def __init__(self, spec: ScoringSpec) -> None:
        from ..note import Preprocessing
        from ..runner import OrtRunner
        from .config import FleetScoreConfig

        self.spec = spec
        self.config = FleetScoreConfig.from_dict(spec.config)
        self.edges = Edges.from_dict(spec.edges)
        self.pre = Preprocessing.from_dict(spec.preprocessing)
        self.summarizer = decisions.DecisionSummarizer(spec.thresholds, spec.record, spec.int8_model, spec.fp32_model)
        self.fp32 = OrtRunner(spec.fp32_model, intra_op_num_threads=spec.ort_threads, name="fp32").activate()
        self.int8 = OrtRunner(spec.int8_model, intra_op_num_threads=spec.ort_threads, name="int8").activate()
        self.probe = _ClippingProbe(spec.fp32_model, spec.record, spec.ort_threads) if self.config.clip_fraction > 0 else None
        self.timing: dict[str, float] = {}
        self.lock = threading.Lock()  # a worker started with --nthreads > 1 still scores one shard at a time
        self.closed = False

    def close(self) -> None:
        self.closed = True  # a shard being scored now is not written (its images would fail for want of a session)
        for r in (self.fp32, self.int8, self.probe.runner if self.probe else None):
            if r is not None:
                r.deactivate()

    def _tick(self, stage: str, t0: float) -> float:
        t = time.perf_counter()
        self.timing[stage] = self.timing.get(stage, 0.0) + (t - t0)
        return t

    def score_image(self, path: str, *, run_models: bool, clip: bool) -> dict[str, Any]:
        """Columns of one image (statistics, decisions, clipping); raises on an unreadable image."""
        from ..calibset.stats import image_statistics

        t = time.perf_counter()
        image = _load(path)
        t = self._tick("decode", t)
        row: dict[str, Any] = {k: float(v) for k, v in image_statistics(image).items()}
        t = self._tick("statistics", t)
        row.update({c: None for c, _ in decisions.COLUMNS}, scored=False, clip_rate=None)
        if run_models or clip:
            x, _ = self.pre.apply(image)
            feed = {self.pre.input_name: x}
            t = self._tick("preprocess", t)
            if run_models:
                out_fp = self.fp32.infer(feed)
                t = self._tick("fp32", t)
                out_q = self.int8.infer(feed)
                t = self._tick("int8", t)
                row.update(self.summarizer.summarize(out_fp, out_q), scored=True)
                t = self._tick("decide", t)
            if clip and self.probe is not None:
                row["clip_rate"] = self.probe.rate(feed)
                self._tick("clipping", t)
        return row

    def score_shard(self, shard: Shard) -> dict[str, Any]:
        """Score every image of ``shard``, write its rows and summary; returns the summary document."""
        pa = require("pyarrow", "fleet", "quantkit fleet")
        pq = require("pyarrow.parquet", "fleet", "quantkit fleet")

        rows, errors = [], []
        for i, (uri, path, captured, lighting) in enumerate(shard.images):
            base = {"uri": uri, "site": shard.site, "line": shard.line, "captured_at": captured, "lighting": lighting or None,
                    "window": shard.window, "error": None}
            try:
                cols = self.score_image(path, run_models=i % self.config.model_every == 0, clip=clip_sampled(uri, self.config.clip_fraction))
            except Exception as e:  # noqa: BLE001 - one bad image must not stop a fleet run; it becomes an error row
                if self.closed:  # the sessions were closed under it (interrupt): not the image's fault, and nothing to log
                    break
                msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
                log.warning("fleet score: %s", msg if path in msg else f"{path}: {msg}")
                cols = {**{c: None for c in STAT_COLUMNS}, **{c: None for c, _ in decisions.COLUMNS}, "scored": False, "clip_rate": None}
                # stored naming the manifest's URI, not this machine's path: the scores are the same bytes in every clone
                msg = msg.replace(str(path), uri)
                base["error"] = msg
                errors.append({"uri": uri, "error": msg})
            rows.append({**base, **cols})
            if self.closed:
                break
        if self.closed:  # interrupted (Ctrl-C, worker shutdown): leave the shard to the next run rather than save failures
            raise RuntimeError(f"shard {shard.key}: the worker closed its sessions while scoring; not written (a re-run scores it)")
        t = time.perf_counter()
        frame = _frame(rows)
        table = pa.Table.from_pandas(frame, schema=row_schema(), preserve_index=False).replace_schema_metadata(None)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        atomic_write_bytes(rows_path(self.spec.out, shard.camera, shard.date, shard.key), buf.getvalue())
        summary = Summary.from_rows(frame, self.edges, self.config.kll_k)
        doc = {**shard.identity(), "summary": summary.to_dict(), "error_examples": errors[:ERROR_EXAMPLES],
               "primary": self.summarizer.primary}
        atomic_write_json(shard_summary_path(self.spec.out, shard.key), doc)
        self._tick("write", t)
        return doc


def _frame(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=[f.name for f in row_schema()])
    frame["captured_at"] = pd.to_datetime(frame["captured_at"], utc=True, format="ISO8601")
    frame["scored"] = frame["scored"].astype(bool)
    for c, t in decisions.COLUMNS:
        frame[c] = frame[c].astype("Int64" if t == "int64" else "Float64")
    for c in (*STAT_COLUMNS, "clip_rate"):
        frame[c] = frame[c].astype("Float64")
    return frame


def run_shard(shard: Shard, plugin_name: str, scorer: Scorer | None = None) -> dict[str, Any]:
    """The Dask task: score ``shard`` with this worker's :class:`Scorer` (its plugin ``plugin_name``), or
    with ``scorer`` when given (``--workers 0``).

    Returns the shard's summary document plus ``timing`` (seconds per stage, this shard) and the
    ``worker`` that ran it (not part of any result).
    """
    where = "local"
    if scorer is None:
        worker = require("distributed", "fleet", "quantkit fleet").get_worker()
        scorer = worker.plugins[plugin_name].scorer  # type: ignore[attr-defined]
        where = worker.address
    with scorer.lock:
        before = dict(scorer.timing)
        doc = scorer.score_shard(shard)
        timing = {k: v - before.get(k, 0.0) for k, v in scorer.timing.items()}
    return {**doc, "timing": timing, "worker": where, "pid": os.getpid()}

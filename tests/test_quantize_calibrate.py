"""Chunked calibration reproduces ORT's one-call calibrators; checkpoints resume an interrupted run.

Real PP-OCR detector at 64x64, 8 calibration images (the issue's N=8 check at a test-sized input).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_quantize_fixtures import make_intake, make_set

from quantkit.calibset import CalibrationSet, CalibrationSetReader
from quantkit.errors import CalibrationSetError
from quantkit.note import ExportNote
from quantkit.quantize import StaticQuantConfig, ort_bridge
from quantkit.quantize.calibration.calibrate import collect_ranges
from quantkit.quantize.calibration.checkpoint import CheckpointKey
from quantkit.quantize.engine import constants_to_initializers
from quantkit.quantize.ort_bridge import quiet_ort

SIZE = 64


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib")
    intake = make_intake(root / "intake", SIZE)
    m = onnx.load(str(intake / "model.onnx"))
    constants_to_initializers(m)
    onnx.save(m, str(root / "prepared.onnx"))
    cset = CalibrationSet.load(make_set(root / "set", 8, size=80))
    return root, root / "prepared.onnx", cset, ExportNote.load(intake / "export_note.json").preprocessing


def _ort_one_call(model: Path, reader, cfg: StaticQuantConfig, tmp: Path, op_types=None):
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    with quiet_ort():
        cal = create_calibrator(model, op_types or ort_bridge.default_op_types("qdq"), augmented_model_path=str(tmp / "aug.onnx"),
                                calibrate_method=getattr(CalibrationMethod, ort_bridge.METHODS[cfg.method]),
                                extra_options=ort_bridge.calibrator_options(cfg))
        cal.collect_data(reader)
        return cal.compute_data()


EXACT = [StaticQuantConfig(), StaticQuantConfig(moving_average=True, averaging_constant=0.3), StaticQuantConfig(method="entropy"),
         StaticQuantConfig(method="entropy", num_bins=256, num_quantized_bins=128), StaticQuantConfig(method="distribution", calibration_chunk_size=3)]


@pytest.mark.parametrize("cfg", EXACT, ids=["minmax", "minmax-ema", "entropy", "entropy-kl-two-pass", "distribution"])
def test_chunked_ranges_equal_ort_one_call_bit_for_bit(env, cfg, tmp_path):
    root, model, cset, pre = env
    ref = _ort_one_call(model, CalibrationSetReader(cset, pre), cfg, tmp_path)
    run = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=tmp_path, op_types=ort_bridge.default_op_types("qdq"))
    assert run.images == 8 and run.chunks >= 8 // cfg.calibration_chunk_size
    assert set(run.tensors.data) == set(ref.data) and len(ref.data) > 300
    for name in ref.data:
        a, b = ref[name].range_value, run.tensors[name].range_value
        assert np.array_equal(np.asarray(a), np.asarray(b)), name  # tolerance: exact (0 ulp)


@pytest.mark.parametrize("cfg", [StaticQuantConfig(method="percentile"), StaticQuantConfig(method="percentile", calibration_symmetric=False),
                                 StaticQuantConfig(method="percentile", percentile=99.0, num_bins=512)],
                         ids=["percentile", "percentile-asymmetric", "percentile-99"])
def test_percentile_within_stated_tolerance(env, cfg, tmp_path):
    """The one-pass percentile's stated tolerance (fine_histogram.FineHistogramState): each threshold within one ORT
    bin plus one fine bin of ORT's one-call threshold, i.e. <= 1.5 t / num_bins (absolute, ORT's default) or
    <= 2.5 t / num_bins (symmetric=False), t = max|x| of the tensor."""
    root, model, cset, pre = env
    ref = _ort_one_call(model, CalibrationSetReader(cset, pre), cfg, tmp_path)
    mm = _ort_one_call(model, CalibrationSetReader(cset, pre), StaticQuantConfig(), tmp_path)
    run = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=tmp_path, op_types=ort_bridge.default_op_types("qdq"))
    assert set(run.tensors.data) == set(ref.data)
    nb = cfg.num_bins or 2048
    bound = 1.5 if cfg.calibration_symmetric is None else 2.5
    exact = 0
    for name in ref.data:
        a = np.asarray(ref[name].range_value, np.float64)
        b = np.asarray(run.tensors[name].range_value, np.float64)
        t = float(np.max(np.abs(np.asarray(mm[name].range_value, np.float64))))
        assert np.all(np.abs(a - b) <= bound * t / nb * (1 + 1e-6)), (name, a, b, t)
        exact += bool(np.array_equal(a, b))
    assert exact >= 0.9 * len(ref.data)  # measured: all but a few are bit for bit


@pytest.mark.parametrize("method", ["percentile", "distribution"])
def test_parallel_fold_equals_one_thread(env, tmp_path, method, monkeypatch):
    """Tensors folded by a thread pool (QUANTKIT_CALIB_THREADS) give the same ranges as one thread, bit for bit."""
    root, model, cset, pre = env
    cfg = StaticQuantConfig(method=method, calibration_chunk_size=3)
    got = {}
    for threads in ("1", "3"):
        monkeypatch.setenv("QUANTKIT_CALIB_THREADS", threads)
        (tmp_path / threads).mkdir()
        run = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=tmp_path / threads, op_types=ort_bridge.default_op_types("qdq"))
        got[threads] = {k: np.asarray(v.range_value) for k, v in run.tensors.data.items()}
    assert got["1"].keys() == got["3"].keys() and len(got["1"]) > 300
    assert all(np.array_equal(got["1"][k], got["3"][k]) for k in got["1"])


def test_calib_threads_env_is_validated(monkeypatch):
    from quantkit.errors import ConfigError
    from quantkit.quantize.calibration.calibrate import fold_threads

    monkeypatch.setenv("QUANTKIT_CALIB_THREADS", "two")
    with pytest.raises(ConfigError, match="QUANTKIT_CALIB_THREADS='two': expected a whole number"):
        fold_threads()
    monkeypatch.setenv("QUANTKIT_CALIB_THREADS", "2")
    assert fold_threads() == 2


def test_ort_merge_per_call_would_differ(env, tmp_path):
    """Why the two-pass histogram exists: ORT's own per-call merge drifts from its one-call result."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    root, model, cset, pre = env
    cfg = StaticQuantConfig(method="percentile")
    ref = _ort_one_call(model, CalibrationSetReader(cset, pre), cfg, tmp_path)
    with quiet_ort():
        cal = create_calibrator(model, ort_bridge.default_op_types("qdq"), augmented_model_path=str(tmp_path / "a2.onnx"),
                                calibrate_method=CalibrationMethod.Percentile)
        r = CalibrationSetReader(cset, pre)
        for i in range(len(r)):
            r.set_range(i, i + 1)
            cal.collect_data(r)
        merged = cal.compute_data()
    assert any(not np.array_equal(np.asarray(ref[k].range_value), np.asarray(merged[k].range_value)) for k in ref.data)


class _Interrupting(CalibrationSetReader):
    """Raises KeyboardInterrupt when batch ``stop_at`` is requested; counts decoded batches."""

    def __init__(self, *a, stop_at=None, **k):
        super().__init__(*a, **k)
        self.stop_at, self.seen = stop_at, []

    def get_next(self):
        out = super().get_next()
        if out is not None:
            self.seen.append(self._start)
            if self.stop_at is not None and len(self.seen) > self.stop_at:
                raise KeyboardInterrupt
        return out


@pytest.mark.parametrize("method", ["minmax", "percentile", "distribution"])
def test_interrupted_calibration_resumes_from_checkpoint(env, tmp_path, method, monkeypatch, caplog):
    from quantkit.quantize.calibration import calibrate

    monkeypatch.setattr(calibrate, "CHECKPOINT_INTERVAL_S", 0.0)  # save after every chunk
    root, model, cset, pre = env
    cfg = StaticQuantConfig(method=method, calibration_chunk_size=2)
    ckpt = tmp_path / "ckpt"
    key = CheckpointKey.for_run("model", "set", cfg.config_hash())
    with pytest.raises(KeyboardInterrupt):
        collect_ranges(model, _Interrupting(cset, pre, stop_at=5), cfg, workdir=tmp_path, checkpoint=ckpt, key=key)
    with np.load(ckpt, allow_pickle=False) as z:  # plain arrays, no pickle
        saved = json.loads(str(z["__meta__"][()]))
    assert (saved["pass"], saved["done"]) == (1, 4)  # chunks [0,2) and [2,4) finished before the interrupt
    again = _Interrupting(cset, pre)
    run = collect_ranges(model, again, cfg, workdir=tmp_path, checkpoint=ckpt, key=key)
    passes = 2 if method == "distribution" else 1  # percentile: one pass (its repair pass is not needed here)
    assert len(again.seen) == 8 * passes - 4  # the 4 finished images were not read again
    assert run.resumed_batches == 4
    full = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=tmp_path)
    for k in full.tensors.data:
        assert np.array_equal(np.asarray(full.tensors[k].range_value), np.asarray(run.tensors[k].range_value)), k
    # a checkpoint made for another run (here: another onnxruntime version) is ignored with a log line, not trusted
    import dataclasses

    other = _Interrupting(cset, pre)
    with caplog.at_level("WARNING", logger="quantkit.quantize.calibration.checkpoint"):
        collect_ranges(model, other, cfg, workdir=tmp_path, checkpoint=ckpt, key=dataclasses.replace(key, onnxruntime="0.0"))
    assert len(other.seen) == 8 * passes
    assert "made for another run (onnxruntime" in caplog.text


def test_max_images_and_empty(env, tmp_path):
    root, model, cset, pre = env
    run = collect_ranges(model, CalibrationSetReader(cset, pre), StaticQuantConfig(max_images=3), workdir=tmp_path)
    assert run.images == 3 and run.batches == 3

    class Empty:
        batch_size = 1

        def __len__(self):
            return 0

    with pytest.raises(CalibrationSetError, match="no images to calibrate on"):
        collect_ranges(model, Empty(), StaticQuantConfig(), workdir=tmp_path)


def _ort_histogram_one_call(batches, method, symmetric, num_bins, percentile=99.999):
    from onnxruntime.quantization.calibrate import HistogramCollector

    c = HistogramCollector(method=method, symmetric=symmetric, num_bins=num_bins, num_quantized_bins=num_bins, percentile=percentile, scenario="same")
    with quiet_ort():
        c.collect({"t": np.concatenate(batches)})
        return c, c.compute_collection_result()["t"]


@pytest.mark.parametrize("absolute", [True, False])
def test_fine_histogram_growing_range_within_tolerance(absolute):
    """Batches whose range grows (the fine grid widens by powers of two) and with NaNs and all-zero batches."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from quantkit.quantize.calibration.fine_histogram import FineHistogramState

    rng = np.random.default_rng(0)
    batches = [np.zeros(1000, np.float32)] + [(rng.standard_normal(20000) * s + o).astype(np.float32) for s, o in [(0.1, 0), (1, 0.5), (0.5, -1), (7, 0), (2, 3)]]
    batches[2][5] = np.nan
    nb, p = 2048, 99.99
    need = (100 - p) / (100 if absolute else 200)
    st = FineHistogramState(["t"], nb, absolute, need)
    for b in batches:
        st.update("t", b)
    assert st.unresolved() == []
    _, ref = _ort_histogram_one_call([b[~np.isnan(b)] for b in batches], "percentile", absolute, nb, p)
    c = HistogramCollector(method="percentile", symmetric=absolute, num_bins=nb, num_quantized_bins=nb, percentile=p, scenario="same")
    c.histogram_dict = st.histogram_dict()
    with quiet_ort():
        got = c.compute_collection_result()["t"]
    t = max(abs(float(np.nanmin(np.concatenate(batches)))), abs(float(np.nanmax(np.concatenate(batches)))))
    for r, g in zip(ref[:2], got[:2]):
        assert abs(float(r) - float(g)) <= (1.5 if absolute else 2.5) * t / nb, (r, g)
    h = c.histogram_dict["t"]
    assert int(h[0].sum()) == sum(int(np.count_nonzero(~np.isnan(b))) for b in batches)
    assert h[2] == np.nanmin(np.concatenate(batches)) and h[3] == np.nanmax(np.concatenate(batches))


def test_fine_histogram_flags_tails_that_outgrew_the_first_batch():
    """A first batch, then many more elements all inside its cut-off: the global percentile edge falls below the
    cut-off (the exactly counted tail is too light), so the tensor is flagged for the exact second pass, and
    the repaired histogram gives ORT's one-call thresholds bit for bit."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from quantkit.quantize.calibration.fine_histogram import FineHistogramState
    from quantkit.quantize.calibration.histogram import HistogramState

    rng = np.random.default_rng(1)
    batches = [rng.uniform(-1, 1, 10000).astype(np.float32)] + [rng.uniform(0.5, 0.9, 4_000_000).astype(np.float32) for _ in range(3)]
    st = FineHistogramState(["t"], 2048, True, 1e-5)
    for b in batches:
        st.update("t", b)
    assert st.unresolved() == ["t"]
    mn, mx, amin = st.stats["t"]
    st.repair = HistogramState(["t"], True, 2048)
    st.repair.stats["t"] = [mn, mx, amin, max(abs(mn), abs(mx))]
    for b in batches:
        st.repair.count("t", b)
    _, ref = _ort_histogram_one_call(batches, "percentile", True, 2048)
    c = HistogramCollector(method="percentile", symmetric=True, num_bins=2048, num_quantized_bins=2048, percentile=99.999, scenario="same")
    c.histogram_dict = st.histogram_dict()
    with quiet_ort():
        got = c.compute_collection_result()["t"]
    assert np.array_equal(np.asarray(ref[:2]), np.asarray(got[:2]))


def test_entropy_with_default_bins_warns_that_it_equals_minmax(env, tmp_path):
    root, model, cset, pre = env
    run = collect_ranges(model, CalibrationSetReader(cset, pre), StaticQuantConfig(method="entropy", max_images=2), workdir=tmp_path)
    (w,) = run.warnings
    assert "gave all 331 tensors their MinMax ranges" in w and "set num_bins: 2048" in w
    kl = collect_ranges(model, CalibrationSetReader(cset, pre), StaticQuantConfig(method="entropy", num_bins=136, max_images=2), workdir=tmp_path)
    assert kl.warnings == ()


@pytest.mark.parametrize("cfg", [StaticQuantConfig(), StaticQuantConfig(method="entropy", num_bins=256, num_quantized_bins=128),
                                 StaticQuantConfig(method="distribution"), StaticQuantConfig(method="percentile")],
                         ids=["minmax", "entropy-kl", "distribution", "percentile"])
def test_variable_shaped_tensors_equal_ort_on_all_values(tmp_path, cfg):
    """ORT's one-call histogram calibrators crash on a tensor whose shape changes between images (np.asarray of a
    ragged list). quantkit histograms whatever arrives; its ranges equal ORT's HistogramCollector (MinMax: ORT's
    formulas) given every value the tensor held, bit for bit (percentile: within its stated tolerance)."""
    import onnxruntime as ort
    from onnxruntime.quantization.calibrate import HistogramCollector
    from test_quantize_fixtures import write_model_intake

    from models import variable_shape_model

    intake = write_model_intake(variable_shape_model(16), tmp_path / "intake", 16)
    cset = CalibrationSet.load(make_set(tmp_path / "set", 5, size=32))
    pre = ExportNote.load(intake / "export_note.json").preprocessing
    run = collect_ranges(intake / "model.onnx", CalibrationSetReader(cset, pre), cfg, workdir=tmp_path)
    assert "vals" in run.variable_shape and "vals" in run.tensors.data
    tap = ort.InferenceSession(str(tmp_path / "tap_model.onnx"), _disabled())
    names = sorted(run.tensors.data)
    seen = {n: [] for n in names}
    for _, batch in CalibrationSetReader(cset, pre).iter_batches():
        for n, v in zip(names, tap.run(names, {"x": batch})):
            seen[n].append(v.reshape(-1))
    allv = {n: np.concatenate(v) for n, v in seen.items()}
    assert len({v.size for v in seen["vals"]}) > 1  # the shape really changed
    if cfg.method == "minmax":
        ref = {n: (v.min(), v.max()) for n, v in allv.items()}
        assert all(float(run.tensors[n].range_value[0][0]) == ref[n][0] and float(run.tensors[n].range_value[1][0]) == ref[n][1] for n in names)
        return
    p = ort_bridge.calibrator_params(cfg)
    c = HistogramCollector(method=p.method, symmetric=p.symmetric, num_bins=p.num_bins, num_quantized_bins=p.num_quantized_bins,
                           percentile=p.percentile, scenario=p.scenario)
    with quiet_ort():
        c.collect(allv)
        ref = c.compute_collection_result()
    for n in names:
        a = np.asarray(ref[n][:2] if isinstance(ref[n], tuple) else ref[n].range_value, np.float64)
        b = np.asarray(run.tensors[n].range_value, np.float64)
        if cfg.method == "percentile":
            t = float(np.abs(allv[n]).max())
            assert np.all(np.abs(a - b) <= 1.5 * t / p.num_bins * (1 + 1e-6)), n
        else:
            assert np.array_equal(a, b), n


def _disabled():
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


@pytest.mark.parametrize("method", ["minmax", "minmax-ema", "percentile", "entropy", "distribution"])
def test_states_round_trip_through_plain_arrays(env, tmp_path, method):
    """Every calibration state saves to arrays (np.savez, no pickle) and loads back to the same ranges, bit for bit."""
    import io

    from quantkit.quantize.calibration.calibrate import make_state
    from quantkit.quantize.calibration.tap import TapSession

    root, model, cset, pre = env
    cfg = StaticQuantConfig(moving_average=True) if method == "minmax-ema" else StaticQuantConfig(method=method)
    plan = ort_bridge.calibration_plan(model, cfg, ort_bridge.default_op_types("qdq"), tmp_path)
    st = make_state(plan.params, list(plan.tensors))
    r = CalibrationSetReader(cset, pre)
    r.set_range(0, 3)
    with TapSession(plan.tap_model, list(plan.tensors)) as tap:
        for _, batch in r.iter_batches():
            for n, v in zip(plan.tensors, tap.run({"x": batch})):
                st.fold(1, n, v)
    buf = io.BytesIO()
    np.savez(buf, **st.to_arrays())
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        back = type(st).from_arrays({k: z[k] for k in z.files})
    for name in plan.tensors[:60]:
        assert back.extremes(name) == st.extremes(name)
    if hasattr(st, "histogram_dict"):
        h0, h1 = st.histogram_dict(), back.histogram_dict()
        assert h0.keys() == h1.keys() and all(all(np.array_equal(a, b) for a, b in zip(h0[k], h1[k])) for k in h0)
    else:
        p0, p1 = st.pairs(plan.params.symmetric), back.pairs(plan.params.symmetric)
        assert all(np.array_equal(p0[k][0], p1[k][0]) and np.array_equal(p0[k][1], p1[k][1]) for k in p0)


def test_foreign_and_pickled_checkpoints_are_ignored_with_a_log_line(tmp_path, caplog):
    import pickle  # noqa: S403 -- writes an old-style checkpoint to prove it is never unpickled

    from quantkit.quantize.calibration import checkpoint as ck

    key = ck.CheckpointKey.for_run("m", "s", "c")
    old = tmp_path / "old"
    old.write_bytes(pickle.dumps({"version": 2, "key": "x", "pass": 1, "done": 3, "state": {}}))
    with caplog.at_level("WARNING", logger="quantkit.quantize.calibration.checkpoint"):
        assert ck.load(old, key) is None
        ck.save(tmp_path / "new", key, 1, 4, {"a": np.arange(3)})
        got = ck.load(tmp_path / "new", key)
        assert got is not None and (got.pass_no, got.done) == (1, 4) and np.array_equal(got.arrays["a"], np.arange(3))
        import dataclasses

        assert ck.load(tmp_path / "new", dataclasses.replace(key, set_id="other", numpy="0")) is None
    assert "not a readable checkpoint" in caplog.text
    assert "made for another run (set_id 's' != 'other'; numpy" in caplog.text


def _chain_model(size: int = 16):
    """x -> Conv -> Add(3) -> Clip(0, 6) -> Div(6) -> Mul(c, .) (hard-swish) ; Conv -> Relu ; Sub(1, .) ; Mul(-2) ; Sub(., 0.5)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = {k: numpy_helper.from_array(np.array(v, np.float32), k) for k, v in {"three": 3, "zero": 0, "six": 6, "one": 1, "m2": -2, "half": 0.5}.items()}
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "three"], ["a"], name="add3"), helper.make_node("Clip", ["a", "zero", "six"], ["k"], name="clip"),
             helper.make_node("Div", ["k", "six"], ["d"], name="div6"), helper.make_node("Mul", ["c", "d"], ["hs"], name="hswish"),
             helper.make_node("Relu", ["hs"], ["r"], name="relu"), helper.make_node("Sub", ["one", "r"], ["s"], name="rsub"),
             helper.make_node("Mul", ["s", "m2"], ["n"], name="neg2"), helper.make_node("Sub", ["n", "half"], ["y"], name="sub")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, size, size])], [w, *c.values()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.parametrize("cfg", [StaticQuantConfig(op_types_to_quantize=("Conv", "Add", "Clip", "Div", "Mul", "Relu", "Sub")),
                                 StaticQuantConfig(op_types_to_quantize=("Conv", "Add", "Clip", "Div", "Mul", "Relu", "Sub"), moving_average=True),
                                 StaticQuantConfig(op_types_to_quantize=("Conv", "Add", "Clip", "Div", "Mul", "Relu", "Sub"), method="entropy")],
                         ids=["minmax", "minmax-ema", "entropy"])
def test_derived_ranges_equal_ort_and_are_read_once(tmp_path, cfg, monkeypatch):
    """Ranges of Relu / Clip / scalar Add, Sub (both operand orders), Mul (negative too) and Div outputs are derived
    from their inputs' after the first image (quantize.derive): ORT's one-call calibrator gives the same, bit for
    bit, and the calibration session reduces those tensors on the first image only."""
    from test_quantize_fixtures import write_model_intake

    from quantkit.quantize.calibration import tap as tapmod

    intake = write_model_intake(_chain_model(), tmp_path / "intake", 16)
    cset = CalibrationSet.load(make_set(tmp_path / "set", 5, size=32))
    pre = ExportNote.load(intake / "export_note.json").preprocessing
    ops = list(cfg.op_types_to_quantize)
    reads = []
    real = tapmod.TapSession.__init__

    def spy(self, model_path, names, **kw):
        reads.append(list(names))
        real(self, model_path, names, **kw)

    reduced = []
    real_extrema = tapmod.ExtremaSession.__init__

    def spy_extrema(self, model_path, names, **kw):
        reduced.append(list(names))
        real_extrema(self, model_path, names, **kw)

    monkeypatch.setattr(tapmod.TapSession, "__init__", spy)
    monkeypatch.setattr(tapmod.ExtremaSession, "__init__", spy_extrema)
    run = collect_ranges(intake / "model.onnx", CalibrationSetReader(cset, pre), cfg, workdir=tmp_path, op_types=ops)
    assert [set(r) for r in reduced] == [set(run.tensors.data), {"c", "hs", "x"}]  # a, k, d, r, s, n, y: derived
    g = onnx.load(str(intake / "model.onnx")).graph
    io = {o.name for o in g.output} | {i.name for i in g.input}
    assert all(set(r) <= io for r in reads), (reads, io)  # only the graph outputs are read out whole (the input is the feed)
    ref = _ort_one_call(intake / "model.onnx", CalibrationSetReader(cset, pre), cfg, tmp_path, ops)
    assert set(ref.data) == set(run.tensors.data)
    for name in ref.data:
        a, b = ref[name].range_value, run.tensors[name].range_value
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), name


def test_a_derivation_that_disagrees_on_the_first_image_is_not_used(tmp_path, monkeypatch):
    """Were an ORT kernel to round differently from the derivation, the first image shows it and the tensor is
    read on every image instead."""
    from test_quantize_fixtures import write_model_intake

    from quantkit.quantize.calibration import derive

    real = derive.Derivation.apply

    def off_by_one_ulp_for_div(self, v):
        out = real(self, v)
        return np.nextafter(out, np.inf, dtype=out.dtype) if self.op == "Div" else out

    monkeypatch.setattr(derive.Derivation, "apply", off_by_one_ulp_for_div)
    intake = write_model_intake(_chain_model(), tmp_path / "intake", 16)
    cset = CalibrationSet.load(make_set(tmp_path / "set", 3, size=32))
    pre = ExportNote.load(intake / "export_note.json").preprocessing
    cfg = StaticQuantConfig(op_types_to_quantize=("Conv", "Add", "Clip", "Div", "Mul", "Relu", "Sub"))
    run = collect_ranges(intake / "model.onnx", CalibrationSetReader(cset, pre), cfg, workdir=tmp_path, op_types=list(cfg.op_types_to_quantize))
    ref = _ort_one_call(intake / "model.onnx", CalibrationSetReader(cset, pre), cfg, tmp_path, list(cfg.op_types_to_quantize))
    assert all(np.asarray(ref[n].range_value).tobytes() == np.asarray(run.tensors[n].range_value).tobytes() for n in ref.data)


class _Feeds:
    """ORT's reader protocol over fixed arrays (``set_range`` in images)."""

    def __init__(self, arrays: list[np.ndarray], name: str = "x") -> None:
        self.arrays, self.name, self.pos, self.end = arrays, name, 0, len(arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def set_range(self, start: int, end: int) -> None:
        self.pos, self.end = start, end

    def get_next(self):
        if self.pos >= self.end:
            return None
        self.pos += 1
        return {self.name: self.arrays[self.pos - 1]}


def test_minmax_reduced_in_ort_ignores_nan_wherever_it_lies(tmp_path):
    """After the first image the tensors' minima and maxima are reduced inside ORT (tap.ExtremaSession), whose
    ReduceMin gives NaN for a NaN first element and may skip values after a NaN elsewhere; an image whose
    reductions or graph outputs show a NaN is read whole, so the ranges are numpy's fmin/fmax over every value."""
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph([helper.make_node("Sqrt", ["x"], ["s"]), helper.make_node("Mul", ["s", "k"], ["y"])], "nan",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [numpy_helper.from_array(np.full((1, 1, 4, 4), 0.5, np.float32), "k")])  # a tensor: no derivation
    path = tmp_path / "nan.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    rng = np.random.default_rng(0)
    images = [rng.uniform(0.1, 4.0, (1, 1, 4, 4)).astype(np.float32) for _ in range(4)]
    images[1][0, 0, 0, 1] = -1.0  # NaN inside the tensor: ORT's ReduceMin may then miss the minimum after it
    images[1][0, 0, 3, 3] = 0.01  # the minimum, sqrt 0.1
    images[2][0, 0, 0, 0] = -9.0  # NaN as the first element: ORT's ReduceMin would give NaN
    images[3][0, 0, 3, 3] = 25.0  # the maximum comes after the NaN images
    run = collect_ranges(path, _Feeds(images), StaticQuantConfig(), workdir=tmp_path, op_types=["Mul"])
    with np.errstate(invalid="ignore"):
        s = np.sqrt(np.stack(images))
    lo, hi = np.asarray(run.tensors["s"].range_value, np.float32).reshape(-1)
    assert lo == np.float32(0.1) == np.nanmin(s) and hi == 5.0
    ylo, yhi = np.asarray(run.tensors["y"].range_value, np.float32).reshape(-1)
    assert yhi == 2.5 and ylo == np.nanmin(s * np.float32(0.5))


def test_optimized_calibration_graph_differs_by_float_rounding_only(env, tmp_path):
    """``calibration_graph: optimized`` runs the calibration session at ORT's ``all`` level (NCHWc convolutions): on
    the real detector every range stays within 1e-4 (relative to the tensor's range width) of the exact ones,
    which equal ORT's calibrator bit for bit; the same tensors are calibrated."""
    root, model, cset, pre = env
    exact = collect_ranges(model, CalibrationSetReader(cset, pre), StaticQuantConfig(), workdir=_mkdir(tmp_path / "e"),
                           op_types=ort_bridge.default_op_types("qdq"))
    fast = collect_ranges(model, CalibrationSetReader(cset, pre), StaticQuantConfig(calibration_graph="optimized"),
                          workdir=_mkdir(tmp_path / "o"), op_types=ort_bridge.default_op_types("qdq"))
    assert set(exact.tensors.data) == set(fast.tensors.data) and len(exact.tensors.data) > 100
    worst = 0.0
    for name, td in exact.tensors.data.items():
        a = np.asarray(td.range_value, np.float64).reshape(-1)
        b = np.asarray(fast.tensors[name].range_value, np.float64).reshape(-1)
        worst = max(worst, float(np.max(np.abs(a - b))) / max(float(a[1] - a[0]), 1e-12))
    assert worst <= 1e-4, worst


class _ListReader:
    """A calibration reader over in-memory batches ``[{"x": array}, ...]`` given as the arrays of input ``x``."""

    batch_size = 1

    def __init__(self, batches):
        self.batches, self.i, self.s, self.e = batches, 0, 0, len(batches)

    def __len__(self):
        return len(self.batches)

    def set_range(self, s, e):
        self.s, self.e, self.i = s, e, s

    def get_next(self):
        if self.i >= self.e:
            return None
        self.i += 1
        return {"x": self.batches[self.i - 1]}


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def test_extrema_session_names_tensors_of_another_shape_than_declared(tmp_path):
    """The reduced tensors are not read out, so their shapes are checked with ``Shape`` outputs: a tensor the model
    declares at a wrong shape, or leaves open, is named as variable-shaped (the engine's ORT-crash fallback reads
    that list), one declared right is not."""
    from onnx import TensorProto, helper

    from quantkit.quantize.calibration.tap import ExtremaSession

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["n"]), helper.make_node("Abs", ["n"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["y"])]
    g = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 3]),  # wrong: it is [1, 4]
                           helper.make_tensor_value_info("n", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 4])])
    path = tmp_path / "tap_model.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    x = np.array([[-1.0, 2.0, 0.5, 3.0]], np.float32)
    with ExtremaSession(path, ["r", "n", "m"], graph_outputs=["y"]) as s:
        extremes, whole, _ = s.run({"x": x})
        assert s.dynamic_names == {"r", "m"}
    assert {k: (float(a), float(b)) for k, (a, b) in extremes.items()} == {"r": (0.0, 3.0), "n": (-3.0, 0.0), "m": (0.0, 3.0)}
    assert set(whole) == {"y"}


def test_extrema_model_reduces_each_tensor_right_after_it_is_written(env, tmp_path):
    """Each tensor's ``ReduceMin`` / ``ReduceMax`` / ``Shape`` follow the node that writes it (not the end of the graph,
    where ORT's default order ran them and kept every reduced tensor alive until then), and the session runs them in
    ``priority_based`` order; the model is otherwise the tap model, so the extremes are the tensors' own."""
    from quantkit.quantize.calibration.tap import (
        MAX_SUFFIX,
        MIN_SUFFIX,
        SHAPE_SUFFIX,
        ExtremaSession,
        write_extrema_model,
    )

    _, prepared, _, _ = env
    plan = ort_bridge.calibration_plan(prepared, StaticQuantConfig(), ort_bridge.default_op_types("qdq"), tmp_path)
    reduced, _, _, _ = write_extrema_model(plan.tap_model, list(plan.tensors), set(), tmp_path / "extrema.onnx", plan.graph_outputs)
    nodes = onnx.load(str(tmp_path / "extrema.onnx")).graph.node
    written = {o: i for i, n in enumerate(nodes) for o in n.output}
    for n in reduced:
        readers = [written[n + s] for s in (MIN_SUFFIX, MAX_SUFFIX, SHAPE_SUFFIX) if n + s in written]
        assert len(readers) >= 2
        producer = written.get(n, -1)
        assert all(0 < r - producer <= 3 for r in readers), n  # the next nodes after its producer
    with ExtremaSession(plan.tap_model, list(plan.tensors), graph_outputs=plan.graph_outputs) as s:
        assert s.tap.runner.execution_order == "priority_based"


def test_ort_runtime_refuses_an_unknown_execution_order():
    from quantkit.errors import ConfigError
    from quantkit.runtimes.ort import OrtRuntime

    with pytest.raises(ConfigError, match="execution_order: 'fastest' is not one of default, priority_based"):
        OrtRuntime(b"", execution_order="fastest")


@pytest.mark.parametrize("cfg", [StaticQuantConfig(method="percentile"), StaticQuantConfig(method="percentile", calibration_symmetric=False)],
                         ids=["absolute", "signed"])
def test_percentile_read_by_tails_equals_reading_whole_bit_for_bit(env, cfg, tmp_path, monkeypatch):
    """After the first image the percentile reads each tensor by its tails inside ORT (reading.TensorReader,
    tap.Cut): exact min / max (and min|x|), and only the rows holding an element beyond the cut-offs. Its ranges and
    histograms are those of reading every tensor whole, bit for bit, and the tails were read."""
    from quantkit.quantize.calibration import fine_histogram, tap

    root, model, cset, pre = env
    seen: list[int] = []
    real = tap.ExtremaSession.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        seen.append(len(self.tailed))

    monkeypatch.setattr(tap.ExtremaSession, "__init__", spy)
    tails = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=_mkdir(tmp_path / "t"))
    assert seen and seen[0] > 0.75 * len(tails.tensors.data)  # those under 1 / tail (1000) elements are counted whole
    monkeypatch.setattr(fine_histogram.FineHistogramState, "cut_for_tails", lambda self, name: None)
    seen.clear()
    whole = collect_ranges(model, CalibrationSetReader(cset, pre), cfg, workdir=_mkdir(tmp_path / "w"))
    assert seen == []
    assert set(tails.tensors.data) == set(whole.tensors.data)
    assert tails.variable_shape == whole.variable_shape == ()  # the session's own row outputs are not calibrated tensors
    for name, td in whole.tensors.data.items():
        other = tails.tensors[name]
        assert np.asarray(td.range_value).tobytes() == np.asarray(other.range_value).tobytes(), name
        assert np.array_equal(td.hist, other.hist), name


def test_percentile_tails_fall_back_to_whole_reading_on_nan(tmp_path, caplog):
    """A NaN in a tensor read by its tails: the image is read again whole, and NaNs are dropped (as the whole
    path does), so the range is that of the image without them."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sqrt", ["x"], ["s"]), helper.make_node("Add", ["r", "s"], ["y"])]
    g = helper.make_graph(nodes, "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    rng = np.random.default_rng(0)
    batches = [rng.uniform(0.0, 4.0, (1, 4096)).astype(np.float32) for _ in range(3)]
    batches[2][0, :7] = -1.0  # sqrt(-1) = NaN in s and y on the third image

    cfg = StaticQuantConfig(method="percentile", percentile=99.9, calibration_symmetric=False)
    with caplog.at_level("INFO", logger="quantkit.quantize.calibration.reading"):
        run = collect_ranges(model, _ListReader(batches), cfg, workdir=tmp_path, op_types=["Relu", "Sqrt", "Add"])
    assert "NaN on an image" in caplog.text
    clean = [b[b >= 0] for b in batches]
    s_all = np.sqrt(np.concatenate(clean).astype(np.float32))
    lo, hi = (float(v) for v in run.tensors["s"].range_value)
    assert np.isfinite(lo) and np.isfinite(hi)
    assert float(s_all.min()) <= lo <= hi <= float(s_all.max())


def _piled(rng, n, scale=3.0):
    """One batch of ``n`` values shaped like the outputs of a MobileNet block: ``Clip(x, 0, 6)`` (piles at 0 and 6),
    hard-swish (a pile near its minimum -0.375) and a plain signed tensor, as a dict of float32 arrays."""
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    return {"clip": np.clip(x + 1.0, 0.0, 6.0), "hswish": (x * np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(np.float32), "plain": x}


@pytest.mark.parametrize("absolute", [True, False])
def test_fine_histogram_pins_saturations_and_equals_ort(absolute):
    """A tensor piled at a saturation (Clip's 0 and 6, hard-swish's minimum) is pinned after the first batch: later
    batches read nothing on that side, and the percentile thresholds are ORT's one-call thresholds bit for bit; a
    plain tensor is not pinned."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from quantkit.quantize.calibration.fine_histogram import FineHistogramState

    rng = np.random.default_rng(3)
    batches = [_piled(rng, 200_000) for _ in range(6)]
    need = 1e-5 if absolute else 5e-6
    for name in ("clip", "hswish", "plain"):
        st = FineHistogramState([name], 2048, absolute, need, batches=len(batches))
        for b in batches:
            st.update(name, b[name])
        pin = st.pin.get(name, [None, None])
        if name == "clip":
            assert pin[1] is not None and (absolute or pin[0] is not None)  # 6, and (signed) 0
        if name == "hswish" and not absolute:
            assert pin[0] is not None  # the pile near -0.375
        if name == "plain":
            assert name not in st.pin
        assert st.unresolved() == []
        _, ref = _ort_histogram_one_call([b[name] for b in batches], "percentile", absolute, 2048)
        c = HistogramCollector(method="percentile", symmetric=absolute, num_bins=2048, num_quantized_bins=2048, percentile=99.999, scenario="same")
        c.histogram_dict = st.histogram_dict()
        with quiet_ort():
            got = c.compute_collection_result()[name]
        assert np.array_equal(np.asarray(ref[:2], np.float32), np.asarray(got[:2], np.float32)), (name, ref[:2], got[:2])


def test_fine_histogram_pin_outgrown_reads_beyond_the_first_extreme():
    """A pile that is not a saturation (an image's background level, later images brighter): the pinned side still
    reads every element beyond the first batch's extreme, so the edge falls in the exactly counted region and no
    recount is needed; thresholds within the stated tolerance of ORT's."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from quantkit.quantize.calibration.fine_histogram import FineHistogramState

    rng = np.random.default_rng(4)

    def image(top):
        v = rng.uniform(-0.5, top - 0.05, 100_000).astype(np.float32)
        v[:20_000] = top  # background: 20 % at the image's brightest level
        return v

    batches = [image(0.9)] + [image(1.0) for _ in range(5)]
    st = FineHistogramState(["x"], 2048, True, 1e-5, batches=len(batches))
    for b in batches:
        st.update("x", b)
    assert st.pin["x"][1] is not None and float(st.cut["x"][1]) > 0.9  # pinned, reading only |x| > 0.9 from then on
    assert st.unresolved() == []
    _, ref = _ort_histogram_one_call(batches, "percentile", True, 2048)
    c = HistogramCollector(method="percentile", symmetric=True, num_bins=2048, num_quantized_bins=2048, percentile=99.999, scenario="same")
    c.histogram_dict = st.histogram_dict()
    with quiet_ort():
        got = c.compute_collection_result()["x"]
    assert all(abs(float(r) - float(g)) <= 1.5 * 1.0 / 2048 for r, g in zip(ref[:2], got[:2])), (ref[:2], got[:2])


@pytest.mark.parametrize("cfg", [StaticQuantConfig(method="percentile"), StaticQuantConfig(method="percentile", calibration_symmetric=False)],
                         ids=["absolute", "signed"])
def test_percentile_pinned_tensors_equal_ort_and_reading_whole(tmp_path, cfg, monkeypatch):
    """Through the calibration (tails read inside ORT): a Conv -> Clip(0, 6) -> hard-swish model at 128x128, so its
    Clip and hard-swish outputs are pinned; every range equals ORT's own calibrator's (one call over all images) and
    reading every tensor whole, bit for bit (the others: within the stated tolerance), and no tensor needs the exact
    second pass."""
    from onnx import TensorProto, helper, numpy_helper

    from quantkit.quantize.calibration import fine_histogram

    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    three, six, zero = (numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((3.0, "three"), (6.0, "six"), (0.0, "zero")))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Clip", ["c", "zero", "six"], ["r6"]),
             helper.make_node("Add", ["c", "three"], ["c3"]), helper.make_node("Clip", ["c3", "zero", "six"], ["g"]),
             helper.make_node("Mul", ["c", "g"], ["cg"]), helper.make_node("Div", ["cg", "six"], ["hs"]),
             helper.make_node("Add", ["hs", "r6"], ["y"])]
    g = helper.make_graph(nodes, "piles", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 128, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 128, 128])], initializer=[w, three, six, zero])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    batches = [(rng.standard_normal((1, 3, 128, 128)) * s).astype(np.float32) for s in (1.0, 1.2, 0.9, 1.1, 1.0, 1.3)]

    pinned, passes = set(), []
    real_end = fine_histogram.FineHistogramState.end_pass

    def spy(self, pass_no):
        pinned.update(self.pin)
        passes.append(real_end(self, pass_no))
        return passes[-1]

    monkeypatch.setattr(fine_histogram.FineHistogramState, "end_pass", spy)
    ops = ["Conv", "Clip", "Add", "Mul", "Div"]
    run = collect_ranges(model, _ListReader(batches), cfg, workdir=_mkdir(tmp_path / "t"), op_types=ops)
    assert {"r6", "g"} <= pinned and passes == [False]  # the Clip outputs (at 6; signed: and 0); no recount
    ref = _ort_one_call(model, _ListReader(batches), cfg, tmp_path, op_types=ops)
    monkeypatch.setattr(fine_histogram.FineHistogramState, "cut_for_tails", lambda self, name: None)
    whole = collect_ranges(model, _ListReader(batches), cfg, workdir=_mkdir(tmp_path / "w"), op_types=ops)
    assert set(run.tensors.data) == set(ref.data) == set(whole.tensors.data)
    for name in ref.data:
        a, b = np.asarray(ref[name].range_value, np.float32), np.asarray(run.tensors[name].range_value, np.float32)
        assert np.asarray(whole.tensors[name].range_value).tobytes() == b.tobytes(), name
        if name in pinned:
            assert a.tobytes() == b.tobytes(), (name, a, b)
        else:  # the stated tolerance (test_percentile_within_stated_tolerance)
            t = float(np.max(np.abs(np.concatenate([a, b]))))
            assert np.all(np.abs(a - b) <= (1.5 if cfg.calibration_symmetric is None else 2.5) * t / 2048 * (1 + 1e-6)), (name, a, b)


def test_tap_session_of_graph_inputs_only_runs_nothing(tmp_path):
    """A pass that reads only graph inputs (the percentile's exact recount of the input alone, seen on the PP-OCR
    recognizer) returns them without running ORT, which refuses a run with no outputs."""
    from onnx import TensorProto, helper

    from quantkit.quantize.calibration.tap import TapSession

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    x = np.arange(4, dtype=np.float32).reshape(1, 4) - 2
    with TapSession(model, ["x"]) as tap:
        (got,) = tap.run({"x": x})
    assert np.array_equal(got, x)

"""``quantkit measure``: FP32 / deployed / candidate timed interleaved per runtime and thread count, written beside the
report (never into an artifact DVC hashes)."""

from __future__ import annotations

import json
import shutil

import pytest
from test_bundle_fixtures import make_pipeline
from test_quantize_fixtures import make_set

from quantkit.cli.main import main
from quantkit.errors import ConfigError
from quantkit.report.measure import MeasureConfig, measure, write_measurements
from quantkit.runtimes import available_runtimes

FAST = MeasureConfig(runtimes=("onnxruntime", "openvino"), threads=(1,), repeats=3, warmup=0, images=2)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("measure") / "work" / "tiny"
    pipe = make_pipeline(root)
    shutil.copytree(pipe["deployed"], root / "quantize" / "candidate")
    return root, make_set(root.parent / "site", 2, size=96, name="site")


def test_every_variant_on_every_installed_runtime(work, tmp_path):
    root, golden = work
    result = measure([root], FAST, image_set=golden)
    timed = {(r["variant"], r["runtime"]) for r in result["latency"]}
    runtimes = [r for r in FAST.runtimes if r in available_runtimes()]
    floats = {"onnxruntime": ("fp32",), "openvino": ("fp32", "fp32-default")}  # OpenVINO also at its own default precision
    assert timed == {(v, rt) for rt in runtimes for v in (*floats[rt], "deployed", "candidate")}
    assert set(result["skipped"]) == set(FAST.runtimes) - set(runtimes)
    for r in result["latency"]:
        assert r["model"] == "tiny" and r["threads"] == 1 and r["median_ms"] > 0
        assert (r["vs_fp32"] is None) == (r["variant"] in floats[r["runtime"]]) and (r["vs_deployed"] is None) == (r["variant"] != "candidate")
        best = min((x for x in result["latency"] if x["runtime"] == r["runtime"] and x["variant"] in floats[r["runtime"]]), key=lambda x: x["median_ms"])
        assert r["best_float"] == best["variant"]
        h = 0.0005  # the medians are rounded to 1 us: the ratio (of the unrounded medians) lies within their rounding
        assert (best["median_ms"] - h) / (r["median_ms"] + h) - 1e-3 <= r["vs_best_float"] <= (best["median_ms"] + h) / max(r["median_ms"] - h, 1e-9) + 1e-3
    assert result["slower_than_fp32"] == [f"tiny {r['variant']} {r['runtime']}@1" for r in result["latency"]
                                          if r["vs_fp32"] is not None and r["vs_fp32"] < 1]
    assert result["slower_than_best_float"] == [f"tiny {r['variant']} {r['runtime']}@1 (best float: {r['best_float']})"
                                                for r in result["latency"] if r["vs_fp32"] is not None and r["vs_best_float"] < 1]
    profiled = {(p["variant"], p["runtime"]) for p in result["node_time"]}
    assert profiled == {(v, rt) for rt in runtimes for v in ("deployed", "candidate")}
    for p in result["node_time"]:  # each runtime's own profile of one inference
        assert p["total_ms"] > 0 and 0 <= p["integer_kernel_share"] <= 1 and p["by_kind"]
        assert p["conversions"] == len(p["slowest_conversions"]) or p["conversions"] > 8
    paths = write_measurements(result, tmp_path / "machine")
    assert json.loads(paths["json"].read_text()) == result
    js = paths["js"].read_text()
    head = "window.QUANTKIT_MEASUREMENTS = [].concat(window.QUANTKIT_MEASUREMENTS || [], ["
    assert js.startswith(head) and js.endswith("]);\n") and json.loads(js[len(head):-4]) == result  # one entry per file, appended


def test_cli_table_and_bad_inputs(work, tmp_path, capsys):
    root, golden = work
    params = tmp_path / "params.yaml"
    params.write_text("measure: {runtimes: [onnxruntime], threads: [1], repeats: 3, warmup: 0, images: 1}\n")
    out = tmp_path / "reports" / "machine"
    assert main(["measure", "--work-dir", str(root), "--set", str(golden), "--params", str(params), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tiny" in text and "candidate" in text and "onnxruntime" in text and (out / "measurements.js").is_file()
    assert main(["measure", "--work-dir", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "FP32 intake model not found" in capsys.readouterr().err
    params.write_text("measure: {repeats: 1}\n")
    assert main(["measure", "--work-dir", str(root), "--params", str(params), "--out", str(out)]) == 2
    assert "measure.repeats: 1 must be >= 3" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="measure.runtimes"):
        MeasureConfig(runtimes=("tensorrt",))


def test_require_speedup_exits_1_when_int8_is_slower_than_the_best_float_run(work, tmp_path, monkeypatch, capsys):
    import quantkit.report.measure as m

    root, golden = work
    rows = [{"model": "tiny", "variant": v, "runtime": "openvino", "threads": 1, "median_ms": ms, "vs_fp32": vs, "vs_deployed": None,
             "best_float": "fp32-default", "vs_best_float": round(10.0 / ms, 3)}
            for v, ms, vs in (("fp32", 20.0, None), ("fp32-default", 10.0, None), ("deployed", 12.5, 1.6))]
    fake = {"schema_version": 2, "machine": "test", "method": "fake", "latency": rows, "skipped": {}, "slower_than_fp32": [],
            "slower_than_best_float": ["tiny deployed openvino@1 (best float: fp32-default)"]}
    monkeypatch.setattr(m, "measure", lambda *a, **k: fake)
    out = tmp_path / "machine"
    assert main(["measure", "--work-dir", str(root), "--set", str(golden), "--out", str(out)]) == 0
    assert main(["measure", "--work-dir", str(root), "--set", str(golden), "--out", str(out), "--require-speedup"]) == 1
    text = capsys.readouterr().out
    assert "slower than the runtime's best float run: tiny deployed openvino@1 (best float: fp32-default)" in text
    assert "0.80x" in text  # the deployed row against fp32-default


def test_each_target_runtime_times_the_file_placed_for_it(work, tmp_path, capsys):
    """params targets: on a target runtime, ``deployed`` is work/targets/<runtime>/quantize/model_int8.onnx (the file
    placed for it), labelled with its placement; a target whose file is missing is named in one line."""
    from quantkit.quantize import StaticQuantConfig, quantize, quantize_with_ranges

    root, golden = work
    work_dir = tmp_path / "tiny"
    shutil.copytree(root, work_dir)
    shutil.rmtree(work_dir / "quantize" / "deployed")  # a calibration of quantkit's own: its record keeps the ranges
    rec = quantize(work_dir / "intake", StaticQuantConfig(per_channel=True), out=work_dir / "quantize" / "deployed", calibration_set=golden)
    config = StaticQuantConfig.from_dict(rec.config).replace(placement="openvino")
    quantize_with_ranges(work_dir / "quantize" / "deployed", work_dir / "intake", config, out=work_dir / "targets" / "onnxruntime" / "quantize")
    fast = FAST.replace(runtimes=("onnxruntime",))
    result = measure([work_dir], fast, image_set=golden, targets={"onnxruntime": "openvino"})
    placed = {r["variant"]: r["placement"] for r in result["latency"]}
    assert placed == {"fp32": None, "deployed": "openvino", "candidate": rec.config.get("placement", "ort")}
    assert {p["variant"]: p["placement"] for p in result["node_time"]} == {"deployed": "openvino", "candidate": rec.config.get("placement", "ort")}
    params = tmp_path / "params.yaml"
    params.write_text("measure: {runtimes: [onnxruntime], threads: [1], repeats: 3, warmup: 0, images: 1}\n"
                      "targets: {onnxruntime: {placement: openvino}, openvino: {placement: openvino}}\n")
    shutil.rmtree(work_dir / "targets")
    out = tmp_path / "machine"
    assert main(["measure", "--work-dir", str(work_dir), "--set", str(golden), "--params", str(params), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the deployed model placed for onnxruntime (openvino) is missing; run 'dvc repro place@tiny-onnxruntime'" in err[0]
    assert not out.exists()

"""``quantkit calibset compose`` and ``quantkit fallback`` from the command line (tiny model, small sets)."""

from __future__ import annotations

import json

import pytest
from test_quantize_fixtures import make_set, make_tiny_intake

from quantkit.calibset import CalibrationSet
from quantkit.cli.main import main


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("fbcli")
    return (root, make_tiny_intake(root / "intake", size=16, channels=1), make_set(root / "a", 6, size=24, name="a"),
            make_set(root / "b", 4, size=24, name="b", seed=1))


def test_compose_spreads_picks_and_records_the_composition(env, tmp_path, capsys):
    root, intake, a, b = env
    assert main(["calibset", "compose", str(tmp_path / "mix"), "--from", f"{a}:3", "--from", str(b), "--name", "a+b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cs = CalibrationSet.load(tmp_path / "mix", verify=True)
    assert out["set_id"] == cs.set_id and cs.count == 3 + 4 and cs.name == "a+b"
    src = CalibrationSet.load(a)
    # 3 of 6 spread over the manifest order: indices 0, 2 (2.5 rounds to even), 5
    assert [e.file for e in cs.entries if e.file.startswith("images/a_")] == [f"images/a_{src.entries[i].file.split('/')[-1]}" for i in (0, 2, 5)]
    assert [(c["name"], c["images"], c["of"]) for c in cs.generator["composition"]] == [("a", 3, 6), ("b", 4, 4)]
    assert {e.sha256 for e in cs.entries} <= {e.sha256 for e in src.entries} | {e.sha256 for e in CalibrationSet.load(b).entries}


@pytest.mark.parametrize("args, msg", [
    (["--from", "{a}:99"], "asked for 99 images, the set has 6"),
    (["--from", "{a}:x"], "expected SET or SET:N"),
    (["--from", "{a}", "--from", "{a}:2"], "source set names must differ"),
    (["--from", "{root}/nope"], "nope: no such folder"),
    (["--from", "{a}", "--name", "x/y"], "use letters, digits and . _ + - only"),
])
def test_compose_errors_write_nothing(env, tmp_path, capsys, args, msg):
    root, intake, a, b = env
    args = [x.format(a=a, root=root) for x in args]
    if "--name" not in args:
        args += ["--name", "m"]
    assert main(["calibset", "compose", str(tmp_path / "mix"), *args]) != 0
    assert msg in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no half-built set, no leftover temporary folder


def test_fallback_cli_meets_target_and_reports_each_set(env, tmp_path, capsys):
    root, intake, a, b = env
    params = tmp_path / "params.yaml"
    params.write_text("fallback:\n  target: 0.9\n  latency: {threads: [1], repeats: 3, warmup: 0}\n"
                      "task:\n  adapter: db_text\n  options: {thresh: 0.5}\nquantize: {method: minmax}\n")
    rc = main(["fallback", str(intake), "--calibration-set", str(a), "--reference-set", str(a), "--reference-set", str(b),
               "--params", str(params), "--target", "0.999", "--out", str(tmp_path / "fb")])
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "fb" / "fallback.json").read_text())
    assert rc == (0 if saved["met"] else 1) and saved["target"] == 0.999 and saved["metric"] == "pixel_iou(thresh=0.5)"
    assert f"-> {saved['metric_after']:.4f}" in out and "  a " in out and "  b " in out and "latency onnxruntime 1 thread" in out
    assert set(saved["metric_after_per_set"]) == {"a", "b"} and (tmp_path / "fb" / "model_int8.onnx").is_file()
    assert "on held-out images" in out and "3 search + 3 held-out images of a, 2 search + 2 held-out images of b" in out
    assert [(f["name"], f["search_images"], len(f["heldout_files"])) for f in saved["figures"]] == [("a", 3, 3), ("b", 2, 2)]
    # from that output as a base: its ranges are reused, no calibration set needed
    rc = main(["fallback", str(intake), "--base", str(tmp_path / "fb"), "--reference-set", str(a), "--params", str(params),
               "--out", str(tmp_path / "fb2"), "--json"])
    again = json.loads(capsys.readouterr().out)
    assert rc == 0 and again["base_record_fingerprint"] == saved["record_fingerprint"]


@pytest.mark.parametrize("fail_if_missed, rc", [(True, 1), (False, 0)])
def test_fallback_cli_says_plainly_when_the_held_out_figure_misses(env, tmp_path, capsys, monkeypatch, fail_if_missed, rc):
    """The search met the target on its images and the held-out images miss it: the output says so in words, the
    written fallback.json says met false, and the command fails unless fallback.fail_if_missed is false."""
    import dataclasses

    import quantkit.quantize.fallback as fb
    from quantkit.artifacts import FallbackResult

    root, intake, a, b = env
    params = tmp_path / "params.yaml"
    params.write_text(f"fallback: {{target: 0.5, fail_if_missed: {str(fail_if_missed).lower()}, latency: {{threads: [1], repeats: 3, warmup: 0}}}}\n"
                      "task:\n  adapter: db_text\n  options: {thresh: 0.5}\nquantize: {method: minmax}\n")
    real = fb.precision_fallback

    def missed(*args, **kw):  # the real run, its held-out figure then taken as below the target
        r = real(*args, **kw)
        worse = dataclasses.replace(r, met=False, met_on_search=True, metric_after=0.4, metric_after_per_set={"a": 0.4},
                                    figures=tuple(dataclasses.replace(f, heldout=0.4) for f in r.figures))
        worse.save(kw["out"])
        return worse

    monkeypatch.setattr(fb, "precision_fallback", missed)
    assert main(["fallback", str(intake), "--calibration-set", str(a), "--reference-set", str(a), "--params", str(params),
                 "--out", str(tmp_path / "fb")]) == rc
    out = capsys.readouterr().out
    assert "target 0.5: NOT met" in out and "target NOT met on the held-out images: 0.4000 < 0.5, although the search images gave" in out
    assert "the search's own figure was optimistic" in out and FallbackResult.load(tmp_path / "fb").met is False


def test_fallback_cli_bad_target(env, tmp_path, capsys):
    root, intake, a, b = env
    assert main(["fallback", str(intake), "--calibration-set", str(a), "--reference-set", str(a), "--target", "95",
                 "--out", str(tmp_path / "fb")]) == 2
    assert "fallback.target: 95.0 must lie in (0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "fb").exists()


def test_compose_refuses_a_folder_inside_a_registered_set(env, capsys):
    root, intake, a, b = env
    assert main(["calibset", "compose", str(a / "images" / "nested"), "--from", f"{b}:1", "--name", "n"]) == 2
    assert "inside the registered set" in capsys.readouterr().err and not (a / "images" / "nested").exists()


@pytest.mark.parametrize("args, msg", [(["--max-reference-images", "0"], "max_reference_images: 0 must be >= 1"),
                                       ([], "pass --base DIR (a quantize output) or --calibration-set DIR")])
def test_fallback_cli_rejects_bad_counts_and_missing_inputs(env, tmp_path, capsys, args, msg):
    root, intake, a, b = env
    assert main(["fallback", str(intake), "--reference-set", str(a), *args, *([] if not args else ["--calibration-set", str(a)]),
                 "--out", str(tmp_path / "fb")]) == 2
    assert msg in capsys.readouterr().err and not (tmp_path / "fb").exists()


def _set(folder, name, camera, lighting, seed):
    import shutil

    from quantkit.calibset import register_set

    src = make_set(folder.parent / f"src-{name}", 3, size=24, name=name, seed=seed)
    shutil.copytree(src / "images", folder / "images")
    register_set(folder, name=name, kind="calibration", camera=camera, lighting=lighting, site="s")
    return folder


def _drift(path, name, camera, lighting, recalibrate):  # recalibrate: the drift check flagged the site set (DriftResult.changed)
    from quantkit.drift import DriftResult

    DriftResult(site_set={"name": name, "camera": camera, "lighting": lighting}, calibration_set={"name": "day"}, statistics=(),
                changes=(), clipping=None, changed=recalibrate, reasons=(), config={}).save(path)


def test_compose_cover_adds_the_pool_sets_of_the_flagged_conditions(tmp_path, capsys):
    day = _set(tmp_path / "day", "day", "cam1", "day", 0)
    night = _set(tmp_path / "night", "night", "cam1", "night", 1)
    (tmp_path / "drift").mkdir()
    _drift(tmp_path / "drift" / "a.json", "site-night", "cam1", "night", True)
    _drift(tmp_path / "drift" / "b.json", "site-cam2", "cam2", "day", True)
    _drift(tmp_path / "drift" / "c.json", "site-day", "cam1", "day", False)
    assert main(["calibset", "compose", str(tmp_path / "mix"), "--from", f"{day}:2", "--cover", str(tmp_path / "drift"),
                 "--pool", str(day), str(night), "--name", "mix"]) == 0
    err = capsys.readouterr().err
    cs = CalibrationSet.load(tmp_path / "mix")
    assert [(c["name"], c["images"]) for c in cs.generator["composition"]] == [("day", 2), ("night", 2)]
    assert "drift flagged site-night (cam1/night)" in err and "no --pool set covers cam2/day" in err
    _drift(tmp_path / "drift" / "a.json", "site-night", "cam1", "night", False)
    assert main(["calibset", "compose", str(tmp_path / "base-only"), "--from", f"{day}:2", "--cover", str(tmp_path / "drift" / "a.json"),
                 "--pool", str(night), "--name", "b"]) == 0
    assert [c["name"] for c in CalibrationSet.load(tmp_path / "base-only").generator["composition"]] == ["day"]
    assert main(["calibset", "compose", str(tmp_path / "x"), "--from", str(day), str(night), "--cover", str(tmp_path / "drift"),
                 "--name", "x"]) == 2
    assert "give one --from set" in capsys.readouterr().err


def test_fallback_settings_per_model_override_the_top_level_section(tmp_path):
    """`quantkit fallback --model NAME` reads models.NAME.fallback merged key by key over the top-level section;
    flags override single fields of either."""
    import argparse

    from quantkit.cli.fallback import OVERRIDES, build_config

    params = tmp_path / "params.yaml"
    params.write_text("models:\n  a: {file: a.onnx, fallback: {target: 0.9, search: sqnr}}\n  b: {file: b.onnx}\n"
                      "fallback: {target: 0.96, prune: 4}\n")

    def cfg(model, **flags):
        ns = argparse.Namespace(params=str(params), section="fallback", model=model, **{k: None for k in OVERRIDES})
        for k, v in flags.items():
            setattr(ns, k, v)
        return build_config(ns)

    a, b, top = cfg("a"), cfg("b"), cfg(None, target=0.97)
    assert (a.target, a.search, a.prune) == (0.9, "sqnr", 4)  # the model's keys merged over the top-level section
    assert (b.target, b.search, b.prune) == (0.96, "bisect", 4) and (top.target, top.prune) == (0.97, 4)
    # no target stated: the model's green line (report.min_agreement, AgreementPolicy.fallback_target), one number
    params.write_text("models:\n  a: {file: a.onnx, report: {min_agreement: 0.8}}\n  b: {file: b.onnx}\n"
                      "report: {min_agreement: 0.85}\nfallback: {prune: 4}\n")
    assert (cfg("a").target, cfg("b").target, cfg(None).target, cfg("a", target=0.97).target) == (0.8, 0.85, 0.85, 0.97)
    params.write_text("fallback: {prune: 4}\n")
    assert cfg(None).target == 0.9  # the default green line


def test_fallback_refuses_a_task_that_does_not_fit_the_model(env, tmp_path, capsys):
    """A classifier task on a probability-map model (or db_text, the default, on a classifier): the fallback would
    otherwise search on a metric that means nothing for the model and write a candidate; it refuses, as intake and
    bind do, before any work, and writes nothing."""
    root, intake, a, b = env
    params = tmp_path / "params.yaml"
    params.write_text("fallback: {target: 0.9}\nquantize: {method: minmax}\ntask:\n  adapter: classifier\n")
    rc = main(["fallback", str(intake), "--calibration-set", str(a), "--reference-set", str(a), "--params", str(params),
               "--out", str(tmp_path / "fb")])
    err = capsys.readouterr().err
    assert rc == 2 and "task 'classifier': output" in err and "but the declared layout is classifier [N, C]" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "fb").exists()

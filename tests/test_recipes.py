"""One INT8 file per target runtime, chosen by measurement among recipes (issue 37 item 2, :mod:`quantkit.quantize.recipes`):
each rule of the choice on its own, recipe names, the params ``targets.<runtime>.recipes`` entry, and a whole choice on
a small model built here (ORT's placements on the deployed ranges, NNCF's own file and NNCF's ranges re-placed, judged
on ONNX Runtime and OpenVINO), written all at once with its choice.json."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from test_nncf_engine import concat_map_model, needs_nncf
from test_quantize_fixtures import make_set, write_model_intake

from quantkit.errors import ConfigError
from quantkit.paramsfile import target_recipes, targets
from quantkit.quantize.recipes import RULES, RecipeFigure, choose, parse_recipe
from quantkit.quantize.targets_check import check_targets


def fig(name: str, agreement: float, ms: float, float_ms: float = 100.0) -> RecipeFigure:
    return RecipeFigure(name, agreement, None, 24, ms, "fp32", float_ms)


# --- the rule table, one branch each -------------------------------------------------------------------------------------

def test_rules_are_named_in_order():
    assert [r for r, _ in RULES] == ["meets", "most-agreeing", "no-int8-faster"]


def test_meets_takes_the_fastest_file_near_the_best_agreement():
    """ort and nncf:ort both within 0.01 of the best (nncf, slow on this runtime): the faster of the two."""
    c = choose([fig("ort", 0.975, 40), fig("nncf", 0.98, 120), fig("nncf:ort", 0.972, 30)], target=0.9)
    assert (c.chosen, c.rule) == ("nncf:ort", "meets") and "0.980" in c.reason and "target 0.90" in c.reason


def test_meets_reads_a_latency_tie_as_a_tie_and_takes_the_better_agreement():
    c = choose([fig("a", 0.971, 40.0), fig("b", 0.979, 43.5)], target=0.9)  # 9 % slower: a tie (NOISE)
    assert (c.chosen, c.rule) == ("b", "meets")
    c = choose([fig("a", 0.971, 40.0), fig("b", 0.979, 45.0)], target=0.9)  # 12 % slower: not a tie
    assert c.chosen == "a"


def test_a_file_more_than_the_tolerance_below_the_best_does_not_meet():
    """The default recipe at 0.62 beside NNCF's 1.00 (issue 37's YOLOv8 head): the fast file does not meet, so the most
    agreeing file that is still faster than float is taken."""
    c = choose([fig("ort", 0.62, 30), fig("nncf:ort", 0.99, 35), fig("nncf", 1.0, 150)], target=0.9)
    assert (c.chosen, c.rule) == ("nncf:ort", "meets")
    c = choose([fig("ort", 0.62, 30), fig("openvino", 0.80, 60), fig("nncf", 1.0, 150)], target=0.9)
    assert (c.chosen, c.rule) == ("openvino", "most-agreeing") and "0.990" in c.reason


def test_below_the_target_does_not_meet_even_as_the_best():
    c = choose([fig("ort", 0.85, 30), fig("nncf", 0.86, 35)], target=0.9)
    assert (c.chosen, c.rule) == ("nncf", "most-agreeing")


def test_slower_than_float_is_never_chosen_while_a_faster_file_exists():
    c = choose([fig("nncf", 0.99, 120), fig("ort", 0.5, 50)], target=0.9)
    assert (c.chosen, c.rule) == ("ort", "most-agreeing")


def test_no_int8_file_faster_than_float_is_said():
    c = choose([fig("nncf", 0.99, 120), fig("ort", 0.95, 101)], target=0.9)
    assert (c.chosen, c.rule) == ("nncf", "no-int8-faster") and "float model serves this runtime better" in c.reason


def test_nothing_to_choose_from_is_one_line():
    with pytest.raises(ConfigError, match="at least one recipe"):
        choose([], target=0.9)


# --- recipe names and params --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,engine,placement", [("ort", "ort", "ort"), ("openvino", "ort", "openvino"), ("nncf", "nncf", "nncf"),
                                                   ("nncf:ort", "nncf", "ort"), ("ort-float-decode", "ort", "ort-float-decode")])
def test_recipe_names(name, engine, placement):
    r = parse_recipe(name)
    assert (r.engine, r.placement) == (engine, placement)


@pytest.mark.parametrize("name", ["ortt", "nncf:nncf", "aimet:ort", "nncf:bogus"])
def test_unknown_recipe_is_one_line_naming_the_key(name):
    with pytest.raises(ConfigError) as e:
        parse_recipe(name, "targets.onnxruntime.recipes")
    assert str(e.value).startswith("targets.onnxruntime.recipes: ") and "\n" not in str(e.value)


def test_targets_take_a_placement_or_recipes(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"targets": {"onnxruntime": {"recipes": ["ort", "nncf:ort"]}, "openvino": {"placement": "openvino"}}}))
    assert targets(p) == {"onnxruntime": "ort|nncf:ort", "openvino": "openvino"}
    assert target_recipes(p, "onnxruntime") == ("ort", "nncf:ort") and target_recipes(p, "openvino") == ()
    p.write_text(yaml.safe_dump({"targets": {"openvino": {"recipes": []}}}))
    with pytest.raises(ConfigError, match=r"targets\.openvino\.recipes is empty; list at least one recipe"):
        targets(p)
    for bad in ({"placement": "ort", "recipes": ["ort"]}, {"recipes": "ort"}, {"recipe": ["ort"]}):
        p.write_text(yaml.safe_dump({"targets": {"openvino": bad}}))
        with pytest.raises(ConfigError, match=r"targets\.openvino must be \{placement: NAME\} or \{recipes: \[NAME, \.\.\.\]\}"):
            targets(p)


def test_a_misspelt_target_runtime_or_recipe_is_named_by_params_show_and_models_check(tmp_path, run_cli):
    """A new user's trial: ``models check`` and ``params show`` passed 'openvnio'; only the place stage refused it."""
    p = tmp_path / "params.yaml"
    for targets_, why in (({"openvnio": {"recipes": ["openvino"]}}, "targets.openvnio: 'openvnio' is not a runtime quantkit knows; use one of "),
                          ({"openvino": {"recipes": ["ncnf"]}}, "targets.openvino.recipes: 'ncnf' is not a recipe")):
        p.write_text(yaml.safe_dump({"targets": targets_}))
        with pytest.raises(ConfigError, match=re.escape(why)):
            check_targets(p)
        for argv in (["params", "show", "--params", p, "--model", "m"], ["models", "check", "m", "--params", p]):
            code, out, err = run_cli(argv)
            assert code == 2 and why in err and len(err.strip().splitlines()) == 1, (argv, err)


# --- a whole choice on a small model ------------------------------------------------------------------------------------

SIZE = 16


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    from quantkit.quantize import StaticQuantConfig, quantize

    root = tmp_path_factory.mktemp("recipes")
    intake = write_model_intake(concat_map_model(SIZE), root / "intake", SIZE)
    cset = make_set(root / "calib", n=6, size=48)
    ref = make_set(root / "ref", n=6, size=48, name="ref-set", seed=5)
    quantize(intake, StaticQuantConfig(per_channel=True), out=root / "deployed", calibration_set=cset)
    return {"root": root, "intake": intake, "set": cset, "ref": ref, "deployed": root / "deployed"}


@needs_nncf
@pytest.mark.parametrize("runtime,recipes", [("onnxruntime", ["ort", "ort-float-decode", "nncf", "nncf:ort"]), ("openvino", ["openvino", "nncf"])])
def test_choice_builds_judges_and_writes_the_chosen_file(deployed, runtime, recipes):
    pytest.importorskip("openvino") if runtime == "openvino" else None
    from quantkit.artifacts import CalibrationRecord
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import agreement_metric
    from quantkit.quantize.recipes import choose_for_runtime

    out = deployed["root"] / f"chosen-{runtime}"
    rec, choice = choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["set"], [deployed["ref"]],
                                     StaticQuantConfig(per_channel=True), runtime, recipes, agreement_metric(None), target=0.9, out=out,
                                     repeats=3)
    on_disk = json.loads((out / "choice.json").read_text())
    assert on_disk == choice and sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["choice.json", "model_int8.onnx",
                                                                                                        "record.json"]
    assert [f["name"] for f in choice["figures"]] == recipes and choice["chosen"] in recipes and choice["runtime"] == runtime
    by = {f["name"]: f for f in choice["figures"]}
    for f in choice["figures"]:
        assert 0.0 <= f["agreement"] <= 1.0 and f["images"] == 6 and f["median_ms"] > 0 and f["ci"][0] <= f["agreement"] <= f["ci"][1]
    expect = choose([RecipeFigure(f["name"], f["agreement"], None, f["images"], f["median_ms"], f["best_float"], f["best_float_ms"])
                     for f in choice["figures"]], target=0.9)
    assert (choice["chosen"], choice["rule"]) == (expect.chosen, expect.rule)  # the figures written are the ones chosen on
    assert rec.fingerprint == by[choice["chosen"]]["fingerprint"] == CalibrationRecord.load(out).fingerprint
    if runtime == "onnxruntime":
        assert CalibrationRecord.load(out).config["engine"] == ("nncf" if choice["chosen"] == "nncf" else "ort")
    assert not [p for p in deployed["root"].iterdir() if ".recipes-" in p.name]  # the work folder is gone


def test_choice_refuses_another_calibration_set(deployed):
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import agreement_metric
    from quantkit.quantize.recipes import choose_for_runtime

    with pytest.raises(ConfigError, match="is not the deployed record's calibration set"):
        choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["ref"], [deployed["ref"]], StaticQuantConfig(per_channel=True),
                           "onnxruntime", ["ort"], agreement_metric(None), target=0.9, out=deployed["root"] / "never")
    assert not (deployed["root"] / "never").exists()


def test_recipes_of_an_engine_not_installed_are_left_out_and_said(deployed, monkeypatch):
    """A core install without NNCF still gets a file: the nncf recipes are left out, and choice.json says why."""
    import importlib.util as iu

    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import agreement_metric
    from quantkit.quantize.recipes import choose_for_runtime

    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    out = deployed["root"] / "no-nncf"
    _, choice = choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["set"], [deployed["ref"]], StaticQuantConfig(per_channel=True),
                                   "onnxruntime", ["ort", "nncf", "nncf:ort"], agreement_metric(None), target=0.9, out=out, repeats=3)
    assert [f["name"] for f in choice["figures"]] == ["ort"] and choice["chosen"] == "ort"
    assert [s["recipe"] for s in choice["skipped"]] == ["nncf", "nncf:ort"] and "pip install 'quantkit[nncf]'" in choice["skipped"][0]["why"]
    with pytest.raises(ConfigError, match="every recipe needs nncf"):
        choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["set"], [deployed["ref"]], StaticQuantConfig(per_channel=True),
                           "onnxruntime", ["nncf"], agreement_metric(None), target=0.9, out=deployed["root"] / "never2")


@needs_nncf
def test_quantize_target_with_recipes_is_the_place_stage(deployed, run_cli, tmp_path):
    """`quantkit quantize --target RUNTIME` where params lists recipes prints the table and writes the chosen file; the
    same command without the deployed record, or with a flag the recipes decide, is one line and exit 2, nothing written."""
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"quantize": {"per_channel": True}, "targets": {"onnxruntime": {"recipes": ["ort", "nncf:ort"]}}}))
    base = ["quantize", str(deployed["intake"]), "--params", str(p), "--target", "onnxruntime", "--calibration-set", str(deployed["set"]),
            "--reference-set", str(deployed["ref"])]
    code, out, err = run_cli([*base, "--ranges-from", str(deployed["deployed"]), "--out", str(tmp_path / "q")])
    assert code == 0, err
    assert "recipes for onnxruntime" in out and "<- chosen" in out and "chose " in out and (tmp_path / "q" / "choice.json").is_file()
    for extra, says in ((["--out", str(tmp_path / "a")], "pass --ranges-from"),
                        (["--ranges-from", str(deployed["deployed"]), "--placement", "ort", "--out", str(tmp_path / "a")], "--placement: ")):
        code, out, err = run_cli([*base, *extra])
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "a").exists()


@needs_nncf
def test_a_deployed_nncf_record_gets_every_recipe_too(deployed):
    """quantize.engine: nncf (the deployed record is NNCF's): ORT's placements take NNCF's ranges, nncf is NNCF's file again."""
    from quantkit.quantize import StaticQuantConfig, quantize
    from quantkit.quantize.fallback.metric import agreement_metric
    from quantkit.quantize.recipes import choose_for_runtime

    nncf = StaticQuantConfig(per_channel=True, engine="nncf", placement="nncf")
    rec = quantize(deployed["intake"], nncf, out=deployed["root"] / "deployed-nncf", calibration_set=deployed["set"])
    _, choice = choose_for_runtime(deployed["intake"], deployed["root"] / "deployed-nncf", deployed["set"], [deployed["ref"]], nncf,
                                   "onnxruntime", ["ort", "nncf"], agreement_metric(None), target=0.9, out=deployed["root"] / "c-nncf", repeats=3)
    by = {f["name"]: f for f in choice["figures"]}
    assert by["nncf"]["fingerprint"] == rec.fingerprint and by["ort"]["fingerprint"] != rec.fingerprint


def test_a_recipe_nncf_cannot_build_is_left_out_and_said(deployed, monkeypatch):
    """NNCF failing on a model (an FP16 Conv, say) costs its recipes only: the others are judged and one is chosen, and
    choice.json says why nncf and nncf:ort are missing; where no recipe can be built, one line naming the key."""
    import quantkit.quantize.recipes as recipes
    from quantkit.errors import ModelError
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import agreement_metric

    real = recipes.build_recipe

    def failing(recipe, *a, **kw):
        if recipe.engine == "nncf":
            raise ModelError("NNCF could not quantize the model (AttributeError: type)")
        return real(recipe, *a, **kw)

    monkeypatch.setattr(recipes, "build_recipe", failing)
    args = (deployed["intake"], deployed["deployed"], deployed["set"], [deployed["ref"]], StaticQuantConfig(per_channel=True), "onnxruntime")
    _, choice = recipes.choose_for_runtime(*args, ["ort", "nncf", "nncf:ort"], agreement_metric(None), target=0.9,
                                           out=deployed["root"] / "nncf-fails", repeats=3)
    assert [f["name"] for f in choice["figures"]] == ["ort"] and [s["recipe"] for s in choice["skipped"]] == ["nncf", "nncf:ort"]
    assert "AttributeError: type" in choice["skipped"][1]["why"]
    with pytest.raises(ConfigError, match=r"targets\.onnxruntime\.recipes: no recipe could be built"):
        recipes.choose_for_runtime(*args, ["nncf:ort"], agreement_metric(None), target=0.9, out=deployed["root"] / "never3")


def test_bad_runtime_or_reference_set_is_one_line_before_any_build(deployed, monkeypatch):
    import quantkit.quantize.recipes as recipes
    from quantkit.errors import InputFileError
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import agreement_metric

    monkeypatch.setattr(recipes, "build_recipe", lambda *a, **k: pytest.fail("built before the inputs were checked"))
    cfg = StaticQuantConfig(per_channel=True)
    with pytest.raises(ConfigError, match="openvnio"):
        recipes.choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["set"], [deployed["ref"]], cfg, "openvnio", ["ort"],
                                   agreement_metric(None), target=0.9, out=deployed["root"] / "never4")
    with pytest.raises((InputFileError, ConfigError)) as e:
        recipes.choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["set"], [deployed["root"] / "nope"], cfg, "onnxruntime",
                                   ["ort"], agreement_metric(None), target=0.9, out=deployed["root"] / "never4")
    assert "nope" in str(e.value)


def test_a_killed_runs_work_folder_is_removed_by_the_next(deployed):
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import agreement_metric
    from quantkit.quantize.recipes import choose_for_runtime

    out = deployed["root"] / "after-kill"
    dead = deployed["root"] / ".after-kill.999999999.abcdefgh.tmp"  # a temporary sibling of a process that is gone
    (dead / "ort").mkdir(parents=True)
    choose_for_runtime(deployed["intake"], deployed["deployed"], deployed["set"], [deployed["ref"]], StaticQuantConfig(per_channel=True),
                       "onnxruntime", ["ort"], agreement_metric(None), target=0.9, out=out, repeats=3)
    assert not dead.exists() and (out / "choice.json").is_file()


# --- the fallback recipe: only when no other recipe meets -------------------------------------------------------------


@pytest.fixture(scope="module")
def collapsing(tmp_path_factory):
    """The tiny detector whose ORT-placed head collapses (box F1 vs FP32 < 0.5), its deployed record and a reference set."""
    from test_fallback_windows import make_head_detector

    from quantkit.quantize import StaticQuantConfig, quantize

    root = tmp_path_factory.mktemp("fallback-recipe")
    intake, cset = make_head_detector(root / "intake"), make_set(root / "calib", 8, size=16)
    ref = make_set(root / "ref", 6, size=16, name="ref-set", seed=7)
    quantize(intake, StaticQuantConfig(), out=root / "deployed", calibration_set=cset)
    return {"root": root, "intake": intake, "set": cset, "ref": ref, "deployed": root / "deployed"}


def _faster_than_float(monkeypatch):
    """Timings of a 16x16 model are noise: every file is taken as twice as fast as float (the agreement stays measured)."""
    import dataclasses

    from quantkit.quantize import recipes

    real = recipes.measure_recipes
    monkeypatch.setattr(recipes, "measure_recipes", lambda *a, **k: [dataclasses.replace(f, median_ms=f.best_float_ms / 2) for f in real(*a, **k)])


def _choose(d, recipes, out):
    from test_fallback_windows import _metric

    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.recipes import choose_for_runtime

    return choose_for_runtime(d["intake"], d["deployed"], d["set"], [d["ref"]], StaticQuantConfig(), "onnxruntime", recipes, _metric(),
                              target=0.9, out=d["root"] / out, repeats=3)


def test_fallback_recipe_is_built_from_the_best_fast_file_when_none_meets(collapsing, monkeypatch):
    from quantkit.artifacts import CalibrationRecord

    _faster_than_float(monkeypatch)
    rec, choice = _choose(collapsing, ["ort", "fallback"], "with-fallback")
    by = {f["name"]: f for f in choice["figures"]}
    assert by["ort"]["agreement"] < 0.5 and by["fallback"]["agreement"] >= 0.9  # judged on the reference set, which the search never saw
    fb = choice["fallback"]
    assert fb["from"] == "ort" and fb["target"] == 0.9 and fb["search_images"] == 8 and fb["kept_in_float"] > 0 and fb["met_on_search"]
    assert (choice["chosen"], choice["rule"]) == ("fallback", "meets") and rec.fingerprint == by["fallback"]["fingerprint"]
    kept = CalibrationRecord.load(collapsing["root"] / "with-fallback").config["nodes_to_exclude"]
    assert "head_concat" in kept and not [n for n in kept if n.startswith("body_")]


def test_fallback_recipe_is_not_built_when_another_meets(collapsing, monkeypatch):
    _faster_than_float(monkeypatch)
    _, choice = _choose(collapsing, ["ort-float-decode", "fallback"], "no-fallback")
    assert choice["chosen"] == "ort-float-decode" and choice["rule"] == "meets" and "fallback" not in choice
    assert choice["skipped"] == [{"recipe": "fallback", "why": "not needed: ort-float-decode meets the target within the tolerance"}]


def test_fallback_recipe_needs_another_to_start_from(collapsing):
    with pytest.raises(ConfigError, match="fallback starts from another recipe's file"):
        _choose(collapsing, ["fallback"], "never")
    assert parse_recipe("fallback").engine == "fallback"


def test_a_reference_set_fp32_decides_nothing_on_is_refused_before_any_build(collapsing):
    """A new user's trial: a head the task adapter does not decode (PicoDet's GFL outputs read as rows) made FP32 decide
    nothing, every recipe 'agreed 1.000' and one was chosen as meeting the target."""
    from quantkit.quantize import StaticQuantConfig
    from quantkit.quantize.fallback.metric import task_metric
    from quantkit.quantize.recipes import choose_for_runtime
    from quantkit.tasks.boxes import BoxDetectorAdapter

    blind = task_metric(BoxDetectorAdapter(objectness=False, score_thresh=0.999999, iou_thresh=0.45))
    with pytest.raises(ConfigError, match=r"ref: FP32 decides nothing on its 6 images with box_f1.*every file would agree 1\.000"):
        choose_for_runtime(collapsing["intake"], collapsing["deployed"], collapsing["set"], [collapsing["ref"]], StaticQuantConfig(),
                           "onnxruntime", ["ort"], blind, target=0.9, out=collapsing["root"] / "blind")
    assert not (collapsing["root"] / "blind").exists() and not [p for p in collapsing["root"].iterdir() if ".blind." in p.name]

"""Each model its own data (issue 38): ``models.<name>.sets`` (folders of sets), per-key overrides through one resolver,
set keys in the wrong place refused, ``quantkit models add`` declaring the sets, ``params show --model``, and the
commands that take a folder of sets (evaluate, drift, compose, fallback)."""

from __future__ import annotations

import argparse

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from quantkit.calibset.model_sets import ModelSets, model_sets, set_folders
from quantkit.cli.main import main
from quantkit.config import config_from_params, section_for_model
from quantkit.errors import ConfigError, InputFileError
from quantkit.quantize.fallback.config import FallbackConfig

ROOT = Path(__file__).resolve().parents[1]
SETS = {"calibration": "data/m/calibration", "reference": "data/m/reference", "site": "data/m/site",
        "deployed": {"calibration": "day", "reference": "day"}}


def _params(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def make_set(root: Path, name: str, kind: str, level: int, n: int = 4, size: int = 64) -> Path:
    """A registered set ``root/name`` of ``n`` images whose dominant channel cycles R, G, B at brightness ``level``."""
    images = root / name / "images"
    images.mkdir(parents=True)
    for i in range(n):
        a = np.zeros((size, size, 3), np.uint8)
        a[..., i % 3] = level
        Image.fromarray(a).save(images / f"{i:02d}.png")
    assert main(["calibset", "register", str(root / name), "--name", f"{kind}-{name}", "--kind", kind, "--lighting", name]) == 0
    return root / name


def test_a_models_section_is_merged_key_by_key_over_the_top_level(tmp_path):
    p = _params(tmp_path, {"fallback": {"target": 0.96, "prune": 2, "recovery": {"fold_affine": True, "equalization": True}},
                           "models": {"m": {"file": "m.onnx", "fallback": {"target": 0.9, "recovery": {"equalization": False}}}}})
    cfg = config_from_params(FallbackConfig, p, "fallback", model="m")
    assert (cfg.target, cfg.prune, cfg.recovery.fold_affine, cfg.recovery.equalization) == (0.9, 2, True, False)
    assert config_from_params(FallbackConfig, p, "fallback").target == 0.96  # the top level, for other models


def test_a_dotted_section_of_a_model_is_found(tmp_path):
    p = _params(tmp_path, {"bundle": {"verify": {"tolerance_steps": 1.0}},
                           "models": {"m": {"file": "m.onnx", "bundle": {"verify": {"tolerance_steps": 3.0}}}}})
    data, where = section_for_model(p, "bundle.verify", "m")
    assert data == {"tolerance_steps": 3.0} and where == "models.m.bundle.verify"


def test_a_bad_value_is_named_where_it_is_written(tmp_path):
    p = _params(tmp_path, {"fallback": {"target": 2.0}, "models": {"m": {"file": "m.onnx", "fallback": {"prune": 1}}}})
    with pytest.raises(ConfigError, match=r"params\.yaml:fallback\.target"):
        config_from_params(FallbackConfig, p, "fallback", model="m")
    p = _params(tmp_path, {"fallback": {"target": 0.9}, "models": {"m": {"file": "m.onnx", "fallback": {"prune": "x"}}}})
    with pytest.raises(ConfigError, match=r"models\.m\.fallback\.prune"):
        config_from_params(FallbackConfig, p, "fallback", model="m")


@pytest.mark.parametrize("data, match", [
    ({"models": {"m": {"file": "m.onnx", "calibrations": {}}}}, r"models\.m\.calibrations is not read; write models\.m\.sets\.calibration"),
    ({"models": {"m": {"file": "m.onnx", "site_sets": ["a"]}}}, r"models\.m\.site_sets is not read; write models\.m\.sets\.site"),
    ({"models": {"m": {"file": "m.onnx", "pool": ["a"]}}}, r"models\.m\.pool is not read"),
    ({"site_sets": ["a"], "models": {}}, r"top-level 'site_sets' is not read: each model has its own sets"),
    ({"calibrations": {"deployed": {}}, "models": {}}, r"top-level 'calibrations' is not read"),
    ({"sets": SETS, "models": {}}, r"top-level 'sets' is not read: it belongs to one model; move it under models\.<name>\.sets"),
    ({"models": {"m": {"file": "m.onnx", "fleet": {}}}}, r"models\.m\.fleet is not read: 'fleet' is the pipeline's"),
])
def test_a_set_key_in_the_wrong_place_is_refused_naming_the_right_place(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        section_for_model(_params(tmp_path, data), "models", None)


def test_set_folders_a_set_or_a_folder_of_sets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = make_set(tmp_path / "f", "b", "site", 200), make_set(tmp_path / "f", "a", "site", 100)
    (tmp_path / "f" / "notes").mkdir()  # a folder that is not a set is passed over
    assert set_folders(tmp_path / "f") == [b, a] and set_folders(a) == [a]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match="holds no set"):
        set_folders(tmp_path / "empty")


def test_model_sets_name_the_deployed_sets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_set(tmp_path / "data/m/calibration", "day", "calibration", 200)
    p = _params(tmp_path, {"models": {"m": {"file": "m.onnx", "sets": SETS}, "n": {"file": "n.onnx"}}})
    sets = model_sets(p, "m")
    assert sets.deployed_set("calibration") == Path("data/m/calibration/day")
    with pytest.raises(InputFileError, match="sets.deployed.reference names no registered set"):
        sets.deployed_set("reference")
    with pytest.raises(ConfigError, match=r"models\.n\.sets is missing"):
        model_sets(p, "n")
    with pytest.raises(ConfigError, match="model 'x' is not under 'models'"):
        model_sets(p, "x")
    with pytest.raises(ConfigError, match="must be a folder inside the repository"):
        ModelSets.from_dict({**SETS, "site": "/abs/site"})


@pytest.fixture
def user_repo(tmp_path, monkeypatch):
    """A repository with the demo's params and dvc.yaml, a user's classifier file and its own registered sets."""
    from test_pipeline_e2e import user_model

    monkeypatch.chdir(tmp_path)
    for name in ("params.yaml", "dvc.yaml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "models").mkdir()
    (tmp_path / "models/cls.onnx").write_bytes(user_model((64, 64)))
    for kind in ("calibration", "reference", "site"):
        for name, level in (("day", 200), ("night", 60)):
            make_set(tmp_path / "data/cls" / kind, name, kind, level)
    return tmp_path


def deployed() -> None:
    """The user's model added with its own sets, through intake, calibration on its deployed set and binding (the
    commands the pipeline's first stages run for it)."""
    assert main(ADD + OWN) == 0
    assert main(["intake", "models/cls.onnx", "--params", "params.yaml", "--model", "cls", "--out", "work/models/cls/intake"]) == 0
    assert main(["quantize", "work/models/cls/intake", "--params", "params.yaml", "--model", "cls", "--role", "deployed",
                 "--out", "work/models/cls/quantize/deployed"]) == 0
    assert main(["bind", "work/models/cls/quantize/deployed", "--fp32", "work/models/cls/intake", "--params", "params.yaml",
                 "--model", "cls", "--role", "deployed", "--out", "work/models/cls/thresholds/deployed.json"]) == 0


ADD = ["models", "add", "cls", "models/cls.onnx", "--params", "params.yaml", "--adapter", "classifier", "--option", "cls_thresh=0.5",
       "--scale", "1/255", "--mean", "0", "--std", "1", "--resize-policy", "stretch"]
OWN = ["--calibration-set", "data/cls/calibration/day", "--calibration-set", "data/cls/calibration/night",
       "--reference-set", "data/cls/reference/day", "--site-set", "data/cls/site/day", "--site-set", "data/cls/site/night"]


def test_models_add_declares_the_models_own_sets(user_repo, capsys):
    assert main(ADD + OWN) == 0
    out = capsys.readouterr().out
    entry = yaml.safe_load((user_repo / "params.yaml").read_text())["models"]["cls"]
    assert entry["sets"] == {"calibration": "data/cls/calibration", "reference": "data/cls/reference", "site": "data/cls/site",
                             "deployed": {"calibration": "day", "reference": "day"}}
    assert entry["task"] == {"adapter": "classifier", "options": {"cls_thresh": 0.5}}
    assert "probe    classifier on 4 images of day: 4 decisions by FP32" in out
    assert "judged on every set in data/cls/site" in out


@pytest.mark.parametrize("extra, match", [
    ([], "no --calibration-set: a model is calibrated and judged on its own images"),
    (["--calibration-set", "data/cls/calibration/day", "--reference-set", "data/cls/reference/day", "--site-set", "data/cls/site/day",
      "--site-set", "data/cls/reference/night"], "put the model's site sets in one folder"),
    (["--calibration-set", "calibration_sets/cam1-day", "--reference-set", "data/cls/reference/day", "--site-set", "data/cls/site/day"],
     "not a registered set"),
    (["--share-sets-of", "nope"], "--share-sets-of nope: no such model"),
    (["--option", "cls_thresh", *OWN], "--option cls_thresh: write KEY=VALUE"),
])
def test_models_add_refuses_sets_it_cannot_use_and_leaves_params_alone(user_repo, capsys, extra, match):
    before = (user_repo / "params.yaml").read_bytes()
    assert main(ADD + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err
    assert (user_repo / "params.yaml").read_bytes() == before


def test_models_add_refuses_another_models_folder_unless_told_to_share(user_repo, capsys):
    assert main(ADD + OWN) == 0
    second = [a.replace("cls", "cls2", 1) if a == "cls" else a for a in ADD] + OWN
    assert main(second) == 2
    assert "holds models.cls's sets" in capsys.readouterr().err
    assert main([a if a != "cls" else "cls2" for a in ADD] + ["--share-sets-of", "cls"]) == 0
    assert yaml.safe_load((user_repo / "params.yaml").read_text())["models"]["cls2"]["sets"]["site"] == "data/cls/site"


def test_params_show_names_where_each_setting_comes_from(user_repo, capsys):
    assert main(ADD + OWN) == 0
    capsys.readouterr()
    assert main(["params", "show", "--model", "ddddocr_det", "--json"]) == 0
    keys = {k["key"]: k for k in json.loads(capsys.readouterr().out)}
    assert keys["fallback.target"]["source"] == "default" and keys["fallback.target"]["value"] == "null"  # the green line
    assert keys["report.min_agreement"]["source"] == "report.min_agreement"
    assert keys["fallback.prune"]["source"] == "fallback.prune"
    assert keys["fallback.search"]["source"] == "default"
    assert keys["sets.site"]["value"] == '"site_sets"'
    assert main(["params", "show"]) == 2


def test_a_params_file_with_only_models_shows_and_quantizes_with_the_defaults(user_repo, capsys):
    """A new user's trial: the file `models add` writes had no quantize/bundle section, and `params show` and `quantize --params`
    refused it although `quantize --help` says the defaults apply."""
    from quantkit.cli.quantize import build_config
    from quantkit.quantize import StaticQuantConfig

    data = yaml.safe_load((user_repo / "params.yaml").read_text())
    (user_repo / "only.yaml").write_text(yaml.safe_dump({"models": {"ddddocr_det": data["models"]["ddddocr_det"]}}))
    assert main(["params", "show", "--params", "only.yaml", "--model", "ddddocr_det", "--json"]) == 0
    keys = {k["key"]: k for k in json.loads(capsys.readouterr().out)}
    assert keys["quantize.method"]["source"] == "default" and keys["bundle.compress"]["source"] == "default"
    args = argparse.Namespace(params="only.yaml", section="quantize", model="ddddocr_det", dynamic=False, engine=None, placement=None,
                              target=None, method=None, chunk_size=None, max_images=None)
    assert build_config(args) == StaticQuantConfig()


def test_evaluate_drift_and_compose_take_a_folder_of_sets(user_repo, capsys):
    """The per-model stages' commands run over every set of a model's folder, one result per set, written whole."""
    deployed()
    assert main(["evaluate", "data/cls/site", "--fp32", "work/models/cls/intake", "--params", "params.yaml", "--model", "cls",
                 "--deployed", "work/models/cls/quantize/deployed", "--deployed-thresholds", "work/models/cls/thresholds/deployed.json",
                 "--out", "work/models/cls/eval"]) == 0
    assert sorted(p.name for p in Path("work/models/cls/eval").iterdir() if p.is_dir()) == ["day", "night"]
    assert json.loads(Path("work/models/cls/eval/night/summary.json").read_text())["site_set"]["path"] == "data/cls/site/night"
    assert main(["drift", "data/cls/site", "--calibration-set", "data/cls/calibration/day", "--params", "params.yaml", "--model", "cls",
                 "--no-clipping", "--out", "work/models/cls/drift"]) == 0
    assert sorted(p.name for p in Path("work/models/cls/drift").glob("*.json")) == ["day.json", "night.json"]
    capsys.readouterr()
    assert main(["calibset", "compose", "work/ref", "--kind", "reference", "--name", "r", "--from", "data/cls/reference:3", "--json"]) == 0
    comp = json.loads(capsys.readouterr().out)["composition"]
    assert [(c["path"], c["images"]) for c in comp] == [("data/cls/reference/day", 3), ("data/cls/reference/night", 3)]


def test_a_command_module_that_fails_to_import_is_an_error(monkeypatch, capsys):
    import quantkit.cli.main as cli_main

    monkeypatch.setattr(cli_main, "COMMAND_MODULES", (*cli_main.COMMAND_MODULES, "no_such_command"))
    assert cli_main.main(["--help"]) == 70
    assert "no_such_command" in capsys.readouterr().err


def test_models_check_names_a_misspelt_set_folder_before_any_stage_needs_it(user_repo, capsys):
    """dvc.yaml's first stage for each model (sets@NAME): one line naming the params key, nothing written."""
    assert main(ADD + OWN) == 0
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["models"]["cls"]["sets"]["site"] = "data/cls/sitez"
    Path("params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    capsys.readouterr()
    assert main(["models", "check", "cls", "--out", "work/models/cls/sets.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "models.cls.sets.site: " in err[0] and "sitez" in err[0] and not Path("work").exists()
    params["models"]["cls"]["sets"]["site"] = "data/cls/site"
    params["models"]["cls"]["sets"]["deployed"]["calibration"] = "dawn"
    Path("params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert main(["models", "check", "cls"]) == 2
    assert "sets.deployed.calibration: 'dawn' is not a set in data/cls/calibration (it has day, night)" in capsys.readouterr().err
    params["models"]["cls"]["sets"]["deployed"]["calibration"] = "night"
    Path("params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert main(["models", "check", "cls", "--out", "work/models/cls/sets.json"]) == 0
    assert json.loads(Path("work/models/cls/sets.json").read_text())["sets"]["deployed"]["calibration"] == "night"


def test_the_recalibration_loop_ends_in_promote(user_repo, capsys):
    """New site images -> drift -> a candidate composed from the model's own pool -> promote: the deployed model's
    calibration set and settings in params become the candidate's, and the next quantize uses them."""
    assert main(ADD + OWN) == 0
    assert main(["intake", "models/cls.onnx", "--params", "params.yaml", "--model", "cls", "--out", "work/models/cls/intake"]) == 0
    q = ["quantize", "work/models/cls/intake", "--params", "params.yaml", "--model", "cls"]
    assert main([*q, "--role", "deployed", "--out", "work/models/cls/quantize/deployed"]) == 0
    assert main(["drift", "data/cls/site", "--calibration-set", "data/cls/calibration/day", "--params", "params.yaml", "--model", "cls",
                 "--no-clipping", "--out", "work/models/cls/drift"]) == 0
    assert main(["calibset", "compose", "work/models/cls/calibsets/candidate", "--name", "cls-candidate", "--from", "data/cls/calibration/day:16",
                 "--cover", "work/models/cls/drift", "--pool", "data/cls/calibration"]) == 0
    assert main([*q, "--section", "quantize_candidate", "--calibration-set", "work/models/cls/calibsets/candidate",
                 "--out", "work/models/cls/quantize/candidate"]) == 0
    before = Path("params.yaml").read_text()
    capsys.readouterr()
    assert main(["models", "promote", "cls", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    composed = json.loads(Path("work/models/cls/calibsets/candidate/manifest.json").read_text())
    assert [c["name"] for c in composed["generator"]["composition"]] == ["calibration-day", "calibration-night"]  # drift flagged night
    assert done["path"].endswith(f"data/cls/calibration/candidate-{composed['set_id'][:8]}") and done["set_id"] == composed["set_id"]
    assert done["written"] == {"sets.deployed.calibration": f"candidate-{composed['set_id'][:8]}", "quantize.method": "percentile",
                               "quantize.percentile": 99.999, "quantize.calibration_symmetric": False}
    entry = yaml.safe_load(Path("params.yaml").read_text())["models"]["cls"]
    assert entry["sets"]["deployed"]["calibration"] == done["written"]["sets.deployed.calibration"] and entry["quantize"]["method"] == "percentile"
    assert Path("params.yaml").read_text().startswith(before.split("\n", 1)[0])  # the file's comments stay
    assert main([*q, "--role", "deployed", "--out", "work/models/cls/quantize/promoted"]) == 0
    rec = json.loads(Path("work/models/cls/quantize/promoted/record.json").read_text())
    assert rec["calibration_set"]["set_id"] == composed["set_id"] and rec["config"]["method"] == "percentile"
    promoted = json.loads((Path(done["path"]) / "manifest.json").read_text())
    assert promoted["name"] == done["name"] and promoted["set_id"] == composed["set_id"]  # its own name, the same content
    assert main(["models", "promote", "cls"]) == 0  # promoting again is the same set: nothing new
    assert sorted(p.name for p in Path("data/cls/calibration").iterdir()) == sorted(["day", "night", done["name"]])


def test_promote_without_a_candidate_says_to_run_the_pipeline(user_repo, capsys):
    assert main(ADD + OWN) == 0
    before = Path("params.yaml").read_bytes()
    assert main(["models", "promote", "cls"]) == 2
    assert "no candidate to promote" in capsys.readouterr().err and Path("params.yaml").read_bytes() == before


@pytest.mark.parametrize("extra, match", [
    (["--calibration-set", "data/cls/site/day", "--reference-set", "data/cls/reference/day", "--site-set", "data/cls/site/night"],
     "--calibration-set data/cls/site/day: registered as a site set; pass it as --site-set"),
])
def test_models_add_checks_each_sets_kind(user_repo, capsys, extra, match):
    assert main(ADD + extra) == 2
    assert match in capsys.readouterr().err


def test_models_add_keeps_sets_inside_the_repository(user_repo, tmp_path_factory, capsys):
    outside = tmp_path_factory.mktemp("elsewhere")
    for kind in ("calibration", "reference", "site"):
        make_set(outside / kind, "day", kind, 150)
    args = ADD + [a for kind in ("calibration", "reference", "site") for a in (f"--{kind}-set", str(outside / kind / "day"))]
    assert main(args) == 2
    assert "lies outside" in capsys.readouterr().err


def test_a_list_where_a_folder_goes_says_so(tmp_path):
    with pytest.raises(ConfigError, match=r"sets\.site: a folder of sets, not a list; put the model's site sets in one folder"):
        ModelSets.from_dict({**SETS, "site": ["a", "b"]})


def test_models_add_force_names_the_keys_it_drops(user_repo, capsys):
    assert main(ADD + OWN) == 0
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["models"]["cls"]["fallback"] = {"target": 0.9}
    Path("params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    capsys.readouterr()
    assert main(ADD + OWN + ["--force"]) == 0
    assert "not in the new one: fallback.target" in capsys.readouterr().out


def test_a_label_the_task_cannot_read_names_the_image(user_repo, capsys):
    deployed()
    bad = Path("bad")
    (bad / "images").mkdir(parents=True)
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(bad / "images" / "00.png")
    Path("labels.json").write_text(json.dumps({"images/00.png": {"class": "zero"}}))
    assert main(["calibset", "register", "bad", "--name", "bad", "--kind", "site", "--labels", "labels.json"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "bad", "--fp32", "work/models/cls/intake", "--params", "params.yaml", "--model", "cls",
                 "--deployed", "work/models/cls/quantize/deployed", "--deployed-thresholds", "work/models/cls/thresholds/deployed.json",
                 "--out", "work/eval-bad"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad/images/00.png: its labels" in err[0] and "not a class index" in err[0]
    assert not Path("work/eval-bad").exists()

"""``quantkit models add NAME MODEL.onnx --params params.yaml``: declare a model of your own for the main job."""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any


RESIZE_POLICIES = ("stretch", "letterbox", "shortest_side_crop", "fit_height_pad", "none")
"""``quantkit.note.ResizePolicy``'s values, written here so the CLI starts without numpy (a test keeps them equal)."""


def _number(text: str) -> float:
    """A float, or a fraction such as ``1/255`` (the usual way a scale is written)."""
    try:
        return float(Fraction(text)) if "/" in text else float(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.0039 or 1/255)") from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="declare your own models in params.yaml (models add)",
                              description="Manage params.yaml's 'models', the models the main job (dvc repro) runs every stage for.")
    sub = p.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    sub.required = True
    a = sub.add_parser(
        "add", help="write models.NAME into params.yaml from the model itself",
        description="Probe MODEL's input and output shapes at its input size, guess the task adapter from the outputs "
        "([1,1,H,W] map: db_text; [1,C]: classifier; [1,4+C,K] / [1,K,5+C] with K grid cells: box_detector; [1,T,C]: ctc_text), "
        "state the guess and ask to confirm it, then write models.NAME {source: file, file, intake: {input_size, preprocessing}, "
        "task: {adapter, options}} into --params, keeping its comments (atomically). Refuses a file dvc.yaml writes "
        "(dvc repro would delete it), an existing NAME (unless --force), a missing or non-ONNX file.")
    a.add_argument("name", metavar="NAME", help="the model's name under params 'models' (it names DVC stages and work/models/NAME)")
    a.add_argument("model", metavar="MODEL", type=Path, help="the .onnx file (stays yours: a dependency of the pipeline, never an output)")
    a.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file to write into (default params.yaml; created if absent)")
    a.add_argument("--adapter", help="task adapter (skips the guess): db_text, segmentation, classifier, box_detector, ctc_text, ...")
    a.add_argument("--input-size", nargs=2, type=int, metavar=("H", "W"), help="input height and width in pixels (default: the input's static size)")
    a.add_argument("--color-order", choices=["RGB", "BGR"], help="channel order the model expects (default RGB)")
    a.add_argument("--scale", type=_number, help="multiplies the 0-255 pixel value first (e.g. 1/255; default 1/255)")
    a.add_argument("--mean", type=_number, nargs="+", help="subtracted after scaling: one value or one per channel (default 0.5)")
    a.add_argument("--std", type=_number, nargs="+", help="divides after the mean: one value or one per channel (default 0.5)")
    a.add_argument("--resize-policy", choices=RESIZE_POLICIES, help="how images reach the input size (default letterbox)")
    a.add_argument("--resize-short", type=int, help="shortest_side_crop: the short side's size before the centre crop (e.g. 256)")
    a.add_argument("--pad-input", type=float, help="letterbox / fit_height_pad: pad with this value after normalization (0.0: rapidocr)")
    a.add_argument("--pad-value", type=int, help="0-255 grey level of letterbox padding (default 0)")
    a.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a task adapter option (repeatable; VALUE read as YAML: --option layout=channels --option strides=[8,16,32])")
    g = a.add_argument_group("the model's own image sets (models.NAME.sets): registered sets, each kind's in one folder")
    g.add_argument("--calibration-set", action="append", default=[], metavar="DIR",
                   help="a calibration set (repeatable); the first is the deployed one (--deployed), all are the candidate's pool")
    g.add_argument("--reference-set", action="append", default=[], metavar="DIR", help="a reference set (repeatable); the first binds the deployed thresholds")
    g.add_argument("--site-set", action="append", default=[], metavar="DIR", help="a site set (repeatable): evaluated, drift-checked and reported")
    g.add_argument("--share-sets-of", metavar="MODEL", help="no sets of its own: use MODEL's (its models.MODEL.sets), e.g. the demo's")
    a.add_argument("--yes", action="store_true", help="accept the guessed adapter without asking")
    a.add_argument("--force", action="store_true", help="replace an existing models.NAME")
    a.set_defaults(func=run_add)
    pr = sub.add_parser(
        "promote", help="make the model's candidate its deployed calibration (then dvc repro)",
        description="Copy the candidate's composed calibration set (work/models/NAME/calibsets/candidate) into the model's "
        "sets.calibration folder as a registered set, point models.NAME.sets.deployed.calibration at it and write the candidate's "
        "calibration settings that differ under models.NAME.quantize; the next 'dvc repro' recalibrates, re-binds and re-bundles "
        "the deployed model. Says what a recalibration does not reproduce (nodes kept in float, recovery steps).")
    pr.add_argument("name", metavar="NAME", help="a model under params 'models'")
    pr.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file to edit (default params.yaml)")
    pr.add_argument("--work", type=Path, default=Path("work/models"), help="folder of the models' work folders (default work/models)")
    pr.add_argument("--json", action="store_true", help="print what was done as JSON")
    pr.set_defaults(func=run_promote)
    ck = sub.add_parser(
        "check", help="check a model's sets in params (its folders hold registered sets, the deployed ones exist)",
        description="The main job's first stage for each model (dvc.yaml 'sets'): a misspelt set folder or set name in "
        "models.NAME.sets is one line naming the key here, before a stage needs it (DVC's missing dependency would name only "
        "the path, after deleting that stage's outputs). A demo model's sets are rendered by the demo_set stages and not "
        "required to exist yet. --out writes the checked entry (JSON, sorted keys) for the stages that read the sets.")
    ck.add_argument("name", metavar="NAME", help="a model under params 'models'")
    ck.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file (default params.yaml)")
    ck.add_argument("--out", type=Path, help="write the checked sets entry here (atomically)")
    ck.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from .._io import atomic_write_json
    from ..calibset.model_sets import check_model_sets
    from ..errors import ConfigError

    from ..quantize.targets_check import check_targets

    check_targets(args.params)  # the per-runtime stages' runtimes and recipes, checked before dvc repro reaches them
    sets = check_model_sets(args.params, args.name)
    if sets is None:
        raise ConfigError(f"{args.params}: models.{args.name}.sets is missing; name the model's own set folders ('quantkit params sets')")
    if args.out is not None:
        atomic_write_json(args.out, {"model": args.name, "sets": sets.to_dict()})
    print(f"{args.name}: sets ok (calibration {sets.calibration}, reference {sets.reference}, site {sets.site}; "
          f"deployed {sets.deployed.calibration} / {sets.deployed.reference})")
    return 0


def run_promote(args: argparse.Namespace) -> int:
    import json

    from ..calibset.promote import promote_candidate

    done = promote_candidate(args.params, args.name, args.work)
    if args.json:
        print(json.dumps(done.to_dict(), indent=2, sort_keys=True))
        return 0
    print(f"registered {done.path} ({done.name}, set_id {done.set_id[:12]}): the candidate's calibration set, now in the model's own folder")
    for key, value in done.written.items():
        print(f"wrote      {args.params}: models.{args.name}.{key} = {value!r}")
    for line in done.not_reproduced:
        print(f"note       {line}")
    print(f"next       dvc repro   (recalibrates {args.name} on it, re-binds its thresholds, rebuilds and verifies its bundles); "
          "then 'dvc metrics diff' and commit")
    return 0


def _with_entry(params: Path, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The params as they will read with ``models.<name>`` set to ``entry``."""
    from ..config import _read_params

    data = dict(_read_params(params)) if params.exists() else {}
    data["models"] = {**(data.get("models") or {}), name: entry}
    return data


def _refuse_pipeline_output(model: Path, root: Path, params: dict[str, Any]) -> None:
    """Refuse a model file that a stage of ``root/dvc.yaml`` writes, resolved against ``params`` (the new entry's
    stages count too)."""
    from ..errors import ConfigError
    from ..pipeline import written_by

    owner = written_by(model, root, params)
    if owner is not None:
        out, stage = owner
        raise ConfigError(f"{model}: is written by the DVC stage {stage} ({out.relative_to(root)} in dvc.yaml), "
                          "so 'dvc repro' would delete it; copy your model elsewhere (e.g. models/<name>.onnx) and add that file")


def run_add(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..intake.declare import plan_model_entry
    from ..paramsfile import model_names, set_model_entry

    if args.name in model_names(args.params) and not args.force:
        raise ConfigError(f"{args.params}: models.{args.name} already exists; pick another name, or pass --force to replace it")
    pre = {k: getattr(args, k) for k in ("color_order", "scale", "mean", "std", "resize_policy", "resize_short", "pad_value", "pad_input") if getattr(args, k) is not None}
    plan = plan_model_entry(args.name, args.model, args.params, adapter=args.adapter, options=_options(args.option, args.adapter),
                            input_size=tuple(args.input_size) if args.input_size else None, preprocessing=pre)
    # one DVC resolution with the entry added: today's stages and the new model's own (dist/<name>/, ...); its set folders
    # are only read by DVC here, so the default layout stands in until the sets are checked below
    layout = {k: f"data/{args.name}/{k}" for k in ("calibration", "reference", "site")}
    _refuse_pipeline_output(args.model, args.params.resolve().parent,
                            _with_entry(args.params, args.name, {**plan.entry, "sets": {**layout, "deployed": {"calibration": "a", "reference": "a"}}}))
    sets = _sets_entry(args)
    plan.entry["sets"] = sets
    io = plan.io
    outs = ", ".join(f"{n} {list(s)}" for n, s in io.outputs.items())
    print(f"model    {args.model}: input {io.input_name!r} {list(io.input_shape)} ({io.layout}); outputs {outs} ({io.shapes_from})")
    opts = f" {plan.entry['task']['options']}" if plan.entry["task"]["options"] else ""
    print(f"adapter  {plan.adapter}{opts}: {plan.reason}")
    if plan.guessed and not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"the task adapter is a guess ({plan.adapter}); confirm it with --yes, or pass --adapter {plan.adapter} "
                              "(or the right one); params left unchanged")
        answer = input(f"use {plan.adapter} for {args.name}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise ConfigError(f"not confirmed; pass --adapter NAME with the right adapter; {args.params} left unchanged")
    _probe(args, plan, sets)
    _say_sets(args.name, sets)
    if plan.defaulted:
        print(f"defaults {', '.join(plan.defaulted)} written with quantkit's defaults: check them against how your package "
              f"preprocesses (models.{args.name}.intake.preprocessing)")
    _say_dropped(args, plan.entry)
    set_model_entry(args.params, args.name, plan.entry, force=args.force)
    print(f"wrote    {args.params}: models.{args.name} (source: file, file: {plan.entry['file']}); next: dvc repro")
    return 0


def _options(pairs: list[str], adapter: str | None) -> dict[str, Any] | None:
    """``--option KEY=VALUE`` pairs as the task options (VALUE read as YAML); None when none were given.

    Raises:
        ConfigError: a pair without ``=``, or options without --adapter (the guess brings its own).
    """
    import yaml

    from ..errors import ConfigError

    if not pairs:
        return None
    if adapter is None:
        raise ConfigError("--option sets the options of the adapter you name: pass --adapter NAME too")
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {pair}: write KEY=VALUE (e.g. layout=channels); 'quantkit params task' lists each adapter's options")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _sets_entry(args: argparse.Namespace) -> dict[str, Any]:
    """``models.NAME.sets`` from --calibration-set / --reference-set / --site-set (each kind's sets in one folder, every
    one registered), or another model's with --share-sets-of.

    Raises:
        ConfigError: no sets and no --share-sets-of, both, sets of one kind in several folders, a folder another model
            uses (naming --share-sets-of), or an unknown model to share with. InputFileError: a set not registered.
    """
    from ..calibset.manifest import MANIFEST, CalibrationSet
    from ..errors import ConfigError, InputFileError
    from ..paramsfile import model_names

    given = {"calibration": args.calibration_set, "reference": args.reference_set, "site": args.site_set}
    if args.share_sets_of:
        if any(given.values()):
            raise ConfigError("--share-sets-of uses another model's sets: drop --calibration-set / --reference-set / --site-set, or drop it")
        from ..calibset.model_sets import model_sets

        if args.share_sets_of not in model_names(args.params):
            raise ConfigError(f"{args.params}: --share-sets-of {args.share_sets_of}: no such model under 'models'")
        return model_sets(args.params, args.share_sets_of).to_dict()
    missing = [k for k, v in given.items() if not v]
    if missing:
        raise ConfigError(f"models add {args.name}: no --{missing[0]}-set: a model is calibrated and judged on its own images; "
                          "pass --calibration-set DIR --reference-set DIR --site-set DIR (registered sets: 'quantkit calibset register'), "
                          "or --share-sets-of MODEL to use another model's")
    root = args.params.resolve().parent
    used = _folders_in_use(args)
    entry: dict[str, Any] = {}
    for kind, dirs in given.items():
        parents = {Path(d).resolve().parent for d in dirs}
        if len(parents) > 1:
            raise ConfigError(f"--{kind}-set: put the model's {kind} sets in one folder (models.{args.name}.sets.{kind} is a folder "
                              f"of sets, e.g. data/{args.name}/{kind}/); got {', '.join(sorted(str(p) for p in parents))}")
        for d in dirs:
            if not (Path(d) / MANIFEST).is_file():
                raise InputFileError(f"{d}: not a registered set (no {MANIFEST}); register it: quantkit calibset register {d} --name NAME (its images in {d}/images/)")
            registered = CalibrationSet.load(d).kind
            if registered != kind:
                raise ConfigError(f"--{kind}-set {d}: registered as a {registered} set; pass it as --{registered}-set, or register "
                                  f"a copy with --kind {kind}")
        folder = parents.pop()
        rel = Path(os.path.relpath(folder, root)).as_posix()
        if rel.startswith("../"):
            raise ConfigError(f"--{kind}-set: {folder} lies outside {root}, the folder of {args.params} (the repository DVC runs in); "
                              f"move the sets into it (e.g. data/{args.name}/{kind}/)")
        if rel in used:
            raise ConfigError(f"--{kind}-set: {rel} holds models.{used[rel]}'s sets; give the model a folder of its own "
                              f"(e.g. data/{args.name}/{kind}/), or pass --share-sets-of {used[rel]}")
        entry[kind] = rel
    entry["deployed"] = {"calibration": Path(args.calibration_set[0]).name, "reference": Path(args.reference_set[0]).name}
    return entry


def _folders_in_use(args: argparse.Namespace) -> dict[str, str]:
    """``{set folder: model}`` for the folders the params' other models name."""
    from ..config import _read_params

    data = _read_params(args.params) if args.params.exists() else {}
    out: dict[str, str] = {}
    for name, entry in ((data or {}).get("models") or {}).items():
        sets = entry.get("sets") if isinstance(entry, dict) else None
        if name != args.name and isinstance(sets, dict):
            out.update({Path(str(v)).as_posix(): name for k, v in sets.items() if k != "deployed"})
    return out


def _probe(args: argparse.Namespace, plan: Any, sets: dict[str, Any]) -> None:
    """Run the model through its adapter on the first images of its deployed calibration set (FP32, the declared
    preprocessing) before anything is written: an adapter that cannot read the outputs is refused with its own message;
    one that decides nothing on any probe image is named as a warning.

    Raises:
        ModelError / ConfigError: the adapter cannot read the model's outputs on a real image.
    """
    from ..errors import ConfigError, ModelError
    from ..intake.declare import probe_decisions

    cal = args.params.resolve().parent / sets["calibration"] / sets["deployed"]["calibration"]
    try:
        found, images = probe_decisions(args.model, plan.entry, cal)
    except (ModelError, ConfigError) as e:
        raise type(e)(f"models add {args.name}: the {plan.adapter} adapter cannot read the model's outputs on {cal}: {e}; "
                      "pick the adapter (--adapter) and options (--option KEY=VALUE) that fit; params left unchanged") from None
    print(f"probe    {plan.adapter} on {images} images of {cal.name}: {found} decisions by FP32")
    if found == 0:
        print(f"warning  FP32 through the {plan.adapter} adapter decides nothing on {images} of your calibration images: check "
              "--adapter and --option (a layout that does not fit the head often reads as nothing found)")


def _say_sets(name: str, sets: dict[str, Any]) -> None:
    """Which sets will calibrate and judge the model."""
    d = sets["deployed"]
    print(f"sets     calibrated on {sets['calibration']}/{d['calibration']} (pool: every set in {sets['calibration']}), "
          f"bound on {sets['reference']}/{d['reference']}, judged on every set in {sets['site']} (models.{name}.sets)")


def _say_dropped(args: argparse.Namespace, entry: dict[str, Any]) -> None:
    """With --force: the keys of the old entry the new one does not carry (a hand-written override, a promoted set)."""
    from ..config import _read_params

    old = ((_read_params(args.params) or {}).get("models") or {}).get(args.name) if args.params.exists() else None
    if not isinstance(old, dict):
        return
    def keys(d: Any, prefix: str = "") -> set[str]:
        return {k for key, v in d.items() for k in (keys(v, f"{prefix}{key}.") if isinstance(v, dict) and v else {f"{prefix}{key}"})}
    if dropped := sorted(keys(old) - keys(entry)):
        print(f"replaces models.{args.name}: these keys of the old entry are not in the new one: {', '.join(dropped)}")

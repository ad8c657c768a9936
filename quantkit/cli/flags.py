"""Command-line flags derived from config classes, so every default lives in one place: the config.

``add_config_flags(parser, Cls, ["method", "chunk_size"])`` adds ``--method`` / ``--chunk-size`` with the field's
type (``Literal`` -> choices, ``bool`` -> ``--x / --no-x``), no argparse default (None = "not given"), and the
help text from the class docstring's ``Attributes:`` section plus the config's own default. ``flag_overrides``
returns the given flags as a dict for :meth:`quantkit.config.Config.replace`, which validates them like params.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import typing
from collections.abc import Sequence
from typing import Any, Literal, get_args, get_origin

from ..config import Config


def field_docs(cls: type) -> dict[str, str]:
    """``{field: description}`` from the Google-style ``Attributes:`` section of ``cls``'s docstring (first
    sentence, joined across wrapped lines)."""
    doc = inspect.getdoc(cls) or ""
    m = re.search(r"^Attributes:\n(.*?)(?:\n\S|\Z)", doc, flags=re.S | re.M)
    if not m:
        return {}
    out: dict[str, str] = {}
    current: list[str] = []
    for line in m.group(1).splitlines():
        head = re.match(r"^\s{4}([a-z_, ]+):\s*(.*)$", line)
        if head:
            current = [n.strip() for n in head.group(1).split(",")]
            for n in current:
                out[n] = head.group(2).strip()
        elif line.strip() and current:
            for n in current:
                out[n] += " " + line.strip()
    return {k: v.split(". ")[0].rstrip(".") for k, v in out.items()}


def _kind(tp: Any) -> tuple[Any, Sequence[Any] | None]:
    """``(argparse type, choices)`` for a field annotation; ``(bool, None)`` for booleans."""
    origin = get_origin(tp)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in get_args(tp) if a is not type(None)]
        return _kind(args[0]) if len(args) == 1 else (str, None)
    if origin is Literal:
        values = get_args(tp)
        return type(values[0]), values
    if tp in (bool, int, float, str):
        return tp, None
    raise TypeError(f"no flag for a field of type {tp}")


def add_config_flags(parser: argparse.ArgumentParser, cls: type[Config], fields: Sequence[str], *, section: str = "") -> None:
    """Add one flag per field of ``cls`` (see the module docstring); ``section`` names the params section in help."""
    hints = typing.get_type_hints(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    docs = field_docs(cls)
    for name in fields:
        tp, choices = _kind(hints[name])
        flag = "--" + name.replace("_", "-")
        where = f"params {section}.{name}" if section else name
        default = defaults[name]
        text = f"{docs.get(name, name.replace('_', ' '))} (overrides {where}; default {default!r})"
        if tp is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, dest=name, type=tp, choices=choices, default=None, help=text)


def flag_overrides(args: argparse.Namespace, fields: Sequence[str]) -> dict[str, Any]:
    """The flags among ``fields`` the user gave (value not None)."""
    return {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}


MODEL_HELP = ("a model under params 'models': models.NAME.<section> merged key by key over the top-level section "
              "(quantkit params show --model NAME)")


def add_model_flag(parser: Any, *, reads: str = "", **kwargs: Any) -> None:
    """``--model NAME``: the one meaning of ``--model`` in every command (a model of params.yaml's ``models``); ``reads``
    names what the command takes from it (``"its site sets"``) in the help, ``kwargs`` go to ``add_argument``."""
    parser.add_argument("--model", metavar="NAME", help=MODEL_HELP + (f"; {reads}" if reads else ""), **kwargs)


def task_agreement_metric(params: Any, model: str | None, intake: Any) -> Any:
    """The task adapter's primary agreement metric (params ``models.<model>.task`` / ``task``; db_text defaults),
    completed from the intake model (:meth:`~quantkit.tasks.TaskAdapter.with_model`: e.g. a grid decoder's input size).

    Raises:
        ModelError: the model's outputs do not fit the task's declared layout (one line naming the output).
    """
    from pathlib import Path

    from ..config import config_from_params, has_section
    from ..intake.prepare import output_shapes
    from ..modelio import load_model
    from ..quantize.fallback.metric import agreement_metric
    from ..tasks import TaskConfig

    cfg = config_from_params(TaskConfig, params, "task", model=model) if has_section(params, "task", model=model) else TaskConfig()
    intake = Path(intake)
    fp32 = load_model(intake / "model.onnx" if intake.is_dir() else intake, load_external_data=False)
    task = cfg.make().with_model(fp32)
    task.check_outputs(output_shapes(fp32))  # a task that does not fit the model is refused, as intake and bind refuse it
    return agreement_metric(task)

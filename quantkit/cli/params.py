"""``quantkit params [SECTION] [--markdown | --json | --out FILE]``: every params.yaml key, from the code."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "params",
        help="list every params.yaml section and key with its type, default and description",
        description="The params reference, generated from the config classes (quantkit.params.SECTIONS): every section, key, "
        "type, default and the field's description. docs/params.md is this command's --markdown output.",
    )
    p.add_argument("section", nargs="?", help="one section (e.g. intake, quantize.dynamic, bundle.verify); default: all. "
                   "'show' prints what one model runs with instead (with --model)")
    p.add_argument("--model", help="with 'show': a model under --params' 'models'")
    p.add_argument("--params", default="params.yaml", help="with 'show': the params file (default params.yaml)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="print the Markdown page (docs/params.md)")
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument("--out", metavar="FILE", help="write the Markdown page to FILE (atomically), e.g. docs/params.md")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._io import atomic_write_text
    from .._overwrite import check_output_file
    from ..errors import ConfigError
    from ..params import MARKDOWN_KIND, effective_settings, reference, render_effective, render_markdown, render_text

    if args.section == "show":
        if not args.model:
            raise ConfigError("quantkit params show needs --model NAME (a model under params 'models')")
        from ..quantize.targets_check import check_targets

        check_targets(args.params)  # a misspelt target runtime or recipe is named here, not first at the place stage
        keys = effective_settings(args.params, args.model)
        if args.json:
            print(json.dumps([dataclasses.asdict(k) for k in keys], indent=2, sort_keys=True))
        else:
            print(render_effective(args.model, keys), end="")
        return 0
    if args.model:
        raise ConfigError("--model goes with 'quantkit params show'; drop it, or write: quantkit params show --model NAME")
    sections = reference(args.section)
    if args.out:
        check_output_file(args.out, MARKDOWN_KIND)
        atomic_write_text(args.out, render_markdown(sections))
        print(f"wrote {args.out}: {len(sections)} sections, {sum(len(s.keys) for s in sections)} keys")
    elif args.markdown:
        print(render_markdown(sections), end="")
    elif args.json:
        print(json.dumps([dataclasses.asdict(s) for s in sections], indent=2, sort_keys=True))
    else:
        print(render_text(sections), end="")
    return 0

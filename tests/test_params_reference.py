"""The params reference is generated from the config classes; docs/params.md must match the code."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from quantkit import params as qparams
from quantkit.cli.main import main
from quantkit.config import Config

DOC = Path(__file__).resolve().parent.parent / "docs" / "params.md"


def test_docs_page_is_current():
    want = qparams.render_markdown(qparams.reference())
    assert DOC.read_text(encoding="utf-8") == want, "docs/params.md is stale: run 'quantkit params --out docs/params.md'"


def test_every_section_resolves_and_covers_every_field():
    for name in qparams.SECTIONS:
        cls = qparams.config_class(name)
        docs = qparams.reference(name)
        assert docs[0].section == name and [k.key for k in docs[0].keys] == [f.name for f in dataclasses.fields(cls)]
        for d in docs:
            assert all(k.type and k.default for k in d.keys)


def test_descriptions_come_from_each_docstring_style():
    @dataclasses.dataclass(frozen=True)
    class Styled(Config):
        """Prose: ``gamma`` is the exponent applied last, ``delta`` too short.

        Attributes:
            alpha: the first knob,
                continued on a second line.
            beta, eps: shared text for two keys.
        """

        alpha: int = 1
        beta: float = 2.0
        eps: float = 0.1
        gamma: float = 2.2
        delta: int = 0
        zeta: str = "z"
        """An attribute docstring."""

    docs = qparams.field_docs(Styled)
    assert docs == {"alpha": "the first knob, continued on a second line.", "beta": "shared text for two keys.", "eps": "shared text for two keys.",
                    "gamma": "is the exponent applied last", "delta": "", "zeta": "An attribute docstring."}
    assert qparams.field_docs(qparams.config_class("quantize.dynamic"))["per_channel"].startswith("per-output-channel weight scales")


def test_register_section_and_types():
    qparams.register_section("test_extra", "quantkit.note:Preprocessing")
    try:
        keys = {k.key: k for k in qparams.reference("test_extra")[0].keys}
        assert keys["color_order"].type == "'RGB' | 'BGR'" and keys["mean"].type == "[number, ...]" and keys["input_size"].default == "[640, 640]"
        assert keys["channels"].type == "1 | 3 | 4"
    finally:
        del qparams.SECTIONS["test_extra"]


def test_cli(capsys):
    assert main(["params", "intake"]) == 0
    out = capsys.readouterr().out
    assert "[intake]" in out and "[intake.preprocessing]" in out and "note_check: 'error' | 'warn' | 'off' = \"error\"" in out
    assert main(["params", "intake.preprocessing", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["section"] == "intake.preprocessing"
    assert main(["params", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "known sections:" in err[0]


@pytest.mark.parametrize("section", ["thresholds", "drift", "report", "bundle"])
def test_sections_the_readme_did_not_list_are_documented(section):
    text = qparams.render_markdown(qparams.reference(section))
    assert f"## `{section}`" in text and text.count("| `") >= 3

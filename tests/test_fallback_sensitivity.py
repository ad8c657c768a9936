"""The fallback's sensitivity search (issue 37, item 4): units ranked by the agreement lost when each alone is quantized,
the head first on ties, the fewest top-ranked units that meet; and an all-8-bit model that meets on the held-out images is
written as it is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
from test_fallback_windows import BODY, FAST, _metric, head  # noqa: F401  (the module fixture)

from quantkit.artifacts.fallback import Round
from quantkit.quantize.fallback import FallbackConfig, precision_fallback
from quantkit.quantize.fallback import run as fallback_run
from quantkit.quantize.fallback.search import compute_units, sensitivity_search


def test_the_head_that_breaks_is_ranked_first_and_kept_alone(head, tmp_path):  # noqa: F811
    root, intake, cset = head
    r = precision_fallback(intake, FallbackConfig.from_dict({**FAST, "target": 0.9, "search": "sensitivity"}), reference_sets=[cset],
                           out=tmp_path / "fb", base=root / "base", metric=_metric())
    names = [n.name for n in onnx.load(str(intake / "model.onnx")).graph.node]
    assert r.rounds[0].metric < 0.5 and r.met_on_search
    assert {x.family for x in r.rounds[1:]} == {"sensitivity"}
    assert "head_concat" in r.kept_names and not [n for n in r.kept_names if n.startswith("body_")]
    assert all(k.index >= 2 * BODY and "quantized alone it lost" in k.reason for k in r.kept)
    assert r.window is None and len(r.kept) < len(names) - 2 * BODY + 1


def test_compute_units_cut_before_each_compute_op_and_merge_to_most(head):  # noqa: F811
    _, intake, _ = head
    m = onnx.load(str(intake / "model.onnx"))
    names = [n.name for n in m.graph.node]
    units = compute_units(m, names)
    assert [u[0] for u in units] == [f"body_conv{i}" for i in range(BODY)] + ["box_conv", "score_conv"]
    assert [n for u in units for n in u] == names
    merged = compute_units(m, names, most=3)
    assert len(merged) == 3 and [n for u in merged for n in u] == names


def _probes(loss_alone: dict[int, float], meets, units: list[list[str]]):
    """A gain probe returning ``1 - loss`` of the one unit left quantized, and a probe that meets per ``meets(kept units)``."""
    every = [n for u in units for n in u]
    seen = []

    def gain(kept, info):
        quantized = [i for i, u in enumerate(units) if not set(u) <= set(kept)]
        assert len(quantized) == 1 and set(kept) == set(every) - set(units[quantized[0]])
        return Round(index=0, kept=len(kept), metric=1.0 - loss_alone[quantized[0]], worst_set="s", met=False)

    def probe(kept, info):
        ids = frozenset(i for i, u in enumerate(units) if set(u) <= set(kept))
        seen.append(ids)
        return Round(index=0, kept=len(kept), metric=0.0, worst_set="s", met=meets(ids))

    return gain, probe, seen


def test_sensitivity_search_promotes_the_fewest_top_ranked_units():
    units = [[f"n{i}a", f"n{i}b"] for i in range(8)]
    loss = {0: 0.01, 1: 0.30, 2: 0.02, 3: 0.02, 4: 0.20, 5: 0.0, 6: 0.02, 7: 0.01}
    gain, probe, _ = _probes(loss, lambda ids: {1, 4} <= ids, units)
    kept, why = sensitivity_search(units, gain, probe)
    assert kept == ["n1a", "n1b", "n4a", "n4b"]
    assert why["n1a"].startswith("unit 1 (n1a .. n1b): quantized alone it lost 0.3000, rank 1 of 8")
    # ties go to the later unit (the head before the stem): of units 2, 3, 6 (0.02 each), 6 ranks first
    gain, probe, _ = _probes(loss, lambda ids: {1, 4, 6} <= ids, units)
    assert sensitivity_search(units, gain, probe)[0] == ["n1a", "n1b", "n4a", "n4b", "n6a", "n6b"]


def test_sensitivity_search_is_none_when_every_unit_promoted_misses():
    units = [["a"], ["b"]]
    gain, probe, seen = _probes({0: 0.1, 1: 0.2}, lambda ids: False, units)
    assert sensitivity_search(units, gain, probe) is None and seen == [frozenset({0, 1})]


@pytest.mark.parametrize("held_figure,images,holds", [(0.95, 4, True), (0.85, 4, False), (0.95, 0, False)])
def test_an_all_8bit_model_that_meets_on_the_held_out_images_is_not_searched(monkeypatch, held_figure, images, holds):
    monkeypatch.setattr(fallback_run, "measure_sets", lambda path, refs, metric, **k: {"day": (held_figure, None), "night": (0.99, None)})
    probe = SimpleNamespace(seen={(): SimpleNamespace(folder=Path("/nonexistent"))})
    held = SimpleNamespace(images=images)
    assert fallback_run._base_holds(probe, held, None, FallbackConfig(target=0.9), {}) is holds

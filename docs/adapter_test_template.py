"""Tests every quantkit task adapter should pass. Copy this file into your package's ``tests/``, fill in
:func:`case` (the only part to edit), and run ``pytest``.

What is checked (the parts of :class:`quantkit.tasks.TaskAdapter`'s contract that evaluate, bind, fallback and
the report rely on; see ``docs/adapters.md``):

1. the adapter is registered under its ``name`` and its options round-trip through params (``to_dict`` /
   ``from_dict``, as ``params.yaml: task.options`` is read);
2. its class declarations are consistent: ``PRIMARY`` is one of ``THRESHOLDS``, each threshold is a float option,
   each ``objective`` is an ``AGREEMENT`` metric, metric names are unique, ``AGREEMENT`` is not empty;
3. ``check_outputs`` accepts the model's own output shapes and refuses ``case.wrong_shapes`` with a one-line
   ``ModelError``;
4. ``decide`` returns a ``Decision``: polygons ``(K, P, 2) float32``, scores ``(K,) float32``, labels
   ``(K,) int64``;
5. a decision agrees with itself (every agreement metric at its best), and counts add: a metric over two images
   is the ratio of the summed counts;
6. the primary filter commutes: ``candidates`` filtered with ``keep(scores, t)`` equals ``decide`` at
   ``PRIMARY = t``, for every ``t`` on the threshold's search range (operating-point searches use this).

Your decoding itself is yours to test, against outputs computed by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from quantkit.errors import ConfigError, ModelError
from quantkit.runner import OrtRunner
from quantkit.tasks import Decision, TaskAdapter, adapter_class, make_adapter


@dataclasses.dataclass(frozen=True)
class Case:
    """One adapter under test.

    ``adapter`` / ``options``: as in ``params.yaml: task``; ``model``: an ``onnx.ModelProto`` small enough to run
    in a test (a real export, or one built in the test with ``onnx.helper``), with its export note embedded when
    the adapter reads it in ``with_model``; ``inputs``: a few ``{input name: array}`` feeds (several images, some
    with items above the threshold); ``wrong_shapes``: output shapes ``check_outputs`` must refuse (e.g. one
    output's last dim changed).
    """

    adapter: str
    options: Mapping[str, Any]
    model: Any
    inputs: Sequence[Mapping[str, np.ndarray]]
    wrong_shapes: Mapping[str, Sequence[Any]]


# --- edit this fixture --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def case() -> Case:
    """Your adapter's case. Import the module that registers it (or rely on its entry point), then e.g.::

        import onnx
        import my_pkg.gfl_adapter  # noqa: F401 - registers 'gfl_head'
        model = onnx.load("tests/data/tiny_picodet.onnx")
        feeds = [{"image": np.random.default_rng(i).random((1, 3, 64, 64), np.float32)} for i in range(3)]
        return Case("gfl_head", {...}, model, feeds, {**output_shapes(model), "dist_8": [1, 64, 30]})
    """
    raise NotImplementedError("fill in case() in this copy of adapter_test_template.py")
# ------------------------------------------------------------------------------------------------------


def output_shapes(model: Any) -> dict[str, list[Any]]:
    """``{output name: [dim, ...]}`` of an ``onnx.ModelProto`` (a dim: int, symbolic name, or None), as
    quantkit passes them to ``check_outputs``."""
    return {o.name: [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in o.type.tensor_type.shape.dim]
            for o in model.graph.output}


def _adapter(case: Case) -> TaskAdapter:
    return make_adapter(case.adapter, dict(case.options)).with_model(case.model)


def _outputs(case: Case) -> list[dict[str, np.ndarray]]:
    with OrtRunner(case.model.SerializeToString(), name=f"{case.adapter} test model") as runner:
        return [dict(runner.infer(dict(feed))) for feed in case.inputs]


def test_registered_and_options_round_trip(case: Case) -> None:
    cls = adapter_class(case.adapter)
    assert cls.name == case.adapter
    a = make_adapter(case.adapter, dict(case.options))
    assert type(a).from_dict(a.to_dict()) == a
    with pytest.raises(ConfigError, match=r"unknown option 'no_such_option'"):
        make_adapter(case.adapter, {**case.options, "no_such_option": 1})


def test_declarations_are_consistent(case: Case) -> None:
    cls = adapter_class(case.adapter)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = [m.name for m in (*cls.AGREEMENT, *cls.ACCURACY)]
    assert cls.AGREEMENT and len(names) == len(set(names)), names
    assert cls.PRIMARY in {s.name for s in cls.THRESHOLDS}
    agreement = {m.name for m in cls.AGREEMENT}
    a = make_adapter(case.adapter, dict(case.options))
    for spec in cls.THRESHOLDS:
        assert spec.name in fields and isinstance(getattr(a, spec.name), float), spec.name
        assert spec.comparison in (">", ">=") and spec.search[0] < spec.search[1]
        assert not spec.objective or spec.objective in agreement, spec.objective
    assert (cls.LABELS == "") == (not cls.ACCURACY)


def test_check_outputs_accepts_the_model_and_refuses_a_wrong_layout(case: Case) -> None:
    a = _adapter(case)
    a.check_outputs(output_shapes(case.model))
    with pytest.raises(ModelError) as e:
        a.check_outputs(case.wrong_shapes)
    assert "\n" not in str(e.value) and case.adapter in str(e.value)


def test_decisions_have_the_documented_types(case: Case) -> None:
    a = _adapter(case)
    found = 0
    for out in _outputs(case):
        d = a.decide(out)
        assert isinstance(d, Decision)
        assert d.polygons.dtype == np.float32 and d.polygons.ndim == 3 and d.polygons.shape[0] == len(d) and d.polygons.shape[2] == 2
        assert d.scores.dtype == np.float32 and d.scores.shape == (len(d),)
        assert d.labels.dtype == np.int64 and d.labels.shape == (len(d),)
        assert np.all(np.isfinite(d.polygons)) and np.all(np.isfinite(d.scores))
        found += len(d)
    assert found > 0, "no input gives any item: add inputs with items above the threshold, or nothing below is tested"


def test_agreement_with_itself_is_perfect_and_counts_add(case: Case) -> None:
    a = _adapter(case)
    decisions = [a.decide(out) for out in _outputs(case)]
    per_image = [a.agreement(d, d) for d in decisions]
    total: dict[str, float] = {}
    for counts in per_image:
        assert all(isinstance(v, float) for v in counts.values()), counts
        for k, v in counts.items():
            total[k] = total.get(k, 0.0) + v
    for m in a.AGREEMENT:
        best = m.value(total)
        assert best == pytest.approx(1.0 * m.factor if m.higher_is_better else 0.0), (m.name, best)
    primary = a.primary_metric()
    num = sum(c.get(primary.num, 0.0) for c in per_image)
    den = sum(c.get(primary.den, 0.0) for c in per_image)
    assert primary.value(total) == pytest.approx(primary.factor * num / den if den else primary.empty)


def test_primary_filter_commutes_with_decoding(case: Case) -> None:
    a = _adapter(case)
    lo, hi = a.spec(a.PRIMARY).search
    for out in _outputs(case):
        cand = a.candidates(out)
        for t in np.linspace(lo, hi, 7):
            direct = a.with_thresholds({a.PRIMARY: float(t)}).decide(out)
            filtered = cand.select(a.keep(cand.scores, float(t)))
            assert len(direct) == len(filtered), t
            np.testing.assert_array_equal(np.sort(direct.scores), np.sort(filtered.scores))

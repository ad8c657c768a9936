"""Classifier adapter: [N, C] and [N, C, 1, 1] scores, logits, thresholds, refusals, agreement by hand."""

from __future__ import annotations

import numpy as np
import pytest
from models import const_model, run, shapes

from quantkit.errors import ConfigError, ModelError
from quantkit.tasks import Decision, make_adapter
from quantkit.tasks.classify import ClassifierAdapter

PROBS = np.array([[0.1, 0.7, 0.2]], np.float32)


@pytest.mark.parametrize("scores, options", [(PROBS, {}), (PROBS.reshape(1, 3, 1, 1), {}),
                                             (np.log(PROBS) - 1.0, {"softmax": True})])
def test_top1_and_threshold_on_every_layout(scores, options):
    m = const_model({"prob": scores})
    a = make_adapter("classifier", {"cls_thresh": 0.5, **options})
    a.check_outputs(shapes(m))
    d = a.decide(run(m))
    assert d.labels.tolist() == [1] and d.top == (1, "") and d.scores[0] == pytest.approx(0.7, abs=1e-6)
    strict = a.with_thresholds({"cls_thresh": 0.9}).decide(run(m))
    assert len(strict) == 0 and strict.top == (1, "")  # dropped by the threshold, still the argmax
    assert len(a.replace(positive_class=2).decide(run(m))) == 0
    assert len(a.replace(positive_class=1).decide(run(m))) == 1


@pytest.mark.parametrize("shape, hint", [([1, 40, 6625], "ctc_text"), ([1, 1], "C >= 2"), ([1, 3, 7, 7], "classifier [N, C]")])
def test_outputs_that_are_no_class_scores_are_refused(shape, hint):
    with pytest.raises(ModelError) as e:
        ClassifierAdapter().check_outputs({"out": shape})
    msg = str(e.value)
    assert "\n" not in msg and "'out'" in msg and "x".join(map(str, shape)) in msg and hint in msg


def test_a_sequence_output_is_refused_at_decode_too():
    with pytest.raises(ModelError, match=r"\[1x40x6625\]"):
        ClassifierAdapter().decide({"out": np.zeros((1, 40, 6625), np.float32)})
    with pytest.raises(ConfigError, match="positive_class: 5"):
        ClassifierAdapter(positive_class=5).check_outputs({"out": [1, 3]})


def _cls(label: int, score: float, thresh: float = 0.5) -> Decision:
    d = Decision(np.zeros((1, 0, 2), np.float32), np.array([score], np.float32), np.array([label]), top=(label, ""))
    return d.select(d.scores > thresh)


def test_agreement_counts_by_hand():
    a = ClassifierAdapter()
    pairs = [(_cls(1, 0.9), _cls(1, 0.8)),   # same class, both fire
             (_cls(1, 0.9), _cls(2, 0.8)),   # another class
             (_cls(0, 0.4), _cls(0, 0.6))]   # same class, only the quantized model fires
    counts = [a.agreement(r, g) for r, g in pairs]
    pooled = {k: sum(c[k] for c in counts) for k in counts[0]}
    assert a.primary_metric().name == "top1" and a.primary_metric().value(pooled) == pytest.approx(2 / 3)
    assert (pooled["agree_tp"], pooled["agree_fp"], pooled["agree_fn"]) == (1, 2, 1)
    assert a.metric("decision_f1").value(pooled) == pytest.approx(2 / 5)


def test_accuracy_and_integer_domain_meaning():
    a = ClassifierAdapter()
    t = a.truth({"class": 1}, None)
    assert a.metric("top1_accuracy").value(a.accuracy(t, _cls(1, 0.3))) == 1.0  # top-1, whatever the threshold
    assert a.truth({}, None) is None
    assert a.tensor_value(a.spec("cls_thresh"), 0.9) == 0.9
    assert ClassifierAdapter(softmax=True).tensor_value(a.spec("cls_thresh"), 0.9) is None
    assert ClassifierAdapter(softmax=True).decision_tensors({"o": [1, 3]}) == ()

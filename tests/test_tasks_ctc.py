"""CTC text recognizer adapter: greedy decoding with the model's own character list, line score and
text_score, layout refusals, edit distance, agreement and accuracy counts by hand."""

from __future__ import annotations

import numpy as np
import pytest
from models import const_model, run, shapes

from quantkit.errors import ConfigError, InputFileError, ModelError
from quantkit.tasks import Decision, make_adapter
from quantkit.tasks.ctc import CTCTextAdapter, edit_distance

CHARS = ["L", "O", "T", "0", "4", "-", "S", "N"]
TABLE = ["<blank>", *CHARS, " "]
B = 0
# steps: L L _ O T T ␣ 4 _ 4 _ _   ->  "LOT 44" (a blank separates the two 4s; repeats merge)
STEPS = [1, 1, B, 2, 3, 3, 9, 5, B, 5, B, B]
PEAK = [0.9, 0.95, 0.99, 0.8, 0.7, 0.6, 0.5, 0.9, 0.99, 0.6, 0.99, 0.99]
KEPT = [0.9, 0.8, 0.7, 0.5, 0.9, 0.6]  # first step of each run, blanks dropped


def _probs(steps=STEPS, peak=PEAK, c=10) -> np.ndarray:  # 10 = len(TABLE)
    p = np.zeros((1, len(steps), c), np.float32)
    for t, (k, v) in enumerate(zip(steps, peak)):
        p[0, t] = (1 - v) / (c - 1)
        p[0, t, k] = v
    return p


def _model(p=None, chars=CHARS, **kw):
    return const_model({"softmax_out": _probs() if p is None else p}, input_shape=(1, 3, 48, 96),
                       metadata={"character": "\n".join(chars)} if chars is not None else None, **kw)


def _adapter(m, **options) -> CTCTextAdapter:
    a = make_adapter("ctc_text", options).with_model(m)
    a.check_outputs(shapes(m))
    return a


def test_greedy_decoding_with_the_models_character_list():
    m = _model()
    a = _adapter(m)
    assert a.characters() == tuple(TABLE)
    d = a.decide(run(m))
    assert d.texts == ("LOT 44",) and d.top == (0, "LOT 44")
    assert d.scores[0] == pytest.approx(np.mean(KEPT), abs=1e-6)
    np.testing.assert_allclose(a.histogram_values(run(m)), KEPT, atol=1e-6)


def test_same_text_and_score_as_rapidocr_decoder():
    from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode

    p = _probs()
    ((text, score),) = CTCLabelDecode(character=list(CHARS))(p)
    d = _adapter(_model()).decide({"softmax_out": p})
    assert d.texts == (text,) and d.scores[0] == pytest.approx(score, abs=1e-6)


def test_text_score_keeps_or_drops_the_line_but_top_keeps_the_reading():
    m = _model()
    out = run(m)
    a = _adapter(m)
    score = float(np.mean(KEPT))  # 0.733
    assert len(a.with_thresholds({"text_score": 0.73}).decide(out)) == 1
    dropped = a.with_thresholds({"text_score": 0.74}).decide(out)
    assert len(dropped) == 0 and dropped.top == (0, "LOT 44")
    cand = a.candidates(out)
    for t in (0.0, 0.5, score, 0.9):
        assert len(cand.select(a.keep(cand.scores, t))) == len(a.with_thresholds({"text_score": t}).decide(out))


def test_logits_with_softmax_option_decode_the_same():
    logits = np.log(_probs()) + 3.0  # softmax is shift-invariant
    m = _model(logits)
    a = _adapter(m, softmax=True)
    d = a.decide(run(m))
    assert d.texts == ("LOT 44",) and d.scores[0] == pytest.approx(np.mean(KEPT), abs=1e-5)
    assert a.decision_tensors(shapes(m)) == () and a.tensor_value(a.spec("text_score"), 0.5) is None


def test_character_file_instead_of_metadata(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("\n".join(CHARS) + "\n", encoding="utf-8")
    m = _model(chars=None)
    a = _adapter(m, character_file=str(keys))
    assert a.decide(run(m)).texts == ("LOT 44",)
    lazy = make_adapter("ctc_text", {"character_file": str(keys)})  # without with_model: read on first use
    assert lazy.decide(run(m)).texts == ("LOT 44",)
    with pytest.raises(InputFileError, match="missing.txt: character file not found"):
        make_adapter("ctc_text", {"character_file": str(tmp_path / "missing.txt")}).decide(run(m))


def test_no_character_list_is_a_one_line_error():
    m = _model(chars=None)
    a = make_adapter("ctc_text", {}).with_model(m)
    with pytest.raises(ModelError, match="no character list.*character_file"):
        a.decide(run(m))


def test_character_list_survives_threshold_changes():
    a = _adapter(_model())
    assert a.with_thresholds({"text_score": 0.1}).characters() == tuple(TABLE)
    assert a.replace(space=False)._table is None  # the table depends on 'space': re-resolved from the model


@pytest.mark.parametrize("shape, fix", [
    ([1, 2], "classifier"),                 # PP-OCR's direction classifier
    ([1, 40, 6625], "10 classes"),          # a recognizer with another character list
    ([1, 10, 40], "transposed"),            # [N, C, T]
])
def test_outputs_that_do_not_fit_are_refused(shape, fix):
    a = make_adapter("ctc_text", {}).with_model(_model())
    with pytest.raises(ModelError) as e:
        a.check_outputs({"softmax_out": shape})
    msg = str(e.value)
    assert "\n" not in msg and "'softmax_out'" in msg and "x".join(map(str, shape)) in msg and "ctc_text [N, T, C]" in msg and fix in msg


def test_wrong_class_count_is_refused_at_decode():
    m = _model(_probs(c=12))
    with pytest.raises(ModelError, match="C must equal the 10 classes"):
        make_adapter("ctc_text", {}).with_model(m).decide(run(m))


def test_blank_last_and_no_space():
    steps = [s - 1 if s != B else 8 for s in STEPS if s != 9]  # the same line without the space, blank last
    peak = [v for s, v in zip(STEPS, PEAK) if s != 9]
    m = _model(_probs(steps, peak, c=9))
    assert _adapter(m, blank=-1, space=False).decide(run(m)).texts == ("LOT44",)
    with pytest.raises(ConfigError, match="blank"):
        make_adapter("ctc_text", {"blank": 3})


@pytest.mark.parametrize("a, b, d", [("kitten", "sitting", 3), ("", "abc", 3), ("abc", "", 3), ("flaw", "lawn", 2),
                                     ("LOT 44", "LOT 4", 1), ("LOT 44", "L0T 4", 2), ("same", "same", 0), ("ab", "ba", 2)])
def test_edit_distance(a, b, d):
    assert edit_distance(a, b) == d


def test_edit_distance_against_a_plain_dynamic_programme():
    def ref(a, b):
        prev = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            cur = [i]
            for j, cb in enumerate(b, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
            prev = cur
        return prev[-1]

    rng = np.random.default_rng(0)
    for _ in range(200):
        a = "".join(rng.choice(list("ab0O "), rng.integers(0, 12)))
        b = "".join(rng.choice(list("ab0O "), rng.integers(0, 12)))
        assert edit_distance(a, b) == ref(a, b)


def _line(text: str, kept: bool = True) -> Decision:
    d = Decision(np.zeros((1, 0, 2), np.float32), np.array([0.9], np.float32), np.zeros(1, np.int64), texts=(text,), top=(0, text))
    return d if kept else d.select(np.array([False]))


def test_agreement_counts_by_hand():
    a = CTCTextAdapter()
    c1 = a.agreement(_line("LOT 44"), _line("L0T 4"))            # O->0 and a 4 lost: 2 edits of 6
    c2 = a.agreement(_line("SN 0404"), _line("SN 0404", False))  # the same reading, dropped by text_score
    assert (c1["text_same"], c1["char_edits"], c1["ref_chars"]) == (0, 2, 6)
    assert (c1["agree_tp"], c1["agree_fp"], c1["agree_fn"]) == (0, 1, 1)
    assert (c2["text_same"], c2["char_edits"], c2["agree_fn"], c2["agree_fp"]) == (1, 0, 1, 0)
    pooled = {k: c1[k] + c2[k] for k in c1}
    assert a.primary_metric().name == "exact" and a.primary_metric().value(pooled) == 0.5
    cer = a.metric("cer")
    assert cer.value(pooled) == pytest.approx(2 / 13) and cer.higher_is_better is False
    assert a.metric("line_f1").value(pooled) == 0.0  # 2*0 / (0 + 1 + 2)
    assert a.metric("line_f1").value(a.agreement(_line("X"), _line("X"))) == 1.0


def test_accuracy_against_labelled_text():
    a = CTCTextAdapter()
    truth = a.truth({"text": "LOT 44"}, None)
    assert truth.texts == ("LOT 44",) and a.truth({"boxes": []}, None) is None
    ok, miss, dropped = a.accuracy(truth, _line("LOT 44")), a.accuracy(truth, _line("LOT 4")), a.accuracy(truth, _line("LOT 44", False))
    pooled = {k: ok[k] + miss[k] + dropped[k] for k in ok}
    assert a.metric("exact_accuracy").value(pooled) == pytest.approx(1 / 3)
    assert a.metric("cer_gt").value(pooled) == pytest.approx((0 + 1 + 6) / 18)  # a dropped line reads ""

"""verify(): dispatch per answer type, per-sample hints, and a contract over every scorer."""

from __future__ import annotations

import pytest

from beacon.types import Sample
from beacon.verify import SCORERS, Verdict, verify
from beacon.verify.verifier import hints_from_metadata


def _sample(answer: str, answer_type: str, **kwargs: object) -> Sample:
    return Sample(id="s", images=[], question="q", answer=answer, answer_type=answer_type, **kwargs)


def test_choice_gold_as_letter_or_option_text() -> None:
    options = {"A": "135°", "B": "140°", "C": "145°"}
    by_letter = _sample("C", "choice", options=options)
    by_text = _sample("145°", "choice", options=options)
    for sample in (by_letter, by_text):
        verdict = verify("The answer is (C).", sample)
        assert verdict == Verdict(True, 1.0, True, "C", "rule", None)
        assert not verify("<answer>B</answer>", sample).correct


def test_choice_unreadable_is_unparsed_and_wrong() -> None:
    sample = _sample("A", "choice", options={"A": "red", "B": "blue"})
    verdict = verify("Hmm, hard to say.", sample)
    assert not verdict.correct and not verdict.parsed and verdict.prediction is None


def test_choice_gold_outside_options_is_compared_as_text() -> None:
    sample = _sample("Unanswerable", "choice", options={"A": "10", "B": "20"})
    assert verify("<answer>Unanswerable</answer>", sample).correct
    assert not verify("<answer>A</answer>", sample).correct


def test_choice_without_options_is_a_loader_error() -> None:
    with pytest.raises(ValueError, match=r"Sample\.options"):
        verify("A", _sample("A", "choice"))


def test_number_with_hints() -> None:
    assert verify(
        "<answer>1.23</answer>", _sample("1.2", "number", metadata={"precision": 1})
    ).correct
    relaxed = _sample("0.57", "number", metadata={"relaxed_tol": 0.05})
    assert verify("0.59", relaxed).correct
    assert not verify("0.6", relaxed).correct
    assert verify("0.59", _sample("0.57", "number"), tolerance=0.05).correct
    assert not verify(
        "0.59", _sample("0.57", "number", metadata={"precision": 2}), tolerance=0.05
    ).correct
    year = _sample("2013", "number", metadata={"relaxed_tol": 0.05})
    assert not verify("2012", year).correct
    assert verify(
        "2012", _sample("2013", "number", metadata={"relaxed_tol": 0.05, "year": False})
    ).correct
    unparsed = verify("I cannot tell", _sample("3", "number"))
    assert not unparsed.parsed and unparsed.detail == "no number in the answer"


def test_bad_hint_type_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"metadata\['precision'\]"):
        verify("1", _sample("1", "number", metadata={"precision": "two"}))


def test_yesno_with_hallusionbench_digits() -> None:
    assert verify("Yes, it is.", _sample("1", "yesno")).correct
    assert verify("No.", _sample("0", "yesno")).correct
    assert not verify("No.", _sample("1", "yesno")).correct
    assert not verify("The circles look equal.", _sample("1", "yesno")).parsed


def test_text_autodetects_numbers_and_yesno() -> None:
    assert verify("62%", _sample("62", "text", metadata={"relaxed_tol": 0.05})).correct
    assert verify("No, it is not.", _sample("No", "text")).correct
    assert verify("<answer>inspired</answer>", _sample("Inspired", "text")).correct
    assert not verify("<answer>Apr</answer>", _sample("April", "text")).correct


def test_text_anls_score() -> None:
    sample = _sample("Inspired", "text", metadata={"anls": True, "answers": ["Inspiring"]})
    verdict = verify("<answer>Inspire</answer>", sample)
    assert not verdict.correct and verdict.score == pytest.approx(0.875, abs=1e-12)
    loose = _sample("abcde", "text", metadata={"anls": 0.7})
    assert verify("ab", loose).score == pytest.approx(0.4, abs=1e-12)


def test_math_routes() -> None:
    assert verify("\\boxed{\\frac{1}{2}}", _sample("0.5", "math")).correct
    assert verify("<answer>D</answer>", _sample("D", "math")).correct  # MathVerse letter gold
    assert not verify("<answer>C</answer>", _sample("D", "math")).correct
    assert verify("<answer>[2007, 2008]</answer>", _sample("[2007, 2008]", "math")).correct
    assert not verify("<answer>2007 to 2008</answer>", _sample("[2007, 2008]", "math")).correct
    options = {"A": "40°", "B": "60°"}
    assert verify("Answer: B", _sample("B", "math", options=options)).correct


def test_lists() -> None:
    gold = _sample("['Mars', 'Galaxy', 'Twirl']", "list")
    assert verify("<answer>[Mars, Galaxy, Twirl]</answer>", gold).correct
    assert not verify("<answer>Galaxy, Mars, Twirl</answer>", gold).correct
    unordered = _sample("['Mars', 'Galaxy', 'Twirl']", "list", metadata={"list_order": False})
    assert verify("<answer>Galaxy, Mars and Twirl</answer>", unordered).correct
    numbers = _sample("[1.5, 3]", "list", metadata={"relaxed_tol": 0.05})
    assert verify("<answer>[1.52,3]</answer>", numbers).correct


def test_unknown_answer_type_is_refused() -> None:
    sample = _sample("1", "text")
    sample.answer_type = "ranking"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="has no scorer"):
        verify("1", sample)


_CONTRACT_GOLDS = {
    "choice": ("B", {"A": "red", "B": "blue"}),
    "number": ("3", None),
    "yesno": ("yes", None),
    "text": ("Paris", None),
    "math": ("\\frac{1}{2}", None),
    "list": ("[1, 2]", None),
}
_CONTRACT_RESPONSES = [
    "",
    "B",
    "<answer></answer>",
    "<answer>",
    "\\boxed{",
    "yes 3 Paris 0.5 [1, 2]",
    "<sandbox_output>B</sandbox_output>",
    "x" * 5000,
    "The answer is \\frac{1}{0}",
]


@pytest.mark.parametrize("answer_type", sorted(SCORERS))
def test_contract_every_scorer_returns_a_sound_verdict(answer_type: str) -> None:
    gold, options = _CONTRACT_GOLDS[answer_type]
    sample = _sample(gold, answer_type, options=options)
    for response in _CONTRACT_RESPONSES:
        verdict = verify(response, sample)
        assert isinstance(verdict, Verdict)
        assert 0.0 <= verdict.score <= 1.0
        assert verdict.source == "rule"
        assert not (verdict.correct and not verdict.parsed)
        assert verdict.parsed or verdict.prediction is None


def test_contract_covers_every_answer_type() -> None:
    assert set(_CONTRACT_GOLDS) == set(SCORERS)


def test_hints_accept_json_number_forms() -> None:
    hints = hints_from_metadata(
        _sample("1", "number", metadata={"precision": 2.0, "relaxed_tol": 0, "anls": True})
    )
    assert (hints.precision, hints.relaxed_tol, hints.anls) == (2, 0.0, 0.5)
    assert hints_from_metadata(_sample("1", "text", metadata={"anls": False})).anls is None
    with pytest.raises(ValueError, match="list_order"):
        hints_from_metadata(_sample("1", "list", metadata={"list_order": "yes"}))
    with pytest.raises(ValueError, match="relaxed_tol"):
        hints_from_metadata(_sample("1", "number", metadata={"relaxed_tol": True}))

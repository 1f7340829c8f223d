"""hint_leaks: an answer-free hint passes, every way of giving the answer away is caught."""

from __future__ import annotations

import pytest

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.hints import check_hint, hint_leaks, leak_reasons, needs_hint, rescued

OPTIONS = {"A": "red", "B": "dark blue", "C": "green", "D": "12 apples"}

LEAKS = [
    # normalized match of a text answer
    ("The sign says Stop.", "stop", None),
    ("the city is new-york", "New York", None),
    ("It reads  N E W  — no: 'new   york'", "New York", None),
    ("ＳＴＯＰ is written on it", "stop", None),  # full-width letters (NFKC)
    ("answer: yes", "Yes", None),
    # symbolic answers, spaces removed
    ("so the area is x ^ 2 + 1 after simplifying", "x^2+1", None),
    ("the ratio is 3 / 4", "3/4", None),
    # option letters used as references
    ("Option B fits the colour best.", "B", OPTIONS),
    ("option b", "B", OPTIONS),
    ("pick (B) after cropping", "B", OPTIONS),
    ("B) is what the crop shows", "B", OPTIONS),
    ("Answer: B.", "B", OPTIONS),
    ("Candidates: B", "(B)", OPTIONS),
    ("choice [B] matches", "B", OPTIONS),
    ("A. is the one", "A", OPTIONS),
    ("Look at A then decide", "A", OPTIONS),  # "A" mid-sentence is a reference, not an article
    # the correct option's text, with the answer given as a letter or as the text
    ("Crop the bottle; its cap is dark-blue.", "B", OPTIONS),
    ("its cap is DARK BLUE", "dark blue", OPTIONS),
    # numbers in any notation
    ("Count them: there should be 42.", "42", None),
    ("the total is 1,000 units", "1000", None),
    ("the total is 1000", "1,000", None),
    ("the value is 3.50 exactly", "3.5", None),
    ("roughly 0.25 of the chart", "25%", None),
    ("about 25 percent", "25%", None),
    ("there are forty-two... no, twelve of them", "12", None),
    ("the box (100,200,300,400) holds it", "200", None),
    ("the answer is -5 degrees", "-5", None),
    ("twelve apples in the crop", "D", OPTIONS),  # the correct option's number, as a word
    ("４２ is printed", "42", None),  # full-width digits
    # an answer code spelled out character by character
    ("The crop shows 4 9 E in small type.", "49E", None),
    ("read it as 4-9-e", "49E", None),
    ("it says s.t.o.p", "stop", None),
]

SAFE = [
    ("Crop the top-left quarter and zoom in 2x before reading the label.", "stop", None),
    ("A crop of the bottle cap will show its colour.", "A", OPTIONS),  # article "A"
    ("Compare the cap with each option's colour.", "B", OPTIONS),
    ("Zoom on the blue region first.", "B", OPTIONS),  # "blue" is not the option text "dark blue"
    ("Count the apples in each row, then add the rows.", "42", None),
    ("Use the scale bar at 10 px per unit.", "42", None),
    ("The stopwatch is on the left.", "stop", None),  # whole words only
    ("Measure the angle at vertex B of the triangle", "12", None),
    ("Look for 142 in the table header", "42", None),  # a different number containing 42
    ("Read the 3-character code in the bottom-left part.", "49E", None),
    ("Steps: crop, zoom, then read each character.", "49E", None),
]


@pytest.mark.parametrize(("hint", "answer", "options"), LEAKS)
def test_leak_is_caught(hint, answer, options) -> None:
    assert hint_leaks(hint, answer, options), leak_reasons(hint, answer, options)


@pytest.mark.parametrize(("hint", "answer", "options"), SAFE)
def test_answer_free_hint_passes(hint, answer, options) -> None:
    assert not hint_leaks(hint, answer, options), leak_reasons(hint, answer, options)


def test_reasons_name_the_rule() -> None:
    reasons = leak_reasons("Option B: dark blue, 12 of them", "B", OPTIONS)
    assert any("correct option 'B'" in r for r in reasons)
    assert any("option's text 'dark blue'" in r for r in reasons)


def test_check_hint_refuses_missing_and_leaking_hints() -> None:
    assert not check_hint(None, "3").ok
    assert not check_hint("   ", "3").ok
    bad = check_hint("It is 3.", "3")
    assert not bad.ok and bad.problems
    assert check_hint("Zoom into the dial first.", "3").ok


def test_hint_rule_is_all_wrong() -> None:
    assert needs_hint(GroupOutcomes.of([False, False], [True, False]))
    assert not needs_hint(GroupOutcomes.of([False, True], [True, False]))
    # a hinted group never asks for another hint
    assert not needs_hint(GroupOutcomes.of([False, False], [True, True], hinted=True))


def test_rescued_means_the_hinted_group_trains() -> None:
    hinted = GroupOutcomes.of([True, False], [True, True], hinted=True)
    assert rescued(hinted, [1.0, 0.1])
    assert not rescued(GroupOutcomes.of([False, False], [True, True], hinted=True), [0.1, 0.1])
    assert not rescued(GroupOutcomes.of([True, False], [True, True]), [1.0, 0.1])


@pytest.mark.parametrize(
    ("hint", "answer"),
    [
        ("half of the bars are red: 1/2", "0.5"),
        ("it is 0.5 of the total", "1/2"),
        ("The answer is \\boxed{42}", "42"),
        ("the city of Paris, France", "Paris."),
        ("Mark it as answer (b).", "B"),
    ],
)
def test_more_notations_are_caught(hint: str, answer: str) -> None:
    options = {"A": "cat", "B": "dog"} if answer == "B" else None
    assert hint_leaks(hint, answer, options), leak_reasons(hint, answer, options)

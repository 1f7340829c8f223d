"""Options answered by number (GameQA's convention), 1-based and 0-based."""

from __future__ import annotations

import pytest

from beacon.verify.option_number import read_option_number

TEXTS = ["1-right-forward, 2-up", "1-left-forward, 2-up", "Nothing happens."]
# Sokoban's options (tongjingqi/Game-RL sokoban-data-00001-00001 and -00005, both 1-based).
SOKOBAN_POINTS = ["(6, 4)", "(4, 4)", "(2, 6)", "(3, 2)", "(6, 6)", "(3, 5)", "(6, 5)", "(4, 2)"]
SOKOBAN_NUMBERS = ["7", "9", "15", "13", "12", "10", "11", "3"]
# Snake numbers its options from 0; these are coordinates, in that layout.
SNAKE_POINTS = ["(1, 2)", "(2, 2)", "(3, 1)", "(1, 3)"]


@pytest.mark.parametrize(
    ("answer", "base", "expected"),
    [
        ("3", 1, 3),
        ("Option 2", 1, 2),
        ("(1) because the path is open", 1, 1),
        ("2: 1-left-forward, 2-up", 1, 2),
        ("1-left-forward, 2-up", 1, 2),  # the option's text, not a leading number
        ("nothing happens", 1, 3),
        ("4", 1, None),  # not an option
        ("0", 0, 0),
        ("3", 0, None),
        ("I am not sure", 1, None),
        (None, 1, None),
    ],
)
def test_read_option_number(answer: str | None, base: int, expected: int | None) -> None:
    assert read_option_number(answer, TEXTS, base) == expected


@pytest.mark.parametrize(
    ("answer", "texts", "base", "expected"),
    [
        ("(2, 6)", SOKOBAN_POINTS, 1, 3),  # option 3's text, not option 2
        ("(2,6)", SOKOBAN_POINTS, 1, 3),  # the same coordinate, spelled without the space
        ("2, 6", SOKOBAN_POINTS, 1, 3),
        ("[3] (2, 6)", SOKOBAN_POINTS, 1, 3),  # the option line as the question shows it
        ("3", SOKOBAN_POINTS, 1, 3),  # no option is "3": the number names the option
        ("(9, 9)", SOKOBAN_POINTS, 1, None),
        ("3", SOKOBAN_NUMBERS, 1, 8),  # option 8's text is "3"
        ("8", SOKOBAN_NUMBERS, 1, 8),  # no option is "8"
        ("Option 3", SOKOBAN_NUMBERS, 1, 3),  # named as an option number, not as a text
        ("(1, 3)", SNAKE_POINTS, 0, 3),
        ("(3, 1)", SNAKE_POINTS, 0, 2),
        ("0", SNAKE_POINTS, 0, 0),
    ],
)
def test_an_option_text_names_its_option_before_a_number_is_read(
    answer: str, texts: list[str], base: int, expected: int | None
) -> None:
    assert read_option_number(answer, texts, base) == expected

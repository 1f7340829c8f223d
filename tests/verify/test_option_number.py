"""Options answered by number (GameQA's convention), 1-based and 0-based."""

from __future__ import annotations

import pytest

from beacon.verify.option_number import read_option_number

TEXTS = ["1-right-forward, 2-up", "1-left-forward, 2-up", "Nothing happens."]


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

"""Grid-coordinate answers (BabyVision's published golds: "(4,7)", "(10, 9)", "10,5",
"Row 4 Column 17") read and compared by their integers in order."""

from __future__ import annotations

import pytest

from beacon.verify.coordinates import coordinates_match, is_coordinate, read_coordinates


@pytest.mark.parametrize("gold", ["(4,7)", "(10, 9)", "10,5", "Row 4 Column 17", "[2, 3, 1]"])
def test_coordinate_golds(gold: str) -> None:
    assert is_coordinate(gold)


@pytest.mark.parametrize("gold", ["12", "left", "3 cats and 2 dogs", "Spade 2", "4x+2"])
def test_not_coordinates(gold: str) -> None:
    assert not is_coordinate(gold)


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("(4, 7)", "(4,7)", True),
        ("row 4, column 7", "(4,7)", True),
        ("(10,5)", "10,5", True),
        ("Row 4 Column 17", "(4, 17)", True),
        ("(7, 4)", "(4,7)", False),
        ("(4, 7) in the 7x7 grid", "(4,7)", True),  # the last bracketed pair of the right size
        ("somewhere near the middle", "(4,7)", None),
        ("1, 2, 3", "(4,7)", None),
    ],
)
def test_coordinates_match(answer: str, gold: str, expected: bool | None) -> None:
    assert coordinates_match(answer, gold) is expected


def test_read_coordinates_prefers_the_whole_answer_when_it_has_the_right_count() -> None:
    assert read_coordinates("3 and 9", 2) == (3, 9)
    assert read_coordinates("(1, 2) then (3, 4) and 5", 2) == (3, 4)

"""TIR-Bench's task rules as pure functions: eq. (1) position accuracy, eq. (2) set IoU, the
official n²-run extraction, and the rule each gold form selects."""

from __future__ import annotations

import pytest

from beacon.verify.tirbench import (
    TIRItem,
    jigsaw_order,
    ocr_gold,
    position_accuracy,
    score_tirbench,
    set_iou,
)


def test_position_accuracy_eq_1() -> None:
    assert position_accuracy([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert position_accuracy([2, 1, 3, 4], [1, 2, 3, 4]) == 0.5
    assert position_accuracy([4, 3, 2, 1], [1, 2, 3, 4]) == 0.0


def test_set_iou_eq_2() -> None:
    assert set_iou({1, 2}, {2, 3}) == pytest.approx(1 / 3)
    assert set_iou({1, 2, 3}, {1, 2, 3}) == 1.0
    assert set_iou(set(), set()) == 1.0  # the official convention


def test_jigsaw_order_takes_the_first_run_of_n_squared_integers() -> None:
    text = "Grid 3x3.\n**2, 1, 3,\n4, 6, 5,\n7, 9, 8**"
    assert jigsaw_order(text, 3) == [2, 1, 3, 4, 6, 5, 7, 9, 8]
    assert jigsaw_order("[4, 1, 8, 9, 3, 6, 2, 7, 5]", 3) == [4, 1, 8, 9, 3, 6, 2, 7, 5]
    assert jigsaw_order("1, 2, 3", 3) is None


def test_ocr_gold_fix_matches_on_the_image_name_as_the_official_script() -> None:
    assert ocr_gold(TIRItem("ocr", "mobile", image_1="data/ocr/60.jpg")) == "mobi"
    assert ocr_gold(TIRItem("ocr", "buenos", image_1="data/ocr/62.jpg")) == "aires"
    assert ocr_gold(TIRItem("ocr", "text", image_1="data/ocr/6.jpg")) == "text"


@pytest.mark.parametrize(
    ("item", "response", "correct", "score"),
    [
        (TIRItem("maze", "F"), "Correct choice: F. No answer", True, 1.0),
        (TIRItem("maze", "F"), "<answer>E</answer>", False, 0.0),
        (TIRItem("symbolic", "ABC"), "<answer>A, B, C</answer>", True, 1.0),
        (TIRItem("symbolic", "ABC"), "<answer>AB</answer>", False, 0.0),
        (TIRItem("instrument", "45"), "<answer>45 seconds</answer>", True, 1.0),
        (TIRItem("instrument", "45"), "<answer>44</answer>", False, 0.0),
        (TIRItem("math", "0.5"), "<answer>\\frac{1}{2}</answer>", True, 1.0),
        (TIRItem("spot_difference", "4"), "<answer>4</answer>", True, 1.0),
        (TIRItem("word_search", "12"), "<answer>12</answer>", True, 1.0),
        (TIRItem("visual_search", "a red kite"), "<answer>A red kite.</answer>", True, 1.0),
        (TIRItem("jigsaw", "[2, 1, 3, 4]", jigsaw_size=2), "<answer>2 1 4 3</answer>", False, 0.5),
    ],
)
def test_rule_per_gold_form(item: TIRItem, response: str, correct: bool, score: float) -> None:
    verdict = score_tirbench(response, item)
    assert verdict.correct is correct and verdict.score == pytest.approx(score)


def test_unreadable_answers_are_unparsed() -> None:
    for item in (TIRItem("maze", "B"), TIRItem("instrument", "45"), TIRItem("symbolic", "CD")):
        verdict = score_tirbench("<answer>I am not sure</answer>", item)
        assert not verdict.parsed and verdict.score == 0.0
    assert not score_tirbench("", TIRItem("jigsaw", "1, 2, 3, 4", jigsaw_size=2)).parsed


def test_jigsaw_list_followed_by_prose_is_read_from_the_last_run() -> None:
    """Responses in the style of the official extractor's examples: the order in bold, then
    a sentence; a row-by-row sketch before the final list."""
    item = TIRItem("jigsaw", "[2, 1, 4, 3]", jigsaw_size=2)
    prose = "My arrangement:\n**2, 1,\n4, 3**\n\nThis puts the sky on top and the grass below."
    assert score_tirbench(prose, item).score == 1.0
    sketch = "Row 1 → 1 2\nRow 2 → 3 4\n\nFinal order:\n2, 1, 3, 4\n\nThat restores the photo."
    assert score_tirbench(sketch, item).score == 0.5
    tagged = "<answer>1, 2, 3, 4</answer>"  # an answer span wins over anything else
    assert score_tirbench("2, 1, 4, 3 was my first guess. " + tagged, item).score == 0.0

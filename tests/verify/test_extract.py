"""extract_answer: where the final answer is found, and what is never taken for it."""

from __future__ import annotations

import pytest

from beacon.verify import extract_answer
from beacon.verify.extract import boxed_contents, clean_response


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<answer>42</answer>", "42"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),  # the last tag
        ("reasoning...\n<answer>  7 cm </answer>", "7 cm"),
        ("reasoning...\n<answer>3.5", "3.5"),  # closing tag missing at the end
        ("<answer>The answer is 14 cm.</answer>", "14 cm"),
        ("<answer>$\\boxed{\\frac{1}{2}}$</answer>", "\\frac{1}{2}"),
        ("So \\boxed{\\frac{\\sqrt{3}}{2}} is it.", "\\frac{\\sqrt{3}}{2}"),  # nested braces
        ("first \\boxed{1}, finally \\boxed{2}", "2"),
        ("\\boxed 5", "5"),
        ("We compute things.\nThe answer is 12.", "12"),
        ("Answer: Paris", "Paris"),
        ("**Final Answer:** 3.14", "3.14"),
        ("final answer 7", "7"),
        ("Final answer:\n\n  -3", "-3"),
        ("line one\n\nlast line here.\n\n", "last line here"),
        ("The value is 3.5.", "The value is 3.5"),
        ("$x^2$", "x^2"),
        ("**Inspired**", "Inspired"),
        ("", None),
        ("  \n ", None),
    ],
)
def test_extract_answer(response: str, expected: str | None) -> None:
    assert extract_answer(response) == expected


def test_sandbox_output_is_not_the_answer() -> None:
    response = (
        "Let me measure.<code>```python\nprint(41)\n```</code>"
        "<sandbox_output>41\nAnswer: 41</sandbox_output>\nThe bar is 40 units tall."
    )
    assert extract_answer(response) == "The bar is 40 units tall"


def test_answer_tag_printed_by_code_is_ignored() -> None:
    response = "<code>print('<answer>9</answer>')</code><sandbox_output><answer>9</answer>"
    response += "</sandbox_output>\n<answer>8</answer>"
    assert extract_answer(response) == "8"


def test_thinking_is_dropped_when_an_answer_follows() -> None:
    assert extract_answer("<think>maybe 3\nAnswer: 3</think>\nAnswer: 4") == "4"
    assert extract_answer("<think>the answer is 5</think>") == "5"


def test_answer_in_a_fenced_block_only_is_still_read() -> None:
    assert clean_response("```\n17\n```").strip() == "17"
    assert extract_answer("<code>```python\n17\n```</code>") == "17"


def test_boxed_contents_in_order() -> None:
    assert boxed_contents("\\boxed{a{b}c} \\fbox{d}") == ["a{b}c", "d"]


def test_unbalanced_box_takes_the_rest() -> None:
    assert boxed_contents("\\boxed{1 + {2") == ["1 + {2"]

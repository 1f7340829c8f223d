"""Parsing tool calls and answers in both protocols, on the nasty cases models produce."""

import pytest

from beacon.agent.formats import THYME, TOOL_CALL, get_format


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("<code>\n```python\nprint(1)\n```\n</code>", "print(1)"),
        ("<code>```py\nx = 2\nprint(x)```</code>", "x = 2\nprint(x)"),
        ("<code>print('no fence')</code>", "print('no fence')"),
        ("<code>\n```\nimport cv2\n```\n</code>", "import cv2"),
        ("<code>```PYTHON\n    indented()\n```</code>", "    indented()"),
    ],
)
def test_thyme_code_blocks(text: str, code: str) -> None:
    assert THYME.parse_call(text).code == code


def test_thyme_empty_block_is_an_error_not_code() -> None:
    parsed = THYME.parse_call("<code>\n```python\n\n```\n</code>")
    assert parsed.code is None
    assert "empty" in parsed.error


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (
            '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>',
            "print(1)",
        ),
        (
            '<tool_call>\n{"name": "python", "arguments": "{\\"code\\": \\"x=1\\"}"}\n</tool_call>',
            "x=1",
        ),
    ],
)
def test_tool_call_json(text: str, code: str) -> None:
    assert TOOL_CALL.parse_call(text).code == code


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{'name': 'python'}</tool_call>", "invalid JSON"),
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', '"name": "python"'),
        ('<tool_call>{"name": "python", "arguments": {"code": ""}}</tool_call>', "non-empty"),
        ('<tool_call>{"name": "python", "arguments": 3}</tool_call>', "non-empty"),
        ("<tool_call>[1, 2]</tool_call>", '"name": "python"'),
    ],
)
def test_malformed_tool_calls_say_why(text: str, fragment: str) -> None:
    parsed = TOOL_CALL.parse_call(text)
    assert parsed.code is None
    assert fragment in parsed.error


@pytest.mark.parametrize("fmt", [THYME, TOOL_CALL])
def test_close_tag_without_open_tag_is_an_error(fmt) -> None:
    parsed = fmt.parse_call(f"some reasoning print(1) {fmt.call_close}")
    assert parsed.code is None and "without an opening" in parsed.error


def test_find_calls_returns_only_complete_calls_in_order() -> None:
    text = "a <code>one</code> b <code>two</code> c <code>unfinished"
    assert THYME.calls(text) == ["<code>one</code>", "<code>two</code>"]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("<answer>B</answer>", "B"),
        ("<answer>1</answer> then <answer> 2 </answer>", "2"),
        ("no tags", None),
        ("<answer>open only", "open only"),  # out of tokens inside the answer
        ("<answer>\nmulti\nline\n</answer>", "multi\nline"),
        ("<code>print('<answer>A</answer>')</code> so <answer>B</answer>", "B"),
        ("<code>print('<answer>A</answer>')</code> no answer", None),
        ("<code>print('<answer>A</answer>')", None),  # still inside the code
    ],
)
def test_answer_span(text: str, answer: str | None) -> None:
    span = THYME.answer_span(text)
    assert (None if span is None else span.strip()) == answer


def test_unknown_format_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"agent\.format"):
        get_format("xml")

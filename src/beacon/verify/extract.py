"""Find the final answer inside a model response.

A response from an agentic episode holds reasoning, code, sandbox outputs and, ideally, one
`<answer>...</answer>`. The answer is looked for in this order (the first that exists wins):

1. the last `<answer>...</answer>` span (a missing closing tag at the very end is tolerated);
2. the last `\\boxed{...}` (nested braces are matched);
3. the tail of the last "answer is ..." / "Answer: ..." / "final answer ..." phrase;
4. the last non-empty line.

Before that, code (`<code>`, fenced blocks, `<tool_call>`) and tool results
(`<sandbox_output>`, `<tool_response>`) are removed: a number printed by the sandbox is not the
model's answer. Reasoning in `<think>...</think>` is dropped when text follows it.

Inside an answer span, a `\\boxed{}` or an "answer is" phrase is unwrapped too, so
`<answer>The answer is 14 cm</answer>` gives "14 cm".
"""

from __future__ import annotations

import re

_TOOL_OUTPUTS = [
    re.compile(r"<sandbox_output>.*?(?:</sandbox_output>|\Z)", re.S),
    re.compile(r"<tool_response>.*?(?:</tool_response>|\Z)", re.S),
]
_CODE = [
    re.compile(r"<code>.*?(?:</code>|\Z)", re.S),
    re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.S),
    re.compile(r"```.*?(?:```|\Z)", re.S),
]
_DELIMITERS = re.compile(r"```[\w+-]*|</?code>|</?tool_call>")
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")

# "answer is X", "Answer: X", "final answer: X", "correct option is X", "答案是 X".
# A plain "answer" needs a connector so that "to answer this question" is not a marker.
_CONNECTOR = r"(?:is\b|:|=|-|would\s+be\b|should\s+be\b|will\s+be\b)"
_MARKER = re.compile(
    rf"(?:\bfinal\s+answer\b(?:\s*{_CONNECTOR})?"
    rf"|\b(?:the\s+)?(?:correct\s+)?answer\b\s*{_CONNECTOR}"
    rf"|\bcorrect\s+(?:option|choice)\b(?:\s*{_CONNECTOR})?"
    r"|答案\s*(?:是|为|：|:))"
    r"\s*:?",
    re.I,
)
_WRAPPERS = [
    re.compile(r"^\$+([^$]*)\$+$", re.S),
    re.compile(r"^\\\((.*)\\\)$", re.S),
    re.compile(r"^\\\[(.*)\\\]$", re.S),
    re.compile(r"^\\(?:text|textbf|mathrm|mathbf|textrm)\{(.*)\}$", re.S),
    re.compile(r"^\*\*(.*)\*\*$", re.S),
    re.compile(r"^\*(.*)\*$", re.S),
    re.compile(r"^`(.*)`$", re.S),
    re.compile(r"^\"(.*)\"$", re.S),
    re.compile(r"^“(.*)”$", re.S),
]


def clean_response(response: str) -> str:
    """The response without code, tool calls, tool outputs and (when followed by text) thinking.

    If removing code leaves nothing, the text without tool outputs and with only the fence and
    tag delimiters removed is returned, so a model that wrote its answer in a fenced block is
    still read.
    """
    text = response.replace("\r\n", "\n")
    if "</think>" in text:
        after = text.rsplit("</think>", 1)[1]
        text = after if after.strip() else text.replace("<think>", "").replace("</think>", "")
    for pattern in _TOOL_OUTPUTS:
        text = pattern.sub("\n", text)
    cleaned = text
    for pattern in _CODE:
        cleaned = pattern.sub("\n", cleaned)
    if cleaned.strip():
        return cleaned
    return _DELIMITERS.sub("\n", text)


def answer_span(text: str) -> str | None:
    """Content of the last `<answer>` tag; an unclosed tag runs to the end of the text."""
    start = text.rfind(_ANSWER_OPEN)
    if start < 0:
        return None
    body = text[start + len(_ANSWER_OPEN) :]
    end = body.find(_ANSWER_CLOSE)
    return body if end < 0 else body[:end]


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}` in order, with nested braces matched.

    `\\boxed 5` (no braces) gives the next token; an unbalanced brace gives the rest of the text.
    """
    found = []
    for match in _BOXED.finditer(text):
        pos = match.end()
        if pos < len(text) and text[pos] == "{":
            found.append(_balanced(text, pos))
        else:
            token = re.match(r"[^\s$]+", text[pos:])
            if token:
                found.append(token.group(0))
    return found


def _balanced(text: str, open_pos: int) -> str:
    depth = 0
    for i in range(open_pos, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
    return text[open_pos + 1 :]


def marker_tails(text: str) -> list[str]:
    """What follows each answer marker, up to the end of its line, in text order.

    When the marker ends its line ("Final answer:\\n42") the next non-empty line is the tail.
    """
    text = text.replace("**", "").replace("__", "")
    tails = []
    for match in _MARKER.finditer(text):
        rest = text[match.end() :]
        line, _, after = rest.partition("\n")
        if not line.strip():
            line = next((ln for ln in after.split("\n") if ln.strip()), "")
        tails.append(line.strip())
    return tails


def last_line(text: str) -> str | None:
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    return lines[-1] if lines else None


def first_line(text: str) -> str | None:
    return next((ln.strip() for ln in text.split("\n") if ln.strip()), None)


def tidy(answer: str) -> str | None:
    """Strip whitespace, math/markdown wrappers, quotes and a sentence-final period."""
    text = answer.strip()
    changed = True
    while changed and text:
        changed = False
        for pattern in _WRAPPERS:
            match = pattern.match(text)
            if match:
                text = match.group(1).strip()
                changed = True
        stripped = re.sub(r"(?<!\.)[.。]+$", "", text).strip()
        if stripped != text:
            text, changed = stripped, True
    return text or None


def unwrap(span: str) -> str:
    """The innermost answer of a span: its last `\\boxed{}`, else its last marker tail."""
    boxed = boxed_contents(span)
    if boxed:
        return boxed[-1]
    tails = [t for t in marker_tails(span) if t]
    return tails[-1] if tails else span


def extract_answer(response: str) -> str | None:
    """The model's final answer as text, or None when the response holds none.

    Order: last `<answer>` span, last `\\boxed{}`, last "answer is" phrase, last line (see the
    module docstring). The result is tidied (no `$...$`, `**...**` or trailing period).
    """
    text = clean_response(response)
    span = answer_span(text)
    if span is not None:
        return tidy(unwrap(span))
    boxed = boxed_contents(text)
    if boxed:
        return tidy(boxed[-1])
    tails = [t for t in marker_tails(text) if t]
    if tails:
        return tidy(tails[-1])
    line = last_line(text)
    return None if line is None else tidy(line)

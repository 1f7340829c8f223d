"""Find the final answer inside a model response.

A response from an agentic episode holds reasoning, code, sandbox outputs and, ideally, one
`<answer>...</answer>`. The answer is looked for in this order (the first that exists wins):

1. the last `<answer>...</answer>` span (a missing closing tag at the very end is tolerated);
2. the last `\\boxed{...}` (nested braces are matched);
3. the tail of the last "answer is ..." / "Answer: ..." / "final answer ..." phrase;
4. the last non-empty line.

Before that, tool calls and tool results are removed: a number printed by the sandbox is not
the model's answer, and an answer tag inside code is code. The agent's `Format` owns those tags
and the answer tag (`beacon.agent.formats`): this module asks it, for the format given or for
every registered one, and adds only what no format defines: markdown fences and `<think>`
reasoning (dropped when text follows it).

Inside an answer span, a `\\boxed{}` or an "answer is" phrase is unwrapped too, so
`<answer>The answer is 14 cm</answer>` gives "14 cm".
"""

from __future__ import annotations

import re

from beacon.agent.formats import FORMATS, Format

_FENCED = re.compile(r"```.*?(?:```|\Z)", re.S)
_FENCE = re.compile(r"```[\w+-]*")
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


def _formats(fmt: Format | None) -> list[Format]:
    return [fmt] if fmt is not None else list(FORMATS.values())


def clean_response(response: str, fmt: Format | None = None) -> str:
    """The response without tool calls, tool outputs, fenced code and (when followed by text)
    thinking; `fmt` None means the tags of every registered format.

    If removing code leaves nothing, the text without tool outputs and with only the fence and
    call delimiters removed is returned, so a model that wrote its answer in a fenced block is
    still read.
    """
    formats = _formats(fmt)
    text = response.replace("\r\n", "\n")
    if "</think>" in text:
        after = text.rsplit("</think>", 1)[1]
        text = after if after.strip() else text.replace("<think>", "").replace("</think>", "")
    for f in formats:
        text = f.without_observations(text)
    cleaned = text
    for f in formats:
        cleaned = f.without_calls(cleaned)
    cleaned = _FENCED.sub("\n", cleaned)
    if cleaned.strip():
        return cleaned
    bare = _FENCE.sub("\n", text)
    for f in formats:
        bare = bare.replace(f.call_open, "\n").replace(f.call_close, "\n")
    return bare


def answer_span(text: str, fmt: Format | None = None) -> str | None:
    """Content of the last answer tag, as the format reads it (an unclosed tag at the end
    runs to the end of the text)."""
    for f in _formats(fmt):
        span = f.answer_span(text)
        if span is not None:
            return span
    return None


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


def extract_answer(response: str, fmt: Format | None = None) -> str | None:
    """The model's final answer as text, or None when the response holds none.

    Order: last `<answer>` span, last `\\boxed{}`, last "answer is" phrase, last line (see the
    module docstring). The result is tidied (no `$...$`, `**...**` or trailing period). `fmt`
    is the agent format the response was written in; None tries every registered format.
    """
    text = clean_response(response, fmt)
    span = answer_span(text, fmt)
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

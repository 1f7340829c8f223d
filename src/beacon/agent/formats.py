"""Agent protocols as data: how tools are described, how a call is written and parsed, and how
a sandbox result is shown back to the model.

A `Format` is a frozen dataclass of strings and two small functions, chosen by name from
`FORMATS`. Adding a format is one small block here (or `register_format` from user code).

- `thyme` (default): Thyme's protocol, so Thyme SFT data and checkpoints work unchanged. The model
  writes <code>```python ...```</code>; the observation is appended inside the same assistant
  turn as <sandbox_output>text<image>...</sandbox_output>; the answer is inside <answer>.
- `tool_call`: Qwen-style <tool_call>{"name": "python", "arguments": {"code": ...}}</tool_call>
  with the result in a new user turn wrapped in <tool_response> (how Qwen's chat templates render
  tool results). Its turn markers are ChatML's, as every Qwen-VL model uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


@dataclass(frozen=True)
class ParsedCall:
    """The code of one tool call, or why the call could not be read."""

    code: str | None
    error: str | None = None


@dataclass(frozen=True)
class Format:
    """One tool-use protocol.

    `observation_prefix`/`observation_suffix` wrap the observation body; when
    `observation_in_assistant_turn` is False the observation is a new user turn and the model
    answers in a fresh assistant turn (the suffix opens it).
    """

    name: str
    system_prompt: str  # tool instructions, used in tool and hinted modes only
    call_open: str
    call_close: str
    parse_call: Callable[[str], ParsedCall]  # the text of one call, from call_open to call_close
    observation_prefix: str
    observation_suffix: str
    observation_in_assistant_turn: bool
    observation_role: str = "user"  # the chat role of a separate observation turn


def _parse_fenced_code(text: str) -> ParsedCall:
    """Code inside <code>...</code>, with or without a ```python fence."""
    if "<code>" not in text:
        return ParsedCall(None, "found </code> without an opening <code>")
    body = text.split("<code>", 1)[-1].rsplit("</code>", 1)[0]
    fenced = re.search(r"```[ \t]*(?:python|py)?[ \t]*\n?(.*?)```", body, re.S | re.I)
    code = (fenced.group(1) if fenced else body).strip("\n")
    if not code.strip():
        return ParsedCall(None, "the code block is empty")
    return ParsedCall(code)


def _parse_json_call(text: str) -> ParsedCall:
    """Code inside <tool_call>{"name": "python", "arguments": {"code": ...}}</tool_call>."""
    if "<tool_call>" not in text:
        return ParsedCall(None, "found </tool_call> without an opening <tool_call>")
    body = text.split("<tool_call>", 1)[-1].rsplit("</tool_call>", 1)[0].strip()
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ParsedCall(None, f"malformed tool call: invalid JSON ({exc.msg} at char {exc.pos})")
    if not isinstance(call, dict) or call.get("name") != "python":
        return ParsedCall(
            None, 'malformed tool call: expected {"name": "python", "arguments": ...}'
        )
    arguments = call.get("arguments")
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    code = arguments.get("code") if isinstance(arguments, dict) else None
    if not isinstance(code, str) or not code.strip():
        return ParsedCall(None, 'malformed tool call: "arguments" needs a non-empty "code" string')
    return ParsedCall(code)


_TOOL_RULES = (
    "Write Python code only when it helps: if the image already shows what you need, answer "
    "directly. The code runs in a sandbox with `image` (the input as a PIL image), "
    "`image_path`, numpy as np, PIL (Image, ImageDraw, ImageEnhance, ImageOps) and cv2 "
    "available. Print values you want to read; to look at an image, save it and print its "
    "path, or call .show() on it. You will see the printed text and the images. "
    f"Put your final answer inside {ANSWER_OPEN}{ANSWER_CLOSE}."
)

THYME = Format(
    name="thyme",
    system_prompt=(
        "You are a careful visual reasoner. You may crop, zoom, rotate, enhance or measure the "
        "image by writing Python code inside <code>\n```python\n...\n```\n</code>. " + _TOOL_RULES
    ),
    call_open="<code>",
    call_close="</code>",
    parse_call=_parse_fenced_code,
    observation_prefix="<sandbox_output>",
    observation_suffix="</sandbox_output>",
    observation_in_assistant_turn=True,
)

TOOL_CALL = Format(
    name="tool_call",
    system_prompt=(
        "You are a careful visual reasoner with one tool, `python`, which runs code on the "
        'image. Call it as <tool_call>{"name": "python", "arguments": {"code": "..."}}'
        "</tool_call>. " + _TOOL_RULES
    ),
    call_open="<tool_call>",
    call_close="</tool_call>",
    parse_call=_parse_json_call,
    observation_prefix="<|im_end|>\n<|im_start|>user\n<tool_response>\n",
    observation_suffix="\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    observation_in_assistant_turn=False,
)

FORMATS: dict[str, Format] = {f.name: f for f in (THYME, TOOL_CALL)}


def register_format(fmt: Format) -> None:
    """Make `fmt` selectable by name (agent.format=<name>)."""
    FORMATS[fmt.name] = fmt


def get_format(name: str) -> Format:
    if name not in FORMATS:
        raise ValueError(
            f"unknown agent format {name!r}; choose one of {sorted(FORMATS)} "
            "(--set agent.format=thyme)"
        )
    return FORMATS[name]


def find_calls(text: str, fmt: Format) -> list[str]:
    """Every complete call (open tag to close tag) in `text`, in order."""
    pattern = re.escape(fmt.call_open) + r".*?" + re.escape(fmt.call_close)
    return re.findall(pattern, text, re.S)


def extract_answer_span(text: str) -> str | None:
    """The text inside the last <answer>...</answer>, or None when no answer was closed."""
    spans = re.findall(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), text, re.S)
    return spans[-1].strip() if spans else None

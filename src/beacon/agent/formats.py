"""Agent protocols as data, and the one owner of each protocol's text.

A `Format` says how tools are described, how a call is written and parsed, how a sandbox result
is shown back to the model, and where the answer is. Everything that reads or writes those tags
goes through its methods: the episode (`beacon.agent.episode`) and the answer extractor
(`beacon.verify.extract`) alike, so the two can never disagree about what the model answered.

Rules every format follows (the two bugs of issue 7 §1 were breaches of them):

- The answer is read from the model's own generated text only, never from an observation (code
  that prints `<answer>A</answer>` has not answered), and never from inside a call (an answer tag
  inside the code is code, and does not end the episode before the code runs).
- A text that ends inside an open call (`<code>` without its `</code>`) is still writing code.

Formats, chosen by name from `FORMATS` (`register_format` adds one from user code):

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
from functools import cached_property
from typing import Any

from beacon.types import ToolCall

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


@dataclass(frozen=True)
class ParsedCall:
    """The code of one tool call, or why the call could not be read."""

    code: str | None
    error: str | None = None


@dataclass(frozen=True)
class Format:
    """One tool-use protocol.

    An observation reads `observation_open + body + images + observation_close`. When
    `observation_in_assistant_turn` is False it is a new `observation_role` turn: `turn_close`
    ends the assistant turn before it and `turn_reopen` opens the next assistant turn after it.
    """

    name: str
    system_prompt: str  # tool instructions, used in tool and hinted modes only
    call_open: str
    call_close: str
    parse_call: Callable[[str], ParsedCall]  # the text of one call, from call_open to call_close
    observation_open: str
    observation_close: str
    observation_in_assistant_turn: bool
    turn_close: str = ""
    turn_reopen: str = ""
    observation_role: str = "user"  # the chat role of a separate observation turn
    answer_open: str = ANSWER_OPEN
    answer_close: str = ANSWER_CLOSE

    # ------------------------------------------------------------------ calls
    def calls(self, text: str) -> list[str]:
        """Every complete call (open tag to close tag) in `text`, in order."""
        return self._call_pattern.findall(text)

    def last_call(self, text: str) -> str:
        """The call that the last close tag of `text` ends, from its open tag to the close tag.

        A close tag with no open tag since the previous call is still a call, a malformed one:
        the text since that previous call comes back whole, and `parse_call` rejects it (an
        earlier, complete call is never returned twice).
        """
        end = text.rfind(self.call_close)
        previous = text.rfind(self.call_close, 0, end) if end > 0 else -1
        chunk = text[(previous + len(self.call_close)) if previous >= 0 else 0 : end]
        start = chunk.rfind(self.call_open)
        return chunk[max(start, 0) :] + self.call_close

    def in_open_call(self, text: str) -> bool:
        """True when `text` ends inside a call: its last open tag has no close tag after it."""
        return text.rfind(self.call_open) > text.rfind(self.call_close)

    def without_calls(self, text: str) -> str:
        """`text` with every call removed (an unclosed call runs to the end of the text)."""
        return self._open_call_pattern.sub("\n", text)

    def without_observations(self, text: str) -> str:
        """`text` with every observation removed (an unclosed one runs to the end)."""
        return self._observation_pattern.sub("\n", text)

    # ----------------------------------------------------------------- answer
    def answer_span(self, text: str) -> str | None:
        """The raw text of the last answer tag outside calls, or None when there is none.

        `text` must be the model's own words (observations left out). A closing tag missing at
        the very end is tolerated (the model ran out of tokens inside its answer), so the
        episode's `final_answer` and the verifier's prediction read the same span.
        """
        outside = self.without_calls(text)
        start = outside.rfind(self.answer_open)
        if start < 0:
            return None
        body = outside[start + len(self.answer_open) :]
        end = body.find(self.answer_close)
        return body if end < 0 else body[:end]

    def final_answer(self, text: str) -> str | None:
        """The episode's final answer: the last answer span of the model's own `text`, stripped."""
        span = self.answer_span(text)
        return None if span is None else span.strip()

    def answered(self, text: str) -> bool:
        """True when the model's text holds a closed answer tag outside every call."""
        outside = self.without_calls(text)
        start = outside.rfind(self.answer_open)
        return start >= 0 and self.answer_close in outside[start:]

    # ----------------------------------------------------------- observations
    def observation_text(self, call: ToolCall, image_placeholders: str) -> str:
        """The observation as the model's tokens read it (turn markers included)."""
        text = self.observation_open + observation_body(call) + image_placeholders
        text += self.observation_close
        if self.observation_in_assistant_turn:
            return text
        return self.turn_close + text + self.turn_reopen

    def observation_parts(self, call: ToolCall, images: list[Any]) -> list[dict[str, Any]]:
        """The observation as chat content parts (for engines that take messages)."""
        return [
            {"type": "text", "text": self.observation_open + observation_body(call, len(images))},
            *({"type": "image", "image": im} for im in images),
            {"type": "text", "text": self.observation_close},
        ]

    # --------------------------------------------------------------- patterns
    @cached_property
    def _call_pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.call_open) + r".*?" + re.escape(self.call_close), re.S)

    @cached_property
    def _open_call_pattern(self) -> re.Pattern[str]:
        close = re.escape(self.call_close)
        return re.compile(re.escape(self.call_open) + rf".*?(?:{close}|\Z)", re.S)

    @cached_property
    def _observation_pattern(self) -> re.Pattern[str]:
        tag_open, tag_close = self.observation_open.strip(), self.observation_close.strip()
        return re.compile(re.escape(tag_open) + rf".*?(?:{re.escape(tag_close)}|\Z)", re.S)


def observation_body(call: ToolCall, images: int | None = None) -> str:
    """What the model reads back: stdout, the error (or why the call was stopped), then the
    sandbox's notes (e.g. images dropped over the cap), which change what the model can see.

    `images`: how many images the call returned, when `call.images` (their store keys) is not
    filled in yet; "(no output)" stands only for a call that returned nothing at all."""
    parts = []
    if call.stdout.strip():
        parts.append(call.stdout.rstrip())
    if call.error:
        parts.append(f"Error: {call.error}")
    parts.extend(f"Note: {note}" for note in call.notes)
    if not parts and not (len(call.images) if images is None else images):
        parts.append("(no output)")
    return "\n".join(parts)


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
    observation_open="<sandbox_output>",
    observation_close="</sandbox_output>",
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
    observation_open="<tool_response>\n",
    observation_close="\n</tool_response>",
    observation_in_assistant_turn=False,
    turn_close="<|im_end|>\n<|im_start|>user\n",
    turn_reopen="<|im_end|>\n<|im_start|>assistant\n",
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

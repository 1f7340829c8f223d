"""Import of Thyme's public SFT data (Kwai-Keye/Thyme-SFT) as Beacon trajectories.

A Thyme SFT row is either the flat form of the Thyme README,

    {"image": ["/orig.jpg", "/processed.jpg"], "question": "<image>\\nQuestion...",
     "response": "<think>... <code>```python ...```</code><sandbox_output><image></sandbox_output>
                  ...</think><answer>B</answer>"}

or ms-swift's messages form, `{"messages": [{"role": "system"|"user"|"assistant", "content":
...}], "images": [...]}`. In both, `<image>` placeholders consume the image list in order:
first the user turn's, then one per image inside `<sandbox_output>` (the processed images).

The result is a text-only `Trajectory` (Thyme rows carry no token ids), split into segments the
way Beacon's agent loop records a Thyme-format episode: generated text up to and including
`<code>`, the code through `</code>` (kind "code"), the `<sandbox_output>...</sandbox_output>`
observation with its images, then more generated text. `beacon.train.encode` tokenizes it for
the student with segment boundaries kept, so observations and images never carry loss.

Choices, and why:

1. The tags come from the `thyme` agent format (one owner per protocol); the code of each call
   is read by that format's `parse_call` and recorded as an executed `ToolCall`.
2. The prompt gets the row's own system message if it has one, else `system_prompt` (default:
   the `thyme` format's tool-mode prompt, so training matches what `beacon eval` shows).
3. Image paths that do not exist as written are looked up by file name under `image_root`
   (Thyme's rows hold absolute paths of the authors' machines; its README says to relocate them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from beacon.agent.formats import THYME
from beacon.images import ImageStore, load_image
from beacon.types import Segment, ToolCall, Trajectory

IMAGE = "<image>"
_BLOCK = re.compile(
    "("
    + re.escape(THYME.call_open)
    + ".*?"
    + re.escape(THYME.call_close)
    + ")|("
    + re.escape(THYME.observation_open)
    + ".*?"
    + re.escape(THYME.observation_close)
    + ")",
    re.S,
)


class ThymeRowError(ValueError):
    """A Thyme row that cannot be converted (placeholders and images disagree, missing image)."""


def thyme_row_to_trajectory(
    row: dict[str, Any],
    store: ImageStore,
    image_root: str | Path | None = None,
    system_prompt: str | None = THYME.system_prompt,
    sample_id: str = "",
) -> Trajectory:
    """One Thyme SFT row as a text-only Thyme-format trajectory; images go into `store`."""
    system, question, response, paths = _fields(row)
    system = system if system is not None else system_prompt
    keys = [store.put(load_image(_resolve(p, image_root))) for p in paths]
    response_images = response.count(IMAGE)
    prompt_images = len(keys) - response_images
    if prompt_images < 0 or question.count(IMAGE) > prompt_images:
        raise ThymeRowError(
            f"row {sample_id!r}: {question.count(IMAGE)} <image> in the question and "
            f"{response_images} in the response, but {len(keys)} images"
        )
    question = IMAGE * (prompt_images - question.count(IMAGE)) + question
    prompt_text = (f"system: {system}\n" if system else "") + f"user: {question}"
    segments = [Segment(role="prompt", text=prompt_text, images=keys[:prompt_images])]
    calls: list[ToolCall] = []
    next_image = prompt_images
    for segment in _response_segments(response):
        if segment.role == "observation":
            count = segment.text.count(IMAGE)
            segment.images = keys[next_image : next_image + count]
            next_image += count
            if calls:
                calls[-1].stdout = _observation_text(segment.text)
                calls[-1].images = list(segment.images)
        elif segment.kind == "code":
            parsed = THYME.parse_call(THYME.call_open + segment.text)
            calls.append(ToolCall(code=parsed.code or "", executed=True, ok=parsed.error is None))
        segments.append(segment)
    span = THYME.answer_span(THYME.without_observations(response))
    answer = None if span is None else span.strip()
    return Trajectory(
        sample_id=sample_id,
        mode="tool",
        format=THYME.name,
        segments=segments,
        final_answer=answer,
        finish_reason="answer" if answer is not None else "stop",
        tool_calls=calls,
        metadata={"source": "thyme_sft"},
    )


def _fields(row: dict[str, Any]) -> tuple[str | None, str, str, list[str]]:
    """(system, question, response, image paths) of either row form."""
    if "messages" in row:
        by_role: dict[str, str] = {}
        for message in row["messages"]:
            by_role.setdefault(message["role"], _text(message["content"]))
        if "user" not in by_role or "assistant" not in by_role:
            raise ThymeRowError("a messages row needs a user and an assistant message")
        return by_role.get("system"), by_role["user"], by_role["assistant"], _paths(row, "images")
    if "question" not in row or "response" not in row:
        raise ThymeRowError("a Thyme row needs question + response (or messages)")
    return None, row["question"], row["response"], _paths(row, "image")


def _paths(row: dict[str, Any], key: str) -> list[str]:
    value = row.get(key) or row.get("images" if key == "image" else "image") or []
    return [value] if isinstance(value, str) else list(value)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(IMAGE if p.get("type") == "image" else p.get("text", "") for p in content)


def _response_segments(response: str) -> Iterator[Segment]:
    """Generated text / code / observation segments, cut as the agent loop cuts them."""
    at = 0
    for match in _BLOCK.finditer(response):
        before = response[at : match.start()]
        if match.group(1):  # <code>...</code>: the opening tag stays with the text
            yield Segment(role="generated", text=before + THYME.call_open, kind="text")
            code = match.group(1)[len(THYME.call_open) :]
            yield Segment(role="generated", text=code, kind="code")
        else:
            if before:
                yield Segment(role="generated", text=before, kind="text")
            yield Segment(role="observation", text=match.group(2))
        at = match.end()
    if response[at:]:
        yield Segment(role="generated", text=response[at:], kind="text")


def _observation_text(text: str) -> str:
    body = text[len(THYME.observation_open) : len(text) - len(THYME.observation_close)]
    return body.replace(IMAGE, "")


def _resolve(path: str, image_root: str | Path | None) -> Path:
    candidate = Path(path)
    if candidate.exists():
        return candidate
    if image_root is not None:
        for option in (Path(image_root) / path.lstrip("/"), Path(image_root) / candidate.name):
            if option.exists():
                return option
    raise ThymeRowError(
        f"image {path!r} not found; download the images and pass image_root (the folder that "
        "holds them)"
    )


def import_thyme(
    rows_path: str | Path,
    out_path: str | Path,
    store_dir: str | Path,
    image_root: str | Path | None = None,
    system_prompt: str | None = THYME.system_prompt,
) -> dict[str, int]:
    """Convert a Thyme SFT JSON/JSONL file to a trajectories JSONL; counts kept and dropped.

    A row that cannot be converted is counted under its error type and skipped.
    """
    store = ImageStore(store_dir)
    counts = {"kept": 0}
    text = Path(rows_path).read_text(encoding="utf-8")
    rows = (
        json.loads(text)
        if text.lstrip().startswith("[")
        else [json.loads(line) for line in text.splitlines() if line.strip()]
    )
    with Path(out_path).open("w", encoding="utf-8") as out:
        for n, row in enumerate(rows):
            sample_id = str(row.get("id", n))
            try:
                traj = thyme_row_to_trajectory(row, store, image_root, system_prompt, sample_id)
            except (ThymeRowError, ValueError) as exc:
                reason = type(exc).__name__
                counts[reason] = counts.get(reason, 0) + 1
                continue
            out.write(traj.to_json() + "\n")
            counts["kept"] += 1
    return counts

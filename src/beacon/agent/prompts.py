"""The first turn of an episode: system prompt, images, question, and Thyme's path/size lines.

Thyme-trained models expect the user turn to name the image's path (the one their code opens)
and its size; we give both in tool and hinted modes. In notool mode the model gets no tool
instructions at all, only the question and where to put the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from beacon.agent.formats import ANSWER_CLOSE, ANSWER_OPEN, Format
from beacon.engines.base import Message

NOTOOL_INSTRUCTION = (
    f"Think step by step, then put your final answer inside {ANSWER_OPEN}{ANSWER_CLOSE}."
)


def image_lines(paths: Sequence[str], images: Sequence[Image.Image]) -> str:
    """Thyme's "User Image Path" and "User Image Size" lines, one pair per image."""
    lines = []
    for path, image in zip(paths, images, strict=True):
        lines.append(f'### User Image Path: "{path}"')
        lines.append(f'### User Image Size: "{image.width}x{image.height}"')
    return "\n".join(lines)


def first_turn(
    question: str,
    images: Sequence[Image.Image],
    *,
    fmt: Format,
    tools: bool,
    image_paths: Sequence[str] = (),
    hint: str | None = None,
) -> list[Message]:
    """Messages that open an episode. `hint` (HGCE) is appended to the question."""
    text = question.strip()
    if hint:
        text += f"\n\nHint: {hint.strip()}"
    if tools:
        text += "\n\n" + image_lines(image_paths, images)
    else:
        text += "\n\n" + NOTOOL_INSTRUCTION
    content: list[dict] = [{"type": "image", "image": im} for im in images]
    content.append({"type": "text", "text": text})
    messages: list[Message] = []
    if tools:
        messages.append({"role": "system", "content": fmt.system_prompt})
    messages.append({"role": "user", "content": content})
    return messages

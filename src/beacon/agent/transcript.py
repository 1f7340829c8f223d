"""The agent's text form of a chat, written and read in one place.

A trajectory whose prompt has no token ids (an expert behind a hosted API, Thyme's public data,
a scripted expert) keeps its prompt as text: one ``role: content`` block per message, images as
``<image>``. `messages_text` writes it; `parse_prompt_text` reads it back into chat messages
whose image parts let a student's chat template place its own image tokens.

What is not covered: a message whose content itself has a line starting with ``user: `` (or
another role) would be split there on reading.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from beacon.engines.base import Message

TEXT_IMAGE_PLACEHOLDER = "<image>"
"""How an image reads in a text-only segment (Thyme's data uses it too)."""
_ROLE_LINE = re.compile(r"^(system|user|assistant|tool): ", re.MULTILINE)


def messages_text(messages: Sequence[Message]) -> str:
    """The text form of a chat kept in a text prompt segment: one `role: content` block per
    message, images as `<image>` (`parse_prompt_text` reads it back)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append(f"{message['role']}: {content}")
            continue
        parts = [
            TEXT_IMAGE_PLACEHOLDER if p["type"] == "image" else p.get("text", "") for p in content
        ]
        out.append(f"{message['role']}: " + "".join(parts))
    return "\n".join(out)


def parse_prompt_text(text: str) -> list[dict[str, Any]]:
    """Chat messages from the agent's text form of a prompt (``role: content`` blocks).

    ``<image>`` becomes an image part, so the student's template places its own image tokens.
    """
    starts = list(_ROLE_LINE.finditer(text))
    if not starts or starts[0].start() != 0:
        return [{"role": "user", "content": _content_parts(text)}]
    messages = []
    for i, match in enumerate(starts):
        end = starts[i + 1].start() - 1 if i + 1 < len(starts) else len(text)
        body = text[match.end() : max(end, match.end())]
        messages.append({"role": match.group(1), "content": _content_parts(body)})
    return messages


def _content_parts(body: str) -> list[dict[str, str]]:
    parts: list[dict[str, str]] = []
    pieces = body.split(TEXT_IMAGE_PLACEHOLDER)
    for i, piece in enumerate(pieces):
        if i > 0:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts

"""Teacher conditioning (Appendix A.3): reflection text, conditioned chat, token alignment check.

The reflection-conditioned teacher sees the student's exact history with two additions to the
first user message: the reflection text, and the anchor's support images inserted right after
the original image(s), hence before every image the trajectory produced (those live in later
observation messages). The paper appends the text at the message's end (`position="end"`);
`position="before_question"` puts it after the images, before the question, so the question
stays next to the answer: a model that copies from the question by relative position (a crop's
coordinates) copies as it did without the reflection. The student's completion must then
re-encode to the same token ids and the same length; any difference means the teacher would
score other tokens, so q^R is discarded for that trajectory (u_i = 0, counted as "misaligned").

`condition_messages` works on the chat structure of `beacon.engines.base.Message` and never
mutates its input; what tokenizes it is the teacher engine's business.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from beacon.train.opd.assemble import Reflection

REFLECTION_HEADER = "Reflection on visual evidence (training-time guidance for the teacher):"


def reflection_text(reflection: Reflection) -> str:
    """R_i rendered for the teacher prompt: Anchor (if any), then Break Point."""
    lines = [REFLECTION_HEADER]
    anchor = reflection.anchor
    if anchor is not None:
        n = len(anchor.support_image_keys)
        where = f"{n} supporting image(s) placed after the original image" if n else "the original"
        lines += [
            f"Anchor evidence: {where}.",
            f"Query slot: {anchor.reading.query_slot}",
            f"Observed value: {anchor.reading.observed_value}",
            f"Visual fact: {anchor.reading.visual_fact}",
            f"Grounding rule: {anchor.grounding.rule}",
        ]
    b = reflection.break_point
    if b.stage == "CORRECT":
        lines.append("Break point: none; this attempt's final answer is correct.")
    else:
        lines.append(f"Break point: first broken link {b.stage}. Discrepancy: {b.discrepancy}")
    return "\n".join(lines)


POSITIONS = ("end", "before_question")
"""Where the reflection text goes in the first user message (module docstring)."""


def condition_messages(
    messages: Sequence[dict[str, Any]],
    text: str,
    support_images: Sequence[Image.Image] = (),
    position: str = "end",
) -> list[dict[str, Any]]:
    """A copy of `messages` with `text` and `support_images` added to the first user message,
    the text at `position` (one of `POSITIONS`)."""
    if position not in POSITIONS:
        raise ValueError(f"reflection position {position!r}; choose one of {POSITIONS}")
    out = [dict(m) for m in messages]
    index = next((i for i, m in enumerate(out) if m["role"] == "user"), None)
    if index is None:
        raise ValueError("the teacher prompt has no user message to append the reflection to.")
    content = out[index]["content"]
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else copy.copy(content)
    last_image = max((i for i, p in enumerate(parts) if p.get("type") == "image"), default=-1)
    images = [{"type": "image", "image": im} for im in support_images]
    parts[last_image + 1 : last_image + 1] = images
    if position == "end":
        parts.append({"type": "text", "text": "\n\n" + text})
    else:
        parts.insert(last_image + 1 + len(images), {"type": "text", "text": text + "\n\n"})
    out[index] = {**out[index], "content": parts}
    return out


@dataclass(frozen=True)
class AlignmentCheck:
    """Whether the teacher's completion ids equal the student's, and where they first differ."""

    aligned: bool
    reason: str | None = None
    first_mismatch: int | None = None


def check_alignment(student_ids: Sequence[int], teacher_ids: Sequence[int]) -> AlignmentCheck:
    """Exact token-id and length equality of the completion (Appendix A.3)."""
    pairs = enumerate(zip(student_ids, teacher_ids, strict=False))
    first = next((i for i, (a, b) in pairs if a != b), None)
    if first is not None:
        return AlignmentCheck(False, f"token {first} differs", first)
    if len(student_ids) != len(teacher_ids):
        reason = f"length {len(teacher_ids)} != student's {len(student_ids)}"
        return AlignmentCheck(False, reason, min(len(student_ids), len(teacher_ids)))
    return AlignmentCheck(True)


def check_reencoding(
    teacher_ids: Sequence[int], prompt_length: int, student_completion_ids: Sequence[int]
) -> AlignmentCheck:
    """Check a re-encoded conditioned sequence: its part after `prompt_length` tokens must equal
    the student's completion ids."""
    return check_alignment(student_completion_ids, teacher_ids[prompt_length:])

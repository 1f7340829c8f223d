"""Scripted Thyme-format trajectories for tests and the throughput benchmarks.

`scripted_trajectory` writes what a code-using policy would have produced on a synthetic image:
a prompt with the image, then `tool_calls` rounds of (reasoning + `<code>`, code, sandbox
observation with the crop as a new image), then an answer. Token ids come from the student's
`ChatTokenizer` the way the agent loop makes them (prompt rendered with the chat template,
each later segment encoded on its own), so the result is a token-exact trajectory. With
`with_ids=False` it is the text-only form an expert behind a hosted API would give.
"""

from __future__ import annotations

import random
from typing import Any

from PIL import Image, ImageDraw

from beacon.agent.transcript import TEXT_IMAGE_PLACEHOLDER
from beacon.images import ImageStore
from beacon.types import Segment, Trajectory

_THOUGHTS = [
    "I need to zoom in on the box to read the digit.",
    "The region is small, so I crop it and enlarge it.",
    "Let me look at the top left corner more closely.",
]


def synthetic_image(seed: int, size: int = 112) -> Image.Image:
    """A grey canvas with a coloured box; the same seed gives the same pixels."""
    rng = random.Random(seed)
    image = Image.new("RGB", (size, size), (rng.randint(180, 240),) * 3)
    draw = ImageDraw.Draw(image)
    x0, y0 = rng.randint(0, size // 2), rng.randint(0, size // 2)
    draw.rectangle((x0, y0, x0 + size // 3, y0 + size // 3), outline=(200, 30, 30), width=2)
    draw.text((x0 + 8, y0 + 8), str(rng.randint(0, 9)), fill=(0, 0, 0))
    return image


def scripted_trajectory(
    tokenizer: Any,
    store: ImageStore,
    seed: int,
    tool_calls: int = 1,
    filler_words: int = 0,
    with_ids: bool = True,
) -> Trajectory:
    """One Thyme-format trajectory; `filler_words` lengthens the reasoning (mixed lengths)."""
    rng = random.Random(seed)
    image = synthetic_image(seed)
    question = "What digit is inside the box? Answer with one digit."
    messages = [
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": question}],
        }
    ]
    segments = [_prompt(tokenizer, store, messages, image, with_ids)]
    for call in range(tool_calls):
        filler = " ".join(
            rng.choice(["the", "box", "digit", "zoom", "is", "small"]) for _ in range(filler_words)
        )
        thought = f"{rng.choice(_THOUGHTS)} {filler}".rstrip() + " <code>"
        x0, y0 = rng.randint(0, 50), rng.randint(0, 50)
        code = (
            f"\n```python\ncrop = image.crop(({x0}, {y0}, {x0 + 40}, {y0 + 40}))\n"
            "crop = crop.resize((112, 112))\n"
            f"crop.save('/mnt/data/temp_processed_images/crop_{call}.png')\n"
            f"print('/mnt/data/temp_processed_images/crop_{call}.png')\n```\n</code>"
        )
        segments.append(_generated(tokenizer, thought, "text", with_ids))
        segments.append(_generated(tokenizer, code, "code", with_ids))
        crop = image.crop((x0, y0, x0 + 40, y0 + 40)).resize((112, 112))
        segments.append(_observation(tokenizer, store, crop, with_ids))
    answer = f"The crop shows the digit clearly. <answer>{rng.randint(0, 9)}</answer>"
    segments.append(_generated(tokenizer, answer, "text", with_ids))
    return Trajectory(
        sample_id=f"scripted-{seed}",
        mode="tool",
        format="thyme",
        segments=segments,
        finish_reason="answer",
    )


def _prompt(
    tokenizer: Any, store: ImageStore, messages: list, image: Image.Image, with_ids: bool
) -> Segment:
    key = store.put(image)
    if not with_ids:
        text = "user: " + TEXT_IMAGE_PLACEHOLDER + messages[0]["content"][1]["text"]
        return Segment(role="prompt", text=text, images=[key])
    text = tokenizer.render_chat(messages, add_generation_prompt=True)
    return Segment(
        role="prompt", text=text, token_ids=tokenizer.encode(text, [image]), images=[key]
    )


def _generated(tokenizer: Any, text: str, kind: str, with_ids: bool) -> Segment:
    ids = tokenizer.encode(text) if with_ids else []
    return Segment(role="generated", text=text, token_ids=ids, kind=kind)


def _observation(tokenizer: Any, store: ImageStore, crop: Image.Image, with_ids: bool) -> Segment:
    key = store.put(crop)
    body = "/mnt/data/temp_processed_images/crop.png\n"
    if not with_ids:
        text = f"<sandbox_output>{body}{TEXT_IMAGE_PLACEHOLDER}</sandbox_output>"
        return Segment(role="observation", text=text, images=[key])
    text = f"<sandbox_output>{body}{tokenizer.image_placeholder}</sandbox_output>"
    return Segment(
        role="observation", text=text, token_ids=tokenizer.encode(text, [crop]), images=[key]
    )

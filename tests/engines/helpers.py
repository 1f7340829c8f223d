"""Builders for test chats and images."""

from __future__ import annotations

from PIL import Image


def make_image(width: int, height: int, seed: int) -> Image.Image:
    """A deterministic noisy RGB image (so different images give different vision features)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def user_turn(text: str, *pictures: Image.Image) -> dict:
    parts = [{"type": "image", "image": im} for im in pictures]
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def thyme_observation_chat(image: Image.Image, crop: Image.Image) -> list[dict]:
    """A Thyme-format chat: the assistant's code, then the sandbox output with an image, to be
    continued in the same assistant turn."""
    code = "<code>\n```python\nprint(image.size)\n```\n</code>"
    return [
        user_turn("What digit is inside the box?", image),
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": code + "<sandbox_output>(300, 200)"},
                {"type": "image", "image": crop},
                {"type": "text", "text": "</sandbox_output>"},
            ],
        },
    ]

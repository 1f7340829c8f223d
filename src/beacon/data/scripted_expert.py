"""A **scripted** expert for `synth`: an OpenAI-compatible server that writes correct
code-assisted trajectories from each item's ground truth, so the expert and hints stages run
their real path (HTTP, agent loop, sandbox, verifier, leak check) offline.

It is not a model. At start it draws the synth items of one seed and indexes them by the
content hash of their pixels (`beacon.images.image_key`); a request is matched to its item by
the first image it carries. Replies follow Thyme's protocol the way a served model would:

1. first turn (tool mode): reasoning, then `<code>```python ...```</code>` that crops the item's
   true evidence region (`metadata["region"]`, padded) and enlarges it; the reply stops at the
   `</code>` stop string, which vLLM-style it leaves out of the text and names in
   `stop_reason`. The agent loop executes the code in the real sandbox.
2. after the observation (`<sandbox_output>` in the assistant message): reasoning from the
   item's facts and `<answer>...</answer>`.
3. notool requests (no system prompt): the answer directly.
4. refinement requests (`beacon.data.refine`): the same steps, each opened with a sentence.
5. hint requests (the `hints` stage's system prompt): an answer-free hint naming the region in
   words (never coordinates, which could contain the answer's numbers) and the operation.
   `leaky=True` appends the answer, for tests of the leak check.

Not covered: items of other benchmarks or other seeds (HTTP 400 names the seed it serves).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol

from fastapi import FastAPI
from PIL import Image

from beacon.agent.formats import ANSWER_CLOSE, THYME
from beacon.benchmarks.synth import generate
from beacon.data.hint_writing import HINT_TASK
from beacon.data.refine import REFINE_TASK
from beacon.engines.scripted_server import ChatReply, chat_app, decode_data_url, image_urls
from beacon.images import image_key
from beacon.types import Sample

MODEL_NAME = "scripted-synth-expert"
PAD = 12  # pixels around the true region, so the crop is not suspiciously tight


class ScriptedSynthExpert:
    """Knows the ground truth of synth items 0..count-1 under `seed`."""

    def __init__(self, seed: int = 0, count: int = 100, leaky: bool = False) -> None:
        self.seed, self.count, self.leaky = seed, count, leaky
        self.items: dict[str, Sample] = {}
        for index in range(count):
            sample = generate(seed, index)
            self.items[image_key(sample.images[0])] = sample

    def identify(self, image: Image.Image) -> Sample:
        sample = self.items.get(image_key(image.convert("RGB")))
        if sample is None:
            raise KeyError(
                f"this image is not one of the synth items 0..{self.count - 1} of seed "
                f"{self.seed}; start the scripted expert with the pool's --seed and --count"
            )
        return sample

    def reply(self, messages: list[dict[str, Any]]) -> ChatReply:
        """The next piece of text for a chat (see the module docstring for the cases)."""
        sample = self.identify(first_image(messages))
        texts = [t for m in messages for t in message_texts(m)]
        if any(HINT_TASK in t for t in texts):
            return ChatReply(self.hint(sample))
        if any(REFINE_TASK in t for t in texts):
            return ChatReply(self.refine(texts[-1]))
        tools = messages[0].get("role") == "system"
        last = messages[-1]
        in_progress = last.get("role") == "assistant"
        observed = in_progress and any(THYME.observation_open in t for t in message_texts(last))
        if not tools or observed:
            return ChatReply(
                self.conclusion(sample, observed) + "<answer>" + sample.answer, ANSWER_CLOSE
            )
        return ChatReply(self.plan(sample), THYME.call_close)

    def plan(self, sample: Sample) -> str:
        what = TARGETS[sample.metadata["category"]](sample)
        box = padded_box(sample)
        scale = max(2, min(8, 400 // max(1, box[2] - box[0])))
        name = f"synth_{sample.id}_crop.png"
        code = (
            "from PIL import Image\n\n"
            "# Crop the region that holds the evidence and enlarge it so small marks are legible.\n"
            f"box = {box}\n"
            "crop = image.crop(box)\n"
            f"crop = crop.resize((crop.width * {scale}, crop.height * {scale}), Image.LANCZOS)\n"
            f'path = "/mnt/data/temp_processed_images/{name}"\n'
            "crop.save(path)\n"
            "print(path)\n"
        )
        return (
            f"I need {what}. It is small relative to the whole image, so I will crop the region "
            f"around it and zoom in before reading.\n<code>\n```python\n{code}```\n"
        )

    def conclusion(self, sample: Sample, observed: bool) -> str:
        seen = "The enlarged crop shows it clearly. " if observed else ""
        return seen + READINGS[sample.metadata["category"]](sample) + "\n"

    def refine(self, request_text: str) -> str:
        """The steps of a refinement request, each opened with a sentence on its purpose."""
        steps = re.findall(r"<step>(.*?)</step>", request_text, re.S)
        lead = ["First I locate the evidence. ", "Now I read the result. "]
        return "\n".join(f"<step>{lead[min(i, 1)]}{step}</step>" for i, step in enumerate(steps))

    def hint(self, sample: Sample) -> str:
        what = TARGETS[sample.metadata["category"]](sample)
        text = (
            f"Look for {what} in the {area_words(sample)} part. Crop that area "
            "with image.crop and enlarge it several times before reading it, then "
            f"{SUBGOALS[sample.metadata['category']]}."
        )
        return text + (f" The answer is {sample.answer}." if self.leaky else "")


def padded_box(sample: Sample) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = sample.metadata["region"]
    width, height = sample.metadata["image_size"]
    return (max(0, x0 - PAD), max(0, y0 - PAD), min(width, x1 + PAD), min(height, y1 + PAD))


def area_words(sample: Sample) -> str:
    """Where the region's centre lies on a 3 x 3 grid, in words."""
    x0, y0, x1, y1 = sample.metadata["region"]
    width, height = sample.metadata["image_size"]
    col = ("left", "middle", "right")[min(2, int(3 * (x0 + x1) / 2 / width))]
    row = ("top", "middle", "bottom")[min(2, int(3 * (y0 + y1) / 2 / height))]
    return "central" if row == col == "middle" else f"{row}-{col}".replace("middle-", "")


TARGETS = {
    "small_text": lambda s: "the code written in the image",
    "large_text": lambda s: "the code written in the image",
    "bar_chart": lambda s: "the values of the bars {} and {}".format(*s.metadata["facts"]["pair"]),
    "counting": lambda s: f"the {s.metadata['facts']['color']} circles",
    "relative_position": lambda s: "the {} circle and the {} square".format(
        s.metadata["facts"]["circle"], s.metadata["facts"]["square"]
    ),
}

SUBGOALS = {
    "small_text": "read the characters one at a time",
    "large_text": "read the characters one at a time",
    "bar_chart": "read the value printed above each bar named in the question and do the "
    "arithmetic the question asks for",
    "counting": "count only circles of the asked colour, each one once",
    "relative_position": "compare the centres of the circle and the square along both axes",
}


def _bar_reading(s: Sample) -> str:
    facts = s.metadata["facts"]
    first, second = facts["pair"]
    a, b = facts["values"][first], facts["values"][second]
    op = "-" if "minus" in s.question else "+"
    return f"{first} is {a} and {second} is {b}, so {a} {op} {b} = {s.answer}."


READINGS = {
    "small_text": lambda s: f"The code reads {s.metadata['facts']['text']}.",
    "large_text": lambda s: f"The code reads {s.metadata['facts']['text']}.",
    "bar_chart": _bar_reading,
    "counting": lambda s: f"I count {s.answer} {s.metadata['facts']['color']} circles.",
    "relative_position": lambda s: "The {} circle is {} the {} square, which is option {}.".format(
        s.metadata["facts"]["circle"],
        {"left": "left of", "right": "right of", "above": "above", "below": "below"}[
            s.metadata["facts"]["relation"]
        ],
        s.metadata["facts"]["square"],
        s.answer,
    ),
}


def message_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or [] if p.get("type") == "text"]


def first_image(messages: list[dict[str, Any]]) -> Image.Image:
    """The first image of the chat, decoded from its base64 data URL."""
    return decode_data_url(first_image_url(messages))


def first_image_url(messages: list[dict[str, Any]]) -> str:
    """The data URL of the chat's first image, as sent."""
    urls = image_urls(messages)
    if not urls:
        raise KeyError(
            "the request carries no image; the scripted expert identifies items by image"
        )
    return urls[0]


class Scripted(Protocol):
    """What `create_scripted_app` serves: the next reply to a chat."""

    def reply(self, messages: list[dict[str, Any]]) -> ChatReply: ...


def create_scripted_app(
    expert: Scripted, delay_s: float = 0.0, model_name: str = MODEL_NAME
) -> FastAPI:
    """The FastAPI app; `delay_s` slows each reply (tests use it to kill a stage mid-run)."""

    async def reply(body: dict[str, Any]) -> ChatReply:
        answer = expert.reply(body["messages"])
        if delay_s:
            await asyncio.sleep(delay_s)
        return answer

    return chat_app(reply, model_name)

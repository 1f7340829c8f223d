"""The demo's **scripted** expert: correct, short Thyme trajectories for `synth_demo` items.

It is not a model; it stands in for the strong model whose trajectories a cold-start SFT set is
made of, and is served over the same OpenAI-compatible HTTP as a real expert
(`beacon.data.scripted_expert.create_scripted_app`), so the demo's data runs through the real agent
loop, sandbox and verifier. Items are recognised by the content hash of their first image.

Its policy is the paper's tool-biased cold start, by construction:

- tool mode, `tiny` items: crop the box the question names; `search` items: crop the ninth of
  the image that holds the box (the region a hint names), since the question gives no box;
- tool mode, `large` / `small` items: crop anyway with probability `tool_bias` (0.6), else
  answer directly: the over-use of the tool that RL with NAAR should remove;
- notool mode: answer directly.

The crop is `image.crop((x0, y0, x1, y1)).show()` with the coordinates three characters wide,
as the question writes them; after the observation it answers `<answer>d</answer>`.

`synth_keys` items (`beacon.benchmarks.synth_keys`) take the design's multi-step trajectories
(`../shared/research/demo2_design.md` §2.3), in tool mode always:

- `marked`: crop the framed cell's box, then answer;
- `keyed` / `told`: crop the key's box; write the key as read, `Key: 3.` (a red key:
  `Key: 3 red.`) and crop the cell it names (a red key counts from the end: cell 6); answer.
  On a hinted `keyed` item it follows the hint (crops the key first) for a share
  `hint_followed` of the items, drawn per item; on the others it crops the target's cell at
  once, as on a `marked` item. A model cannot tell that cell from the full view, so a share
  below 1 gives a cold start that, with the hint, crops the key only some of the time: a
  hinted group then holds rollouts that took the decisive step and rollouts that did not,
  the contrast HGCE's update at that step needs (gate G-H4, `beacon.demo.gates`).

Every crop is one of the grid's 9 fixed boxes. Notool mode answers directly.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from typing import Any

from beacon.agent.config import AgentConfig
from beacon.agent.formats import ANSWER_CLOSE, THYME
from beacon.benchmarks.synth_demo import coords
from beacon.benchmarks.synth_keys import (
    KEYED_HINT,
    MARKED_QUESTION,
    TOLD_QUESTION,
    UNINFORMATIVE_HINT,
)
from beacon.data.scripted_expert import first_image_url, message_texts
from beacon.engines.scripted_server import ChatReply, decode_data_url
from beacon.images import image_key
from beacon.types import Sample

MODEL_NAME = "scripted-demo-expert"
KEY_NOTE, RED_NOTE = "Key: ", " red."
KEYS_PHRASES = [MARKED_QUESTION, TOLD_QUESTION, KEY_NOTE, RED_NOTE, KEYED_HINT, UNINFORMATIVE_HINT]
"""The fixed text `synth_keys` episodes add to the demo's: the two questions, the key note and
the two HGCE hints (procedural and uninformative), phrase tokens of `beacon.demo.model.PHRASES`."""


def crop_code(box: list[int] | tuple[int, ...]) -> str:
    """The one line of code the demo's trajectories run."""
    return f"image.crop({coords(tuple(box))}).show()"


def crop_box(sample: Sample) -> list[int]:
    """Where the expert crops: the named box, or the ninth of the image a search box is in."""
    return (
        sample.metadata["cell"]
        if sample.metadata["category"] == "search"
        else sample.metadata["region"]
    )


class ScriptedDemoExpert:
    """Knows the ground truth of the `synth_demo` and `synth_keys` samples it is given."""

    def __init__(
        self,
        samples: Iterable[Sample],
        tool_bias: float = 0.6,
        seed: int = 0,
        hint_followed: float = 1.0,
    ) -> None:
        self.tool_bias, self.seed, self.hint_followed = tool_bias, seed, hint_followed
        self.items = {image_key(s.images[0]): s for s in samples}
        self._by_url: dict[bytes, Sample] = {}  # SHA-256 of a data URL seen -> its item

    def identify(self, messages: list[dict[str, Any]]) -> Sample:
        """The item, by the pixels of the chat's first image. An episode sends the same data
        URL at every turn, and an item's tool and notool episodes send equal ones, so the
        image is decoded once per URL (decoding took ~17% of the data stage's thread time)."""
        url = first_image_url(messages)
        digest = hashlib.sha256(url.encode("ascii", "replace")).digest()
        sample = self._by_url.get(digest) or self.items.get(image_key(decode_data_url(url)))
        if sample is None:
            raise KeyError("this image is not one of the synth_demo items the expert was given")
        self._by_url[digest] = sample
        return sample

    def crops(self, sample: Sample) -> bool:
        """Tool-mode decision: always on hard items, `tool_bias` of the time on easy ones."""
        if sample.metadata["difficulty"] == "hard":
            return True
        draw = random.Random(f"demo-expert:{self.seed}:{sample.benchmark}:{sample.id}").random()
        return draw < self.tool_bias

    def plan(self, sample: Sample) -> list[list[int]]:
        """The boxes this expert crops on a `synth_keys` item, in order (module docstring)."""
        if sample.metadata.get("hinted") and sample.metadata["kind"] == "keyed":
            draw = random.Random(f"demo-expert-hint:{self.seed}:{sample.id}").random()
            if draw >= self.hint_followed:
                return [sample.metadata["region"]]
        return keys_crops(sample)

    def reply(self, messages: list[dict[str, Any]]) -> ChatReply:
        sample = self.identify(messages)
        tools = messages[0].get("role") == "system"
        last = messages[-1]
        in_progress = last.get("role") == "assistant"
        observed = in_progress and any(THYME.observation_open in t for t in message_texts(last))
        if "kind" in sample.metadata:  # a synth_keys item
            seen = sum(t.count(THYME.observation_open) for t in message_texts(last))
            return keys_turn(sample, self.plan(sample), seen if in_progress else 0, tools)
        if not tools or observed or not self.crops(sample):
            return ChatReply("<answer>" + sample.answer, ANSWER_CLOSE)
        code = crop_code(crop_box(sample))
        return ChatReply(f"<code>\n```python\n{code}\n```\n", THYME.call_close)


def keys_crops(sample: Sample) -> list[list[int]]:
    """The boxes a `synth_keys` trajectory crops, in order: the framed cell (`marked`), or the
    key and then the cell it names."""
    meta = sample.metadata
    return [meta["region"]] if meta["kind"] == "marked" else [meta["key_box"], meta["region"]]


def key_note(sample: Sample) -> str:
    """What the expert writes after reading the key: `Key: 3.`, or `Key: 3 red.`."""
    meta = sample.metadata
    return f"{KEY_NOTE}{meta['key']}{RED_NOTE if meta['colour'] == 'red' else '.'}"


def keys_turn(sample: Sample, plan: list[list[int]], observed: int, tools: bool) -> ChatReply:
    """The expert's turn on a `synth_keys` item after `observed` crops of its `plan`: the next
    crop (after the key's, with the key note before it), or the answer once every crop is
    seen."""
    if not tools or observed >= len(plan):
        return ChatReply("<answer>" + sample.answer, ANSWER_CLOSE)
    note = key_note(sample) if observed == 1 else ""
    code = crop_code(plan[observed])
    return ChatReply(f"{note}<code>\n```python\n{code}\n```\n", THYME.call_close)


def keys_agent() -> AgentConfig:
    """Two crops at most, short turns: all a `synth_keys` episode needs."""
    return AgentConfig(max_turns=3, max_tool_calls=2, max_new_tokens_per_turn=48)

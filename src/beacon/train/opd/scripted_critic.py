"""A scripted critic for `synth`: the critic contract answered from ground truth, over real HTTP.

Not a model. It reads the critic request our trainer sends (`build_critic_request`'s text: task,
rollouts with their labels, evidence states) and answers the same strict JSON a critic model
would, from what `synth` knows by construction: the reference answer and each item's `facts`.
It exists so an OPD run on CPU exercises the whole path (HTTP, schema, Algorithm 4, teacher
conditioning) with a critic whose output is right and reproducible.

Rules, for an item it recognises by its original image (the request's first image) and whose
metadata gives the evidence `region` and the design `difficulty` (`synth`, `synth_demo`):
- Sufficient states: the original state (support ORIGINAL_IMAGE) when the item is easy by
  design, i.e. its evidence is readable at full view; every post-tool state whose crop (the
  `image.crop((x0, y0, x1, y1))` of the call that made it, read from the rollout's code) contains
  the whole region, with the image that call returned as support.
- Reading: the question without its box coordinates as query slot, the reference answer as
  observed value, the item's facts as the visual fact.
- First broken link per rollout: CORRECT for a correct rollout; OTHER when it gave no answer;
  READ when it owned or saw a sufficient state; otherwise ACQUIRE (its crop missed the region,
  or it answered a hard item without cropping).

An item it cannot recognise by image (a request built in a test, another benchmark) is looked up
by question text, without region rules: the original state is the one sufficient state, and
every wrong answer is READ.

`create_app` serves it at `/v1/chat/completions` (FastAPI, like `beacon serve`); run it with
`beacon.engines.serve.run_app_in_thread`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from PIL import Image

from beacon.engines.scripted_server import chat_app, decode_data_url, image_urls
from beacon.images import image_key
from beacon.types import Sample

_QUESTION, _REFERENCE = "Question: ", "\nReference answer: "
_ROLLOUT = re.compile(
    r"=== Rollout (R\d+) \((CORRECT|INCORRECT)\) ===\n(.*?)(?=\n=== Rollout |$)", re.S
)
_FINAL = re.compile(r"Final answer: (.*)")
_CROP = re.compile(r"\.crop\(\(\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*\)\)")
_STATE = re.compile(r"\[sandbox call -> state (\S+)\]")
_RETURNED = "images returned: "
_BOX = re.compile(r"\s*(?:at\s*)?\(\s*-?\d+(?:\s*,\s*-?\d+){3}\s*\)")
ORIGINAL = {"state_id": "ORIGINAL_STATE", "support_image_ids": ["ORIGINAL_IMAGE"]}


def first_image(messages: list[dict[str, Any]]) -> Image.Image | None:
    """The request's first image (the item's original), decoded from its data URL."""
    urls = image_urls(messages)
    return decode_data_url(urls[0]) if urls else None


def crop_states(body: str) -> list[tuple[tuple[int, ...] | None, str, list[str]]]:
    """(crop box of the code before it or None, state id, returned image ids) per sandbox call."""
    out, box = [], None
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if crop := _CROP.search(line):
            box = tuple(int(v) for v in crop.groups())
        if state := _STATE.search(line):
            returned = next((n for n in lines[i + 1 : i + 4] if n.startswith(_RETURNED)), "")
            images = [v.strip() for v in returned.removeprefix(_RETURNED).split(",") if v.strip()]
            out.append((box, state.group(1), images))
            box = None
    return out


def contains(box: tuple[int, ...] | None, region: list[int]) -> bool:
    """True when crop `box` holds the whole evidence `region` (both x0, y0, x1, y1); no crop holds
    nothing."""
    if box is None:
        return False
    return (
        box[0] <= region[0] and box[1] <= region[1] and region[2] <= box[2] and region[3] <= box[3]
    )


def sufficient_crops(body: str, region: list[int] | None) -> list[tuple[str, str]]:
    """(state id, first returned image) of each call in `body` whose crop holds `region`."""
    if region is None:
        return []
    return [
        (sid, images[0])
        for box, sid, images in crop_states(body)
        if images and contains(box, region)
    ]


def request_text(messages: list[dict[str, Any]]) -> str:
    """All text parts of the user messages, joined by newlines."""
    parts = []
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        parts.extend(p.get("text", "") for p in content or [] if p.get("type") == "text")
    return "\n".join(parts)


class ScriptedCritic:
    """Answers critic requests for items of `samples` (by original image, else question)."""

    def __init__(self, samples: Iterable[Sample] = ()) -> None:
        samples = list(samples)
        self.facts = {s.question.strip(): s.metadata.get("facts") for s in samples}
        self.by_image = {
            image_key(s.images[0]): s
            for s in samples
            if s.images and "region" in s.metadata and "difficulty" in s.metadata
        }

    def answer(self, text: str, image: Image.Image | None = None) -> dict[str, Any]:
        """The critic output (CRITIC_SCHEMA) for one request's text and first image."""
        question, reference = task_fields(text)
        sample = self.by_image.get(image_key(image)) if image is not None else None
        facts = sample.metadata.get("facts") if sample else self.facts.get(question)
        rollouts = _ROLLOUT.findall(text)
        region = sample.metadata["region"] if sample else None
        original_ok = sample is None or sample.metadata["difficulty"] != "hard"
        owned = {rid: sufficient_crops(body, region) for rid, _, body in rollouts}
        sufficient = [ORIGINAL] if original_ok else []
        sufficient += [
            {"state_id": sid, "support_image_ids": [image]}
            for states in owned.values()
            for sid, image in states
        ]
        return {
            "applicable": True,
            "sufficient_states": sufficient,
            "reading": reading(question, reference, facts),
            "grounding": GROUNDING,
            "rollout_diagnoses": [
                diagnosis(rid, label, body, reference, original_ok or bool(owned.get(rid)))
                for rid, label, body in rollouts
            ],
        }


def task_fields(text: str) -> tuple[str, str]:
    """(question, reference answer) of the request's task block: the text after the first
    "Question: " up to the next "\nReference answer: ", and that answer's line; ("", "") when
    there is none.

    Two `str.find`s, linear in the text. The regex this replaces (`Question: (.*?)\nReference
    answer: ...` with DOTALL) rescanned the rest of the text from every "Question: " when no
    reference followed: 33 s on a 195 KB message, inside the server's event loop.
    """
    start = text.find(_QUESTION)
    if start < 0:
        return "", ""
    start += len(_QUESTION)
    middle = text.find(_REFERENCE, start)
    if middle < 0:
        return "", ""
    answer = middle + len(_REFERENCE)
    end = text.find("\n", answer)
    return text[start:middle].strip(), text[answer : None if end < 0 else end].strip()


def reading(question: str, reference: str, facts: Any) -> dict[str, str]:
    """The reading part of the critic output: the question without box coordinates (what is
    asked, not where: a teacher reads the place from the question itself), the reference, the
    item's facts."""
    fact = f"the image shows {json.dumps(facts)}" if facts else f"the image shows {reference}"
    slot = _BOX.sub("", question)
    return {"query_slot": slot, "observed_value": reference, "visual_fact": fact}


GROUNDING = {"rule": "the answer is the observed value"}


def diagnosis(
    rollout: str, label: str, body: str, reference: str, saw_evidence: bool
) -> dict[str, str]:
    """The first broken link of one rollout (`body`: its text, whose last "Final answer: "
    line holds its answer)."""
    if label == "CORRECT":
        return {"rollout_id": rollout, "stage": "CORRECT", "discrepancy": ""}
    final = _FINAL.findall(body)
    answer = final[-1].strip() if final else "(none)"
    if answer == "(none)":
        return {"rollout_id": rollout, "stage": "OTHER", "discrepancy": "no final answer given"}
    if not saw_evidence:
        return {
            "rollout_id": rollout,
            "stage": "ACQUIRE",
            "discrepancy": f"answered {answer!r} without a view that shows the digit clearly",
        }
    return {
        "rollout_id": rollout,
        "stage": "READ",
        "discrepancy": f"answered {answer!r} although its evidence shows {reference!r}",
    }


def create_app(critic: ScriptedCritic) -> FastAPI:
    """A FastAPI app answering `/v1/chat/completions` with the scripted critic's JSON."""

    def reply(body: dict[str, Any]) -> str:
        messages = body.get("messages", [])
        return json.dumps(critic.answer(request_text(messages), first_image(messages)))

    return chat_app(reply, "scripted-critic", title="beacon scripted critic")

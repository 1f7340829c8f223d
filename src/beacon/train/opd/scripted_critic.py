"""A scripted critic for the built-in tasks: the critic contract answered from ground truth.

Not a model. It reads the critic request our trainer sends (`build_critic_request`'s text: task,
rollouts with their labels, evidence states) and answers the same strict JSON a critic model
would, from what `synth`, `synth_demo` and `synth_keys` know by construction: the reference
answer and each item's `facts` (and, for `synth_keys`, its evidence regions), over real HTTP.
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

Rules for a `synth_keys` item instead (its metadata names its `kind`; the evidence is every box of
its `regions`: [key box, target box], `marked`: [target box]; design:
`../shared/research/demo2_design.md` §2.4):
- Sufficient states: a post-tool state is sufficient when the crops available at it (its own
  and the earlier ones of its rollout, the images `beacon.train.opd.critic_schema` lists for
  it) hold every region; support: the fewest of those crops that do. A lucky crop of the
  target without the key is not sufficient: it does not show that this cell is the one the key
  names. Crops the request marks "not shown" are left out (the closed-set rule). The original
  state is not sufficient: the digits are unreadable at full view.
- Reading: the question as query slot, the answer digit as observed value, the item's facts
  (key, colour, cell, digit) as the visual fact. Grounding: the kind's rule (`KEYS_GROUNDING`).
- First broken link: CORRECT; OTHER without an answer; otherwise the stage is fixed by whether
  the rollout owns a sufficient state (the contract's ACQUIRE: "none of its own states is
  sufficient"; READ needs one it could see, else Algorithm 4 rejects an all-wrong group's
  output), and the discrepancy names the first step that went wrong and the right fact: the key
  never cropped (`cropped cell 6 without the key; the key names cell 6`), the key's note
  misread (`noted key 5, but the key is 3 and names cell 3`), the named cell not cropped after
  a right reading, which is where red-key mapping errors land (`cropped cell 3; the red key
  names cell 6`), or the right cell cropped and misread (`answered 4; cell 6 shows 7`). So a
  misread key is READ only when the rollout still owns a sufficient state; a misread that sent
  it to a wrong cell is ACQUIRE with the misread in the discrepancy.

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
_NOTE = re.compile(r"Key: (\d+)")  # the key as a rollout noted it (`beacon.demo.expert.key_note`)
_NOT_SHOWN = re.compile(r"(\S+) \(not shown\)")
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
        rollouts = _ROLLOUT.findall(text)
        if sample is not None and sample.metadata.get("kind") in KEYS_GROUNDING:
            return keys_answer(sample.metadata, question, reference, rollouts, not_shown(text))
        facts = sample.metadata.get("facts") if sample else self.facts.get(question)
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
    answer = final_answer(body)
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


def final_answer(body: str) -> str:
    """The rollout's answer: its last "Final answer: " line, "(none)" as the request writes it
    when there is none."""
    final = _FINAL.findall(body)
    return final[-1].strip() if final else "(none)"


KEYS_GROUNDING = {
    "told": (
        "the key names a cell in reading order; a red key counts from the end (cell 9 - key); "
        "the answer is that cell's digit"
    ),
    "keyed": "the key names a cell in reading order; the answer is that cell's digit",
    "marked": "the framed cell is the marked cell; the answer is that cell's digit",
}
"""The grounding rule of each `synth_keys` kind: the convention that maps the read key (or the
frame) to the cell whose digit answers. Only `told` has red keys, so only its rule states them."""

_BREAK = "\nBreak point: first broken link "
KEYS_REFLECTION_PHRASES = [
    '\nVisual fact: the image shows {"key": ',
    ', "colour": "grey", "cell": ',
    ', "colour": "red", "cell": ',
    ', "digit": ',
    *(f"\nGrounding rule: {rule}" for rule in KEYS_GROUNDING.values()),
    *(f"{_BREAK}{stage}. Discrepancy: noted key " for stage in ("ACQUIRE", "READ")),
    f"{_BREAK}ACQUIRE. Discrepancy: cropped cell ",
    f"{_BREAK}ACQUIRE. Discrepancy: cropped ",
    f"{_BREAK}READ. Discrepancy: answered ",
    "; the key names cell ",
    "; the red key names cell ",
    " without the key",
    ", but the key is ",
    ", but the red key is ",
    " and names cell ",
    "; cell ",
    " shows ",
    "; the framed cell is cell ",
    "; the key is a decoy",
    "only the key",
    "the key",
    "nothing",
    "cell ",
]
"""The fixed text `synth_keys` reflections add (`beacon.train.opd.score.reflection_text` over
`keys_answer`'s output), for the demo's tokenizer beside `beacon.demo.expert.KEYS_PHRASES`:
a complete red-key reflection (544 characters) is 315 tokens with `KEYS_PHRASES` alone, 20 with
these. None changes how an episode's own text splits (where "cell " or "the key" occur there,
a longer phrase holds them), or the student's tokens would change with the vocabulary."""


def not_shown(text: str) -> set[str]:
    """Image ids the request's evidence states mark "not shown": the critic saw none of their
    pixels, so the closed-set rule forbids them as support."""
    return set(_NOT_SHOWN.findall(text))


def covering_support(
    crops: list[tuple[tuple[int, ...], str]], regions: list[list[int]]
) -> list[str]:
    """The fewest image ids of `crops` ((box, image id), call order) whose boxes together hold
    every region, [] when they cannot: one crop holding them all if there is one, else the
    first crop holding each (with at most two regions, that is the fewest)."""
    whole = next((i for box, i in crops if all(contains(box, r) for r in regions)), None)
    if whole is not None:
        return [whole]
    picks = [next((i for box, i in crops if contains(box, r)), None) for r in regions]
    return [] if None in picks else list(dict.fromkeys(i for i in picks if i is not None))


def keys_sufficient(
    body: str, regions: list[list[int]], hidden: set[str]
) -> list[tuple[str, list[str]]]:
    """(state id, support image ids) of each state of one rollout whose available crops (its
    own and its rollout's earlier ones) hold every region; crops in `hidden` do not count."""
    crops: list[tuple[tuple[int, ...], str]] = []
    out = []
    for box, state, images in crop_states(body):
        if box is not None and images and images[0] not in hidden:
            crops.append((box, images[0]))
        if support := covering_support(crops, regions):
            out.append((state, support))
    return out


def keys_answer(
    meta: dict[str, Any],
    question: str,
    reference: str,
    rollouts: list[tuple[str, str, str]],
    hidden: set[str],
) -> dict[str, Any]:
    """The critic output for a `synth_keys` item (`meta`: its metadata) under the module's
    rules; `rollouts` are (id, label, body) as the request lists them."""
    owned = {rid: keys_sufficient(body, meta["regions"], hidden) for rid, _, body in rollouts}
    return {
        "applicable": True,
        "sufficient_states": [
            {"state_id": state, "support_image_ids": support}
            for states in owned.values()
            for state, support in states
        ],
        "reading": reading(question, reference, meta["facts"]),
        "grounding": {"rule": KEYS_GROUNDING[meta["kind"]]},
        "rollout_diagnoses": [
            keys_diagnosis(rid, label, body, meta, bool(owned[rid]))
            for rid, label, body in rollouts
        ],
    }


def keys_diagnosis(
    rollout: str, label: str, body: str, meta: dict[str, Any], owns: bool
) -> dict[str, str]:
    """The first broken link of one rollout of a `synth_keys` item: the stage from whether it
    owns a sufficient state (what Algorithm 4 accepts), the discrepancy from its crops and note."""
    if label == "CORRECT":
        return {"rollout_id": rollout, "stage": "CORRECT", "discrepancy": ""}
    answer = final_answer(body)
    if answer == "(none)":
        return {"rollout_id": rollout, "stage": "OTHER", "discrepancy": "no final answer given"}
    boxes = [box for box, _, _ in crop_states(body) if box is not None]
    stage, found = keys_break(meta, boxes, body, answer, owns)
    return {"rollout_id": rollout, "stage": stage, "discrepancy": found}


def keys_break(
    meta: dict[str, Any], boxes: list[tuple[int, ...]], text: str, answer: str, owns: bool
) -> tuple[str, str]:
    """(stage, discrepancy) of a wrong, answered rollout of a `synth_keys` item that cropped
    `boxes` (call order) and wrote `text` (where its key note is): the rules above, apart from
    the request's text so that the demo's teacher rows (`beacon.demo.told_rows`) state exactly
    what this critic would."""
    if meta["kind"] == "marked":
        found = marked_discrepancy(meta, boxes, answer, owns)
    else:
        found = key_discrepancy(meta, boxes, _NOTE.search(text), answer, owns)
    return "READ" if owns else "ACQUIRE", found


def key_discrepancy(
    meta: dict[str, Any],
    boxes: list[tuple[int, ...]],
    note: re.Match | None,
    answer: str,
    owns: bool,
) -> str:
    """What went wrong first on a `keyed` / `told` rollout, and the right fact: the key never
    cropped, the key noted wrong, the named cell not cropped (a red key mapped as a grey one
    lands here), else the right cell misread."""
    key = "the red key" if meta["colour"] == "red" else "the key"
    named = f"{key} names cell {meta['target']}"
    if not any(contains(box, meta["key_box"]) for box in boxes):
        what = f"{crop_name(meta, boxes[-1])} without the key" if boxes else "nothing"
        return f"cropped {what}; {named}"
    if note is not None and int(note.group(1)) != meta["key"]:
        return (
            f"noted key {note.group(1)}, but {key} is {meta['key']} and names cell {meta['target']}"
        )
    if owns:
        return misread(meta, answer)
    cells = [box for box in boxes if not contains(box, meta["key_box"])]
    return f"cropped {crop_name(meta, cells[-1]) if cells else 'only the key'}; {named}"


def marked_discrepancy(
    meta: dict[str, Any], boxes: list[tuple[int, ...]], answer: str, owns: bool
) -> str:
    """What went wrong first on a `marked` rollout: the framed cell not cropped (saying so when
    it followed the decoy key), else the framed cell misread."""
    if owns:
        return misread(meta, answer)
    framed = f"the framed cell is cell {meta['target']}"
    if not boxes:
        return f"cropped nothing; {framed}"
    decoy_cell = meta["cell_boxes"][meta["named"] - 1]
    followed = any(contains(b, meta["key_box"]) or contains(b, decoy_cell) for b in boxes)
    return f"cropped {crop_name(meta, boxes[-1])}; {framed}" + (
        "; the key is a decoy" if followed else ""
    )


def misread(meta: dict[str, Any], answer: str) -> str:
    """The discrepancy of a rollout that cropped the right cell and answered another digit."""
    return f"answered {answer}; cell {meta['target']} shows {meta['digits'][meta['target'] - 1]}"


def crop_name(meta: dict[str, Any], box: tuple[int, ...]) -> str:
    """What a crop shows in the grid's words: `the key`, `cell 3`, or the boxes a wider (or
    stray) crop holds, so a discrepancy never needs coordinates."""
    held = ["the key"] if contains(box, meta["key_box"]) else []
    held += [f"cell {n}" for n, cell in enumerate(meta["cell_boxes"], 1) if contains(box, cell)]
    if len(held) == 1:
        return held[0]
    return f"a view holding {', '.join(held)}" if held else "a view holding no whole box"


def create_app(critic: ScriptedCritic) -> FastAPI:
    """A FastAPI app answering `/v1/chat/completions` with the scripted critic's JSON."""

    def reply(body: dict[str, Any]) -> str:
        messages = body.get("messages", [])
        return json.dumps(critic.answer(request_text(messages), first_image(messages)))

    return chat_app(reply, "scripted-critic", title="beacon scripted critic")

"""The critic contract: strict schema, parsing, request assembly and the async client."""

from __future__ import annotations

import asyncio
import json

import pytest
from PIL import Image

from beacon.train.opd.critic import ask_critic, build_critic_request
from beacon.train.opd.critic_prompts import SYSTEM_PROMPTS
from beacon.train.opd.critic_schema import (
    CRITIC_SCHEMA,
    RESPONSE_FORMAT,
    CriticOutputError,
    observed_states,
    parse_critic_output,
)

from .helpers import make_trajectory

VALID = {
    "applicable": True,
    "sufficient_states": [{"state_id": "R1_S1", "support_image_ids": ["R1_S1_IMG1"]}],
    "reading": {"query_slot": "plate", "observed_value": "S QT 911", "visual_fact": "reads S QT"},
    "grounding": {"rule": "match the plate text to the option"},
    "rollout_diagnoses": [
        {"rollout_id": "R1", "stage": "CORRECT", "discrepancy": ""},
        {"rollout_id": "R2", "stage": "READ", "discrepancy": "misread Q as O"},
    ],
}


def walk_objects(schema):
    if schema.get("type") == "object":
        yield schema
        for sub in schema["properties"].values():
            yield from walk_objects(sub)
    elif schema.get("type") == "array":
        yield from walk_objects(schema["items"])


def test_schema_is_strict() -> None:
    assert RESPONSE_FORMAT["type"] == "json_schema"
    assert RESPONSE_FORMAT["json_schema"]["strict"] is True
    objects = list(walk_objects(CRITIC_SCHEMA))
    assert len(objects) == 5
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])
    stage = CRITIC_SCHEMA["properties"]["rollout_diagnoses"]["items"]["properties"]["stage"]
    assert stage["enum"] == ["CORRECT", "ACQUIRE", "READ", "GROUND", "OTHER"]


def test_parse_valid_and_fenced() -> None:
    out = parse_critic_output(json.dumps(VALID))
    assert out.sufficient_states[0].support_image_ids == ("R1_S1_IMG1",)
    assert out.rollout_diagnoses[1].stage == "READ"
    assert parse_critic_output("```json\n" + json.dumps(VALID) + "\n```") == out


def _broken(path: list, value) -> str:
    data = json.loads(json.dumps(VALID))
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not JSON"),
        ("[]", "expected an object"),
        (_broken(["reading"], KeyError), "missing fields"),
        (_broken(["reading", "visual_fact"], KeyError), "missing fields"),
        (_broken(["extra"], 1), "unknown fields"),
        (_broken(["applicable"], "yes"), "boolean"),
        (_broken(["rollout_diagnoses", 1, "stage"], "PERCEIVE"), "not one of"),
        (_broken(["sufficient_states", 0, "support_image_ids"], "R1_S1_IMG1"), "array"),
        (_broken(["grounding", "rule"], None), "string"),
    ],
)
def test_parse_rejects_malformed(text: str, match: str) -> None:
    with pytest.raises(CriticOutputError, match=match):
        parse_critic_output(text)


def test_prompt_variants_say_their_rules() -> None:
    assert set(SYSTEM_PROMPTS) == {"all_correct", "mixed", "all_wrong"}
    assert "empty discrepancy" in SYSTEM_PROMPTS["all_correct"]
    assert "never use stage CORRECT" in SYSTEM_PROMPTS["all_wrong"]
    assert "may be\nempty" in SYSTEM_PROMPTS["all_wrong"]
    assert "FIRST broken link" in SYSTEM_PROMPTS["mixed"]


def image_loader(key: str) -> Image.Image:
    return Image.new("RGB", (4, 4), (len(key) * 20 % 255, 0, 0))


def test_request_shows_at_most_eight_tool_images_correct_first() -> None:
    # 2 wrong rollouts with 3 calls each, then 2 correct ones with 3 calls each (12 images)
    group = [make_trajectory([[f"w{i}{k}"] for k in range(3)], answer="B") for i in range(2)]
    group += [make_trajectory([[f"c{i}{k}"] for k in range(3)]) for i in range(2)]
    labels = [False, False, True, True]
    states = observed_states(group)
    req = build_critic_request("Q?", "A", group, labels, states, image_loader)
    tool_shown = [i for i in req.shown_image_ids if not i.startswith("ORIGINAL")]
    assert len(tool_shown) == 8
    # the 6 images of the correct rollouts, then round-robin: the wrong rollouts' first calls
    assert set(tool_shown) == {f"R{r}_S{k}_IMG1" for r in (3, 4) for k in (1, 2, 3)} | {
        "R1_S1_IMG1",
        "R2_S1_IMG1",
    }
    images = [p for p in req.messages[1]["content"] if p["type"] == "image"]
    assert len(images) == 9 and images[0]["image_id"] == "ORIGINAL_IMAGE"
    assert req.messages[0]["content"] == SYSTEM_PROMPTS["mixed"]
    assert req.temperature == 0.0 and req.max_tokens == 2048
    assert req.response_format is RESPONSE_FORMAT
    text = req.messages[1]["content"][-1]["text"]
    assert "R1_S3_IMG1 (not shown)" in text and "Rollout R3 (CORRECT)" in text
    assert "R1, R2, R3, R4" in text
    described = json.dumps(req.describe())  # logs carry ids, never pixels
    assert "<image ORIGINAL_IMAGE>" in described


def test_request_dedupes_identical_crops() -> None:
    group = [make_trajectory([["same"]]), make_trajectory([["same"]], answer="B")]
    states = observed_states(group)
    req = build_critic_request("Q?", "A", group, [True, False], states, image_loader, 1)
    assert {"R1_S1_IMG1", "R2_S1_IMG1"} <= req.shown_image_ids
    assert "R2_S1_IMG1 (same picture as R1_S1_IMG1)" in req.messages[1]["content"][-1]["text"]
    assert req.kind == "mixed"


def make_sender(replies):
    calls = []

    async def send(request):
        calls.append(request)
        reply = replies[min(len(calls) - 1, len(replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        if reply == "SLOW":
            await asyncio.sleep(10)
        return reply

    return send, calls


@pytest.fixture
def request_():
    group = [make_trajectory([["k1"]]), make_trajectory([], answer="B")]
    states = observed_states(group)
    return build_critic_request("Q?", "A", group, [True, False], states, image_loader)


def test_client_success_logs_every_exchange(request_) -> None:
    send, _ = make_sender([json.dumps(VALID)])
    log = []
    reply = asyncio.run(ask_critic(request_, send, on_exchange=log.append))
    assert reply.output is not None and reply.attempts == 1 and reply.error is None
    assert len(log) == 1 and log[0]["response"] == json.dumps(VALID)
    assert log[0]["request"]["kind"] == "mixed"


def test_client_retries_malformed_then_succeeds(request_) -> None:
    send, _ = make_sender(["{oops", json.dumps(VALID)])
    log = []
    reply = asyncio.run(ask_critic(request_, send, retries=2, on_exchange=log.append))
    assert reply.output is not None and reply.attempts == 2
    assert "not JSON" in log[0]["error"] and reply.raw_replies[0] == "{oops"


@pytest.mark.parametrize(
    ("replies", "match"),
    [
        ([ConnectionError("refused")], "ConnectionError"),
        (["SLOW"], "timed out"),
        (["{}"], "missing fields"),
    ],
)
def test_client_gives_up_without_raising(request_, replies, match) -> None:
    send, calls = make_sender(replies)
    reply = asyncio.run(ask_critic(request_, send, retries=1, timeout_s=0.05))
    assert reply.output is None and reply.attempts == 2 and len(calls) == 2
    assert match in reply.error

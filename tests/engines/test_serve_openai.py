"""`beacon serve` + the openai engine over real HTTP give the hf engine's exact tokens."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from beacon.engines.base import GenerationRequest, SamplingParams
from beacon.engines.hf import HFEngine
from beacon.engines.openai import OpenAIEngine, image_data_url
from beacon.engines.serve import serve_in_thread
from beacon.fakes.logits import ScriptedTokens

from .helpers import thyme_observation_chat, user_turn

ANSWER = "I see it. <answer>7</answer> and more"


@pytest.fixture(scope="module")
def served(tiny_dir):
    """(server engine, local engine, base_url): both engines force the same answer script."""
    path = tiny_dir("qwen2_vl")
    server_engine, local = HFEngine(path, batch_size=4), HFEngine(path, batch_size=4)
    handle = serve_in_thread(server_engine, model_name="tiny")
    yield server_engine, local, handle.base_url
    handle.stop()


@pytest.fixture()
def client(served):
    _, local, base_url = served
    return OpenAIEngine(base_url, "tiny", tokenizer=local.tokenizer, backoff_s=0.01)


def _force(served, text: str | None) -> None:
    server_engine, local, _ = served
    processors = [ScriptedTokens(local.tokenizer.encode(text))] if text else []
    server_engine.logits_processors = processors
    local.logits_processors = list(processors)


def _requests(images):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    return [
        GenerationRequest([user_turn("What digit?", images[0])], greedy),
        GenerationRequest([{"role": "user", "content": "text only"}], greedy),
        GenerationRequest(
            thyme_observation_chat(images[0], images[1]), greedy, continue_final_message=True
        ),
    ]


def test_same_token_ids_as_hf_at_temperature_0(served, client, images):
    _force(served, None)
    requests = _requests(images)
    local = served[1].generate(requests)
    remote = client.generate(requests)
    for a, b in zip(local, remote, strict=True):
        assert b.error is None
        assert b.token_ids == a.token_ids and b.prompt_ids == a.prompt_ids
        assert b.text == a.text
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
        assert b.finish_reason == a.finish_reason == "length"


def test_thyme_continuation_with_stop_string(served, client, images):
    _force(served, ANSWER)
    params = SamplingParams(temperature=0.0, max_new_tokens=40, stop=["</answer>"])
    chat = thyme_observation_chat(images[0], images[2])
    request = GenerationRequest(chat, params, continue_final_message=True)
    [local] = served[1].generate([request])
    [remote] = client.generate([request])
    assert local.text == remote.text == "I see it. <answer>7</answer>"
    assert remote.token_ids == local.token_ids
    assert remote.stop_reason == "</answer>" and remote.finish_reason == "stop"


def test_without_a_tokenizer_text_gets_the_stop_string_back(served, images):
    _force(served, ANSWER)
    params = SamplingParams(temperature=0.0, max_new_tokens=40, stop=["</answer>"])
    request = GenerationRequest([user_turn("q", images[0])], params)
    [plain] = OpenAIEngine(served[2], "tiny").generate([request])
    [no_ids] = OpenAIEngine(served[2], "tiny", vllm_extensions="off").generate([request])
    assert plain.text == "I see it. <answer>7</answer>" and plain.token_ids
    assert no_ids.token_ids == [] and no_ids.text == "I see it. <answer>7</answer>"


def test_concurrent_requests_are_batched_correctly(served, client, images):
    _force(served, None)
    requests = _requests(images) * 3
    expected = [r.token_ids for r in served[1].generate(requests)]
    assert [r.token_ids for r in client.generate(requests)] == expected


def test_generate_works_inside_a_running_event_loop(served, client, images):
    _force(served, None)
    requests = _requests(images)[:1]

    async def call_blocking_api():
        return client.generate(requests)

    [result] = asyncio.run(call_blocking_api())
    assert result.token_ids == served[1].generate(requests)[0].token_ids


def _post(base_url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=30)


def test_response_speaks_vllm_protocol(served, images):
    _force(served, ANSWER)
    body = {
        "model": "tiny",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_data_url(images[0])}},
                    {"type": "text", "text": "q"},
                ],
            }
        ],
        "temperature": 0,
        "max_completion_tokens": 40,
        "stop": "</answer>",
        "logprobs": True,
        "top_logprobs": 1,
        "return_token_ids": True,
    }
    reply = _post(served[2], body)
    assert reply.status_code == 200
    data = reply.json()
    choice = data["choices"][0]
    assert data["object"] == "chat.completion" and data["model"] == "tiny"
    assert choice["message"] == {"role": "assistant", "content": "I see it. <answer>7"}
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "</answer>"
    tokenizer = served[1].tokenizer
    assert tokenizer.decode(choice["token_ids"]) == "I see it. <answer>7</answer>"
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert tokenizer.image_token_id in data["prompt_token_ids"]
    assert data["usage"]["completion_tokens"] == len(choice["token_ids"])
    body["include_stop_str_in_output"] = True
    assert _post(served[2], body).json()["choices"][0]["message"]["content"].endswith("</answer>")


def test_models_and_health(served):
    base = served[2]
    assert httpx.get(base.removesuffix("/v1") + "/health").status_code == 200
    assert httpx.get(f"{base}/models").json()["data"][0]["id"] == "tiny"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": []}, "messages: List should have at least 1 item"),
        ({"messages": [{"role": "user", "content": "q"}], "n": 2}, "n=2"),
        (
            {"messages": [{"role": "user", "content": "q"}], "continue_final_message": True},
            "Cannot set both",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            "cannot read an image",
        ),
        ({"messages": [{"role": "user", "content": "q"}], "temperature": -1}, "temperature"),
        (
            {
                "messages": [
                    {"role": "user", "content": "<|vision_start|><|image_pad|><|vision_end|>"}
                ]
            },
            "1 image placeholders but 0 images",
        ),
    ],
)
def test_bad_requests_get_openai_shaped_400(served, body, message):
    reply = _post(served[2], body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "BadRequestError" and message in error["message"]


def test_top_logprobs_are_the_models_top_k(served, client, images):
    """`beacon serve` returns the k most likely tokens per position (issue 7 §8), equal to the
    local engine's, most likely first; the openai engine maps them back to ids."""
    _force(served, None)
    params = SamplingParams(temperature=0.0, max_new_tokens=6, top_logprobs=3)
    request = GenerationRequest([user_turn("What digit?", images[0])], params)
    (local,) = served[1].generate([request])
    (remote,) = client.generate([request])
    assert remote.token_ids == local.token_ids
    assert len(remote.top_logprobs) == len(local.top_logprobs) == len(local.token_ids)
    for ours, theirs, token, logprob in zip(
        remote.top_logprobs, local.top_logprobs, local.token_ids, local.logprobs, strict=True
    ):
        assert [a.token_id for a in ours] == [a.token_id for a in theirs]
        assert [a.logprob for a in ours] == pytest.approx([a.logprob for a in theirs], abs=1e-4)
        values = [a.logprob for a in theirs]
        assert values == sorted(values, reverse=True) and len(values) == 3
        assert theirs[0].token_id == token and theirs[0].logprob == pytest.approx(logprob)

    body = {
        "messages": [{"role": "user", "content": "q"}],
        "max_tokens": 3,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    entries = _post(served[2], body).json()["choices"][0]["logprobs"]["content"]
    assert all(len(e["top_logprobs"]) == 2 for e in entries)
    assert all(e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"] for e in entries)
    del body["logprobs"]
    assert _post(served[2], body).status_code == 400  # as OpenAI: top_logprobs needs logprobs


def test_openai_engine_keeps_one_client_across_calls_and_loops(served, client, images):
    _force(served, None)
    request = _requests(images)[1]
    client.generate([request])
    first = client._client.session
    asyncio.run(client.agenerate([request]))
    asyncio.run(client.agenerate([request]))
    client.generate([request])
    assert client._client.session is first
    client.close()
    assert first.closed
    assert client.generate([request])[0].error is None  # a call after close starts anew
    client.close()

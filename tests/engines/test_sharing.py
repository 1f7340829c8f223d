"""`beacon.engines.sharing`: a request run in chunks gives what a whole run gives, and the
weight gate keeps updates between responses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from beacon.engines.base import GenerationRequest, GenerationResult, SamplingParams
from beacon.engines.hf import HFEngine
from beacon.engines.sharing import WeightGate, generate_in_chunks
from beacon.fakes.logits import ScriptedTokens

ANSWER = "I see it. <answer>7</answer> and more"


@pytest.fixture(scope="module")
def engine(tiny_dir) -> Iterator[HFEngine]:
    engine = HFEngine(tiny_dir("qwen2_vl"), batch_size=4)
    yield engine
    engine.close()


def _request(engine: HFEngine, sampling: SamplingParams) -> GenerationRequest:
    request = GenerationRequest([{"role": "user", "content": "Tell me."}], sampling)
    request.prompt_ids, _ = engine.tokenizer.request_ids(request)
    return request


def _chunked(engine: HFEngine, request: GenerationRequest, chunk: int) -> GenerationResult:
    calls = []

    async def submit(part: GenerationRequest) -> GenerationResult:
        calls.append(part.sampling.max_new_tokens)
        [result] = await asyncio.to_thread(engine.generate, [part])
        return result

    result = asyncio.run(generate_in_chunks(submit, request, chunk, engine.tokenizer))
    assert len(calls) > 1 or request.sampling.max_new_tokens <= chunk
    return result


def test_greedy_chunks_equal_a_whole_run(engine):
    engine.logits_processors = []
    request = _request(engine, SamplingParams(temperature=0.0, max_new_tokens=40))
    [whole] = engine.generate([request])
    parts = _chunked(engine, request, chunk=7)
    assert parts.token_ids == whole.token_ids and parts.text == whole.text
    assert parts.finish_reason == whole.finish_reason
    assert parts.prompt_ids == whole.prompt_ids
    assert parts.logprobs == pytest.approx(whole.logprobs, abs=1e-4)


def test_a_stop_string_across_two_chunks_ends_the_run_where_a_whole_run_ends(engine):
    """`<answer>` closes the first chunk and `7` opens the second: neither chunk alone holds
    the stop string `<answer>7`."""
    script = engine.tokenizer.encode(ANSWER)
    engine.logits_processors = [ScriptedTokens(script)]
    request = _request(
        engine, SamplingParams(temperature=0.0, max_new_tokens=30, stop=["<answer>7"])
    )
    [whole] = engine.generate([request])
    boundary = [engine.tokenizer.decode([t]) for t in script].index("<answer>") + 1
    parts = _chunked(engine, request, chunk=boundary)
    engine.logits_processors = []
    assert whole.text == "I see it. <answer>7" and whole.stop_reason == "<answer>7"
    assert parts.token_ids == whole.token_ids and parts.text == whole.text
    assert (parts.finish_reason, parts.stop_reason) == ("stop", "<answer>7")
    assert len(parts.logprobs) == len(parts.token_ids)


def test_a_seeded_chunked_request_is_reproducible(engine):
    engine.logits_processors = []
    sampling = SamplingParams(temperature=1.0, max_new_tokens=24, seed=5, top_logprobs=2)
    request = _request(engine, sampling)
    first, again = _chunked(engine, request, 8), _chunked(engine, request, 8)
    assert first.token_ids == again.token_ids
    assert len(first.top_logprobs) == len(first.token_ids)
    [whole] = engine.generate([request])  # the first chunk keeps the request's own seed
    assert first.token_ids[:8] == whole.token_ids[:8]


def test_an_update_waits_for_responses_in_flight_and_holds_new_ones():
    async def scenario() -> list[str]:
        gate, events = WeightGate(), []
        first_started, release_first = asyncio.Event(), asyncio.Event()

        async def response(name: str, hold: asyncio.Event | None = None) -> None:
            async with gate.generating():
                events.append(f"{name} start")
                if hold is not None:
                    first_started.set()
                    await hold.wait()
                events.append(f"{name} end")

        async def update() -> None:
            async with gate.updating():
                events.append("update")

        first = asyncio.create_task(response("first", release_first))
        await first_started.wait()
        pending = asyncio.create_task(update())
        await asyncio.sleep(0)  # the update is now waiting for `first`
        later = asyncio.create_task(response("later"))
        await asyncio.sleep(0)
        assert events == ["first start"]  # `later` waits behind the pending update
        release_first.set()
        await asyncio.gather(first, pending, later)
        return events

    assert asyncio.run(scenario()) == [
        "first start", "first end", "update", "later start", "later end"
    ]  # fmt: skip

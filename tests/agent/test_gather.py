"""The agent loop gathers a turn of every live episode into one call (`beacon.agent.gather`):
episodes whose tool calls end at different times still share one generation call, a stuck tool
call holds the others no longer than the cap, and a remote engine is never held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from PIL import Image

from beacon.agent.config import AgentConfig
from beacon.agent.episode import EpisodeSpec
from beacon.agent.gather import FIRST_HOLD_S, MAX_HOLD_S, RECENT_CALLS, HoldCap, TurnGather
from beacon.agent.loop import AgentLoop
from beacon.engines.base import GenerationRequest, GenerationResult
from beacon.sandbox.config import ExecResult
from beacon.types import Sample

from .fakes import AsyncScriptedEngine, FakeSandbox, FakeSession, ScriptedEngine

CALL_S = 0.5
"""What one generation call of the slow engine takes: the cap it teaches the gatherer."""


class SlowEngine(ScriptedEngine):
    """An in-process engine whose every call costs `CALL_S` and records its size."""

    def __init__(self, scripts: dict[str, str]) -> None:
        super().__init__(scripts)
        self.calls: list[int] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(len(requests))
        time.sleep(CALL_S)
        return super().generate(requests)


class RemoteEngine(AsyncScriptedEngine):
    """A server-backed engine (`remote`): the loop must send each request as soon as it is
    ready."""

    def __init__(self, scripts: dict[str, str]) -> None:
        super().__init__(scripts)
        self.calls: list[int] = []

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(len(requests))
        return await super().agenerate(requests)


@dataclass
class SlowSession(FakeSession):
    delay_s: float = 0.0

    def run(self, code: str) -> ExecResult:
        time.sleep(self.delay_s)
        return super().run(code)


class StaggeredSandbox(FakeSandbox):
    """Sessions whose tool calls take the given times, by the sample the episode is on."""

    def __init__(self, delays: dict[int, float]) -> None:
        super().__init__()
        self.delays = delays

    def session(self, images: Sequence[Image.Image], deferred: bool = False) -> SlowSession:
        size = images[0].width  # each test sample's width is its index + 10
        session = SlowSession(list(self.results), delay_s=self.delays[size - 10])
        self.sessions.append(session)
        return session


def samples(n: int) -> list[Sample]:
    return [
        Sample(
            id=f"s{i}",
            images=[Image.new("RGB", (10 + i, 12), "white")],
            question=f"s{i} what is shown?",
            answer="B",
        )
        for i in range(n)
    ]


def crop_then_answer(n: int) -> dict[str, str]:
    code = "<code>\n```python\nprint(image.size)\n```\n</code>"
    return {f"s{i}": f"Zoom. {code}It is B. <answer>B</answer>" for i in range(n)}


def run(engine: ScriptedEngine, delays: dict[int, float]) -> list:
    specs = [EpisodeSpec(s, mode="tool") for s in samples(len(delays))]
    with AgentLoop(engine, StaggeredSandbox(delays), AgentConfig(max_turns=2)) as loop:
        return loop.run(specs, max_active=len(specs))


def test_tool_calls_ending_at_different_times_share_one_call() -> None:
    delays = {0: 0.0, 1: 0.05, 2: 0.1, 3: 0.15}  # all within one call's time (the cap)
    engine = SlowEngine(crop_then_answer(4))
    trajectories = run(engine, delays)
    assert [t.final_answer for t in trajectories] == ["B"] * 4
    assert engine.calls == [4, 4]  # one call per turn, not one per tool call's end


def test_a_stuck_tool_call_holds_the_others_no_longer_than_the_cap() -> None:
    delays = {0: 0.0, 1: 0.0, 2: 0.0, 3: 3.0}  # far past the cap (one call's time)
    engine = SlowEngine(crop_then_answer(4))
    trajectories = run(engine, delays)
    assert [t.final_answer for t in trajectories] == ["B"] * 4
    assert engine.calls == [4, 3, 1]  # the three went after the cap, the stuck one alone


def test_a_remote_engine_gets_each_request_as_soon_as_it_is_ready() -> None:
    engine = RemoteEngine(crop_then_answer(3))
    run(engine, {0: 0.0, 1: 0.0, 2: 0.0})
    assert engine.calls == [1] * 6


def test_an_episode_alone_is_never_held() -> None:
    asyncio.run(asyncio.wait_for(alone_then_three(), timeout=30))


async def alone_then_three() -> None:
    calls: list[int] = []

    async def agenerate(requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        calls.append(len(requests))
        return [GenerationResult(text="ok", finish_reason="stop") for _ in requests]

    gather = TurnGather(agenerate, HoldCap(first_s=MAX_HOLD_S))
    gather.join()
    result = await asyncio.wait_for(gather.generate(GenerationRequest(messages=[])), 1.0)
    assert result.text == "ok" and calls == [1]  # sent at once, not after the 2 s cap
    gather = TurnGather(agenerate, HoldCap(first_s=MAX_HOLD_S))  # no fast call timed yet
    gather.join()
    gather.join()
    gather.join()
    waiting = asyncio.ensure_future(gather.generate(GenerationRequest(messages=[])))
    await asyncio.sleep(0.05)
    assert calls == [1]  # two more live episodes will ask: held
    gather.leave()
    gather.leave()  # ...until they finish without asking
    assert (await asyncio.wait_for(waiting, 1.0)).text == "ok" and calls == [1, 1]


def test_a_held_request_of_a_cancelled_episode_is_never_sent() -> None:
    asyncio.run(asyncio.wait_for(cancel_while_held(), timeout=30))


async def cancel_while_held() -> None:
    sent: list[list[str]] = []

    async def agenerate(requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        sent.append([r.messages[0]["content"] for r in requests])
        return [GenerationResult(text="ok", finish_reason="stop") for _ in requests]

    gather = TurnGather(agenerate, HoldCap(first_s=MAX_HOLD_S))
    for _ in range(3):
        gather.join()
    ask = [{"role": "user", "content": "a"}]
    doomed = asyncio.ensure_future(gather.generate(GenerationRequest(messages=ask)))
    await asyncio.sleep(0.05)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    gather.leave()  # the cancelled episode ends
    kept = [
        asyncio.ensure_future(
            gather.generate(GenerationRequest(messages=[{**ask[0], "content": c}]))
        )
        for c in "bc"
    ]
    results = await asyncio.wait_for(asyncio.gather(*kept), 1.0)
    assert [r.text for r in results] == ["ok", "ok"]
    # before: [["a", "b"], ["c"]]: the request nobody awaited was sent, and counted as waiting
    # it split the turn in two calls
    assert sent == [["b", "c"]]


def test_hold_cap_is_the_longest_recent_call_within_bounds() -> None:
    cap = HoldCap()
    assert cap.seconds == FIRST_HOLD_S
    cap.update(0.4)
    cap.update(0.1)
    assert cap.seconds == pytest.approx(0.4)  # a short call does not shrink it
    for _ in range(RECENT_CALLS):
        cap.update(0.05)
    assert cap.seconds == pytest.approx(0.05)  # the long call has aged out
    cap.update(60.0)
    assert cap.seconds == MAX_HOLD_S

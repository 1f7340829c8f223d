"""A scripted engine and sandbox for state-machine tests: no model, no processes.

`ScriptedEngine` plays a model whose whole output for an episode is fixed in advance: each
request continues the script from where the last one stopped and ends at the first of the
request's stop strings (included, as real engines return it), or at the end of the script
(end of sequence), or after `max_new_tokens * 4` characters ("length"; text-only episodes count
four characters per token). So the episode sees exactly what a real engine would return.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from PIL import Image

from beacon.engines.base import GenerationRequest, GenerationResult
from beacon.sandbox.config import ExecResult


@dataclass
class ScriptedEngine:
    """`scripts[sample_id]` is the model's whole text for that sample's episode."""

    scripts: dict[str, str]
    name: str = "scripted"
    tokenizer: None = None
    requests: list[GenerationRequest] = field(default_factory=list)
    errors: set[str] = field(default_factory=set)  # sample ids whose requests fail
    _positions: dict[str, int] = field(default_factory=dict)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return [self._one(r) for r in requests]

    def close(self) -> None:
        pass

    def _one(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        sample_id = sample_of(request)
        if sample_id in self.errors:
            return GenerationResult(text="", finish_reason="error", error="HTTP 500: boom")
        script = self.scripts[sample_id]
        start = self._positions.get(sample_id, 0)
        rest = script[start:]
        limit = request.sampling.max_new_tokens * 4
        hits = [(rest.find(s) + len(s), s) for s in request.sampling.stop if s in rest]
        end, stop = min(hits) if hits else (len(rest), None)
        finish = "stop"
        if end > limit:
            end, stop, finish = limit, None, "length"
        self._positions[sample_id] = start + end
        return GenerationResult(text=rest[:end], finish_reason=finish, stop_reason=stop)


class AsyncScriptedEngine(ScriptedEngine):
    """The same script, through `agenerate`, with a hook awaited before each reply: a server
    whose replies come back at their own times (`remote`: the loop sends each request at once).
    """

    remote = True

    def __init__(self, scripts: dict[str, str], before_reply: Callable | None = None) -> None:
        super().__init__(scripts)
        self.before_reply = before_reply

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if self.before_reply is not None:
            await self.before_reply(requests[0])
        await asyncio.sleep(0)
        return self.generate(requests)


def sample_of(request: GenerationRequest) -> str:
    """The sample id, read off the question (tests write it as the question's first word)."""
    user = next(m for m in request.messages if m["role"] == "user")
    text = next(p["text"] for p in user["content"] if p["type"] == "text")
    return text.split()[0]


@dataclass
class FakeSession:
    """A sandbox session whose calls return `results` in order (the last one repeats)."""

    results: list[ExecResult]
    image_paths: list[str] = field(default_factory=lambda: ["/mnt/data/images/image_0.png"])
    ran: list[str] = field(default_factory=list)
    opened: bool = False
    closed: bool = False

    def open(self) -> None:
        self.opened = True

    def run(self, code: str) -> ExecResult:
        self.ran.append(code)
        return self.results[min(len(self.ran) - 1, len(self.results) - 1)]

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeSandbox:
    """Hands out `FakeSession`s that all return `results`."""

    results: list[ExecResult] = field(default_factory=lambda: [ExecResult(ok=True, stdout="1")])
    sessions: list[FakeSession] = field(default_factory=list)

    def session(self, images: Sequence[Image.Image], deferred: bool = False) -> FakeSession:
        session = FakeSession(list(self.results))
        self.sessions.append(session)
        return session

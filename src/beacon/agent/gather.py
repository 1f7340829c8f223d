"""Gathers the next turn of every live episode into one generation call (in-process engines).

An in-process engine (`hf`, `vllm`) pays a fixed cost per `generate` call (prefill, vision
encoder, the per-token loop), so a batch of 40 costs little more than a batch of 2. Episodes do
not ask together, though: they open their sandbox sessions and finish their tool calls one after
another, and an engine that starts on whatever is pending runs the first two, then the next
five... A GRPO step of 48 rollouts on the demo's model made 17 calls where 2-4 would do.

The agent loop knows what the engine cannot: how many live episodes are busy elsewhere (opening
a session, running code) and so will ask soon. `TurnGather` holds an event loop's requests until
none is (every live episode waits for a result or has finished), or until a hold cap passes:
about the duration of a call (`HoldCap`), because waiting longer than a call takes saves less
than it costs. Remote engines (`openai`) do not go through it: their servers batch
continuously, and a request held back there only starts later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from beacon.engines.base import GenerationRequest, GenerationResult

logger = logging.getLogger(__name__)

AsyncGenerate = Callable[[Sequence[GenerationRequest]], Awaitable[list[GenerationResult]]]

FIRST_HOLD_S = 0.25
"""The hold cap before any call was timed: a few tiny-model calls, a fraction of a large one."""
RECENT_CALLS = 8
"""Calls the cap looks back over."""
MAX_HOLD_S = 2.0
"""A hold never exceeds this, however slow calls are (a stuck tool call must not stall turns)."""


class HoldCap:
    """How long a request may wait for others: the longest of the last `RECENT_CALLS` calls
    (shared across event loops). The longest, not the last: a short call (a 3-token answer)
    says little about the next one, which may be a long turn of 48 episodes."""

    def __init__(self, first_s: float = FIRST_HOLD_S) -> None:
        self._first_s = first_s
        self._recent: deque[float] = deque(maxlen=RECENT_CALLS)

    @property
    def seconds(self) -> float:
        return min(MAX_HOLD_S, max(self._recent, default=self._first_s))

    def update(self, call_s: float) -> None:
        self._recent.append(call_s)


class TurnGather:
    """One event loop's episodes and their held requests; see the module docstring.

    `join`/`leave` bracket an episode's life; `generate` holds its request until every live
    episode is waiting (held or in a call) or the cap passes, then sends all held requests as
    one `agenerate` call. Not thread-safe: everything runs on the owning event loop.
    """

    def __init__(self, agenerate: AsyncGenerate, cap: HoldCap) -> None:
        self._agenerate, self._cap = agenerate, cap
        self.live = 0  # episodes between join and leave
        self.in_call = 0  # requests sent and not yet answered
        self._held: list[tuple[GenerationRequest, asyncio.Future]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._calls: set[asyncio.Task] = set()

    def join(self) -> None:
        self.live += 1

    def leave(self) -> None:
        self.live -= 1
        if self.live == 0:  # every episode ended (or was cancelled): nobody awaits these calls
            for task in self._calls:
                task.cancel()
        self._flush_if_all_wait()

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerationResult] = loop.create_future()
        self._held.append((request, future))
        if self._timer is None:
            self._timer = loop.call_later(self._cap.seconds, self._flush)
        self._flush_if_all_wait()
        try:
            return await future
        except asyncio.CancelledError:  # a held request of a cancelled episode is never sent
            self._held = [entry for entry in self._held if entry[1] is not future]
            raise

    def _flush_if_all_wait(self) -> None:
        if self._held and self.live <= self.in_call + len(self._held):
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, []
        if held:
            self.in_call += len(held)
            task = asyncio.get_running_loop().create_task(self._call(held))
            self._calls.add(task)  # a reference, so the task is not collected mid-call
            task.add_done_callback(self._calls.discard)

    async def _call(self, held: list[tuple[GenerationRequest, asyncio.Future]]) -> None:
        start = time.monotonic()
        try:
            results = await self._agenerate([request for request, _ in held])
        except Exception as exc:  # engines should not raise; if one does, these requests fail
            logger.exception("engine raised on a call of %d requests", len(held))
            results = [GenerationResult.failed(exc) for _ in held]
        finally:
            self.in_call -= len(held)
        self._cap.update(time.monotonic() - start)
        for (_, future), result in zip(held, results, strict=True):
            if not future.done():  # the episode's task may have been cancelled
                future.set_result(result)

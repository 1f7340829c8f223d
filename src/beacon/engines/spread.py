"""`SpreadEngine`: several engines (one per `beacon serve` process) behind one engine interface.

Each request goes to the next engine in turn, so the agent loop sees one engine; an episode's
turns may land on different servers, which is fine as long as every server holds the same
weights (GRPO pushes new weights to all of them after every step).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from beacon.engines.base import GenerationRequest, GenerationResult


class SpreadEngine:
    """Round-robin over several engines (one per server), as one engine."""

    name = "spread"

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("SpreadEngine needs at least one engine (rollout.servers is empty)")
        self.engines = list(engines)
        self.tokenizer = self.engines[0].tokenizer
        self._next = itertools.cycle(self.engines)

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Send each request to the next server in turn (round robin), all at once; results in
        request order."""
        chunks = await asyncio.gather(*(next(self._next).agenerate([r]) for r in requests))
        return [result for chunk in chunks for result in chunk]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Blocking `agenerate`, for callers without an event loop."""
        return asyncio.run(self.agenerate(requests))

    def close(self) -> None:
        """Close every server's client."""
        for engine in self.engines:
            engine.close()

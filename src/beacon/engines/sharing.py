"""How the requests of `beacon serve` share one engine: generation in chunks, and a gate that
keeps weight updates between responses.

The engine runs one batch at a time (`BatchingQueue`): whatever is pending when it is free runs
together, and a batch returns when its longest row ends. Run whole, a 4000-token request held
a 2-token request that arrived just after it for its whole length. `generate_in_chunks` runs a
long request `chunk_tokens` new tokens at a time instead: each chunk is one queue entry that
continues from the ids so far (prompt + generated), queued behind whatever arrived meanwhile,
so a short request waits for about one chunk, not for the longest request ahead of it
(`benchmarks/serve_fairness.py` measures it; docs/engines.md has the figures).

What a chunked request keeps of a whole run: its token ids, log-probs and top log-probs in one
sequence; end-of-sequence; stop strings, also one that spans two chunks (checked on the window
the hf engine uses, as if the run had not been cut); greedy tokens (up to the last float bits:
each chunk prefills its context afresh instead of reusing the KV cache). What it does not keep:
a seeded request longer than one chunk draws each later chunk from a seed derived from its seed
and position, so it is reproducible but not the sample a whole run would draw; and each chunk
pays a fresh prefill of its context.

`WeightGate`: a chunked response spans several batches, so a weight push waits until the
responses in flight are done and holds new ones meanwhile: every response comes from one set
of weights.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

from beacon.engines.base import ChatTokenizer, GenerationRequest, GenerationResult, TopLogprob

Submit = Callable[[GenerationRequest], Awaitable[GenerationResult]]


async def generate_in_chunks(
    submit: Submit, request: GenerationRequest, chunk_tokens: int, tokenizer: ChatTokenizer | None
) -> GenerationResult:
    """`request` generated `chunk_tokens` new tokens per `submit` (see the module docstring).

    A request without `prompt_ids` (an engine without a tokenizer), `chunk_tokens=0` or a
    request no longer than one chunk goes to `submit` whole.
    """
    sampling = request.sampling
    whole = chunk_tokens < 1 or request.prompt_ids is None or tokenizer is None
    if whole or sampling.max_new_tokens <= chunk_tokens:
        return await submit(request)
    prompt = list(request.prompt_ids)
    tokens: list[int] = []
    logprobs: list[float] | None = []
    tops: list[list[TopLogprob]] | None = []
    while True:
        offset = len(tokens)
        chunk = replace(
            sampling,
            max_new_tokens=min(chunk_tokens, sampling.max_new_tokens - offset),
            seed=_chunk_seed(sampling.seed, offset),
        )
        part = await submit(replace(request, prompt_ids=prompt + tokens, sampling=chunk))
        if part.finish_reason == "error":
            return part
        if offset:
            part = _stop_across_boundary(tokenizer, tokens, part, sampling.stop)
        tokens += part.token_ids
        logprobs = None if logprobs is None or part.logprobs is None else logprobs + part.logprobs
        tops = None if tops is None or part.top_logprobs is None else tops + part.top_logprobs
        if part.finish_reason == "stop" or len(tokens) >= sampling.max_new_tokens:
            return GenerationResult(
                text=tokenizer.decode(tokens),
                token_ids=tokens,
                logprobs=logprobs,
                top_logprobs=tops if sampling.top_logprobs else None,
                finish_reason=part.finish_reason,
                stop_reason=part.stop_reason,
                prompt_ids=prompt,
            )


def _chunk_seed(seed: int | None, offset: int) -> int | None:
    """The first chunk keeps the request's seed (its tokens are a whole run's); later chunks get
    one derived from (seed, offset), so a rerun draws the same tokens."""
    if seed is None or offset == 0:
        return seed
    return random.Random(f"{seed}/{offset}").getrandbits(63)


def _stop_across_boundary(
    tokenizer: ChatTokenizer, before: list[int], part: GenerationResult, stops: list[str]
) -> GenerationResult:
    """`part` cut at the first stop string that spans the boundary with the tokens `before` it.

    The hf engine looks for stop strings in the decoded last `window` generated tokens at each
    step (`_StopStrings`); a chunk's own check sees only its own tokens, so for its first
    `window` steps this looks again over the same window a whole run would have seen. A match
    it finds is the one a whole run would have ended at (the chunk's own window is part of it).
    """
    if not stops:
        return part
    window = max(len(s.encode()) for s in stops) + 2
    carried = before[-window:]
    joined = carried + part.token_ids
    for step in range(1, min(window, len(part.token_ids)) + 1):
        end = len(carried) + step
        tail = tokenizer.decode(joined[max(0, end - window) : end])
        hit = next((s for s in stops if s in tail), None)
        if hit is not None:
            return replace(
                part,
                token_ids=part.token_ids[:step],
                logprobs=None if part.logprobs is None else part.logprobs[:step],
                top_logprobs=None if part.top_logprobs is None else part.top_logprobs[:step],
                finish_reason="stop",
                stop_reason=hit,
            )
    return part


class WeightGate:
    """Responses share it, a weight update holds it alone; an update waiting for it lets no new
    response start, so a stream of requests cannot keep an update out forever."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._active = 0
        self._updating = False

    @asynccontextmanager
    async def generating(self) -> AsyncIterator[None]:
        """Held for a whole response; waits while an update is pending or running."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._updating)
            self._active += 1
        try:
            yield
        finally:
            async with self._changed:
                self._active -= 1
                self._changed.notify_all()

    @asynccontextmanager
    async def updating(self) -> AsyncIterator[None]:
        """Held while new weights are checked and copied, with no response in flight."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._updating)
            self._updating = True
            try:
                await self._changed.wait_for(lambda: self._active == 0)
            except BaseException:  # cancelled while waiting: let responses start again
                self._updating = False
                self._changed.notify_all()
                raise
        try:
            yield
        finally:
            async with self._changed:
                self._updating = False
                self._changed.notify_all()

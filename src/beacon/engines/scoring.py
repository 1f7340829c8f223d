"""Teacher-forced scoring: the log-probs of given tokens after a context, for any engine.

A `ScoreRequest` is a context (a `GenerationRequest`: prompt ids + images, or messages), a
`continuation` of token ids forced after it, and `candidates`, token ids whose log-probs are
wanted at the position right after the continuation. `ScoreResult.logprobs[i]` is
log p(continuation[i] | context, continuation[:i]) and `candidate_logprobs[j]` is
log p(candidates[j] | context, continuation): log softmax of the model's raw logits
(temperature 1, nothing suppressed), the same quantity as `GenerationResult.logprobs`.

Two ways to get them, behind `ascore(engine, requests)`:

- Engines with a `score(requests)` method (`hf`) compute them exactly, in one forward pass over
  context + continuation per request.
- Any other engine is asked through `generate`, which every engine has: one request per
  continuation position (context + continuation[:j] as an assistant prefix, one new token,
  greedy, `top_logprobs=TOP_LOGPROBS`), and a token's log-prob is read from that position's
  top list. This is what an OpenAI-compatible server can give (`beacon serve`, vLLM with its
  `return_token_ids` / `return_tokens_as_token_ids` extensions).

What is not covered on the `generate` path: a token outside a position's top `TOP_LOGPROBS`
(OpenAI's and vLLM's default cap is 20) is not seen; its log-prob is None. Such a token has
probability at most that of the 20th, below 1/21. Engines that return no top log-probs by
token id (hosted APIs, the offline `vllm` engine) get an error result that says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from beacon.engines.base import Engine, GenerationRequest, GenerationResult, SamplingParams

TOP_LOGPROBS = 20  # OpenAI's and vLLM's (max_logprobs) cap on top_logprobs


@dataclass
class ScoreRequest:
    """Score `continuation` after the context of `request`, and `candidates` right after it."""

    request: GenerationRequest
    continuation: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)


@dataclass
class ScoreResult:
    """Log-probs for one `ScoreRequest`; None where the engine could not see the token (a
    server's top list left it out). On failure `error` says why and the lists are empty."""

    logprobs: list[float | None] = field(default_factory=list)
    candidate_logprobs: list[float | None] = field(default_factory=list)
    error: str | None = None


async def ascore(engine: Engine, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
    """Results in request order: exact with the engine's `score`, else through `generate`."""
    score = getattr(engine, "score", None)
    if score is not None:
        return await asyncio.to_thread(score, list(requests))
    return list(await asyncio.gather(*(_score_by_generation(engine, r) for r in requests)))


async def _score_by_generation(engine: Engine, request: ScoreRequest) -> ScoreResult:
    """One one-token request per continuation position; log-probs from the top lists."""
    if engine.tokenizer is None:
        return ScoreResult(
            error=f"engine {engine.name!r} has no local tokenizer, so the prefix tokens cannot be "
            "named; set engine.tokenizer=/path/to/the/model's/processor"
        )
    positions = len(request.continuation) + 1
    asks = [_prefix_request(engine, request, j) for j in range(positions)]
    agenerate = getattr(engine, "agenerate", None)
    if agenerate is not None:
        results = await agenerate(asks)
    else:
        results = await asyncio.to_thread(engine.generate, asks)
    tops = []
    for j, result in enumerate(results):
        problem = _unusable(engine, result, request.continuation[:j])
        if problem is not None:
            return ScoreResult(error=problem)
        tops.append({t.token_id: t.logprob for t in result.top_logprobs[0]})
    return ScoreResult(
        logprobs=[tops[j].get(token) for j, token in enumerate(request.continuation)],
        candidate_logprobs=[tops[-1].get(token) for token in request.candidates],
    )


def _prefix_request(engine: Engine, request: ScoreRequest, j: int) -> GenerationRequest:
    """The context followed by the first `j` continuation tokens, as ids and as an assistant
    prefix (for servers, which take messages)."""
    base, prefix = request.request, request.continuation[:j]
    messages = list(base.messages)
    if prefix:
        text = engine.tokenizer.decode(prefix)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    sampling = SamplingParams(temperature=0.0, max_new_tokens=1, top_logprobs=TOP_LOGPROBS)
    return GenerationRequest(
        messages=messages,
        sampling=sampling,
        prompt_ids=None if base.prompt_ids is None else [*base.prompt_ids, *prefix],
        images=base.images,
        continue_final_message=bool(prefix),
    )


def _unusable(engine: Engine, result: GenerationResult, prefix: list[int]) -> str | None:
    """Why `result` cannot give the log-probs after `prefix`, or None when it can."""
    if result.finish_reason == "error":
        return f"scoring request failed: {result.error}"
    if not result.top_logprobs:
        return (
            f"engine {engine.name!r} returned no top log-probs by token id; scoring needs an "
            "OpenAI-compatible server with vLLM's extensions (vLLM or `beacon serve`, "
            "return_tokens_as_token_ids) or an engine with a score method (hf)"
        )
    seen = result.prompt_ids
    if prefix and seen is not None and seen[-len(prefix) :] != prefix:
        return (
            f"the server tokenized the assistant prefix as {seen[-len(prefix) :]}, not "
            f"{prefix}; its chat template or tokenizer differs from engine.tokenizer"
        )
    return None

"""The critic's `send` over HTTP: one OpenAI-compatible chat call per attempt, and the raw log.

`HttpCritic` is the `send` that `beacon.revue.ask_critic` takes: it sends a `CriticRequest`
through the `openai` engine (the one chat-body builder, reply parser and HTTP client), with the
request's `response_format` (strict json_schema), temperature (0) and output cap
(`max_tokens`), images as base64 PNG data URLs, and returns the reply's message text. Any
transport error, error status or reply without a message raises `CriticHTTPError`; `ask_critic`
turns that into a retry and, when retries run out, into the base-teacher fallback. The engine
makes one attempt with no time limit of its own: per-attempt time limits and retries are
`ask_critic`'s (revue.critic_timeout_s, revue.critic_retries), so they are the same for every
sender, and a reply that does not parse is retried like a transport error.

`ExchangeLog` writes every raw exchange `ask_critic` reports (request with images replaced by
their ids, raw reply text or None, error, attempt) as one JSON line, with the step and group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from beacon.engines.base import GenerationRequest, SamplingParams, VllmExtensions
from beacon.engines.openai import OpenAIEngine
from beacon.jsonl import JsonlWriter, repair_jsonl
from beacon.revue.critic import CriticRequest


class CriticHTTPError(RuntimeError):
    """The critic endpoint could not be reached, answered with an error status, or sent a reply
    without message text."""


def critic_generation_request(request: CriticRequest) -> GenerationRequest:
    """The engine request of one critic request: its messages, temperature, output cap and
    response format; no log-probs (the critic's text is all that is read)."""
    sampling = SamplingParams(
        temperature=request.temperature, max_new_tokens=request.max_tokens, logprobs=False
    )
    return GenerationRequest(request.messages, sampling, response_format=request.response_format)


class HttpCritic:
    """`send` for `ask_critic`: posts to an OpenAI-compatible endpoint (critic.base_url)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        vllm_extensions: VllmExtensions = "off",
    ) -> None:
        self.engine = OpenAIEngine(
            base_url,
            model,
            api_key,
            timeout_s=None,
            max_retries=0,
            vllm_extensions=vllm_extensions,
        )

    def request_body(self, request: CriticRequest) -> dict[str, Any]:
        """The chat-completions body `__call__` sends for `request`."""
        return self.engine.request_body(critic_generation_request(request))

    async def __call__(self, request: CriticRequest) -> str:
        [result] = await self.engine.agenerate([critic_generation_request(request)])
        if result.error is not None:
            raise CriticHTTPError(f"critic {result.error}")
        return result.text

    async def aclose(self) -> None:
        """Close the HTTP client (a later call opens a new one)."""
        self.engine.close()


class ExchangeLog:
    """Append-only JSONL of every raw critic exchange, one durable line per attempt.

    Written through `beacon.jsonl.JsonlWriter` (thread-safe, fsynced), after cutting a line torn
    by a killed run, so a resumed run appends to whole lines. Exchanges of steps redone after a
    resume are logged again, each with its step: the log records attempts, not results.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_jsonl(path)
        self._lines = JsonlWriter(path)

    def writer(self, **context: Any) -> Any:
        """An `on_exchange` callback that adds `context` (step, group) to every record."""

        def write(record: dict[str, Any]) -> None:
            self._lines.write(json.dumps({**context, **record}, ensure_ascii=False, default=str))

        return write

    def close(self) -> None:
        """Close the file; every line written is already durable."""
        self._lines.close()

"""The critic's `send` over HTTP: one OpenAI-compatible chat call per attempt, and the raw log.

`HttpCritic` is the `send` that `beacon.revue.ask_critic` takes: it posts a `CriticRequest` to
`{base_url}/chat/completions` with the request's `response_format` (strict json_schema),
temperature (0) and output cap (`max_tokens`), images as base64 PNG data URLs, and returns the
reply's message text. Any transport error, non-2xx status or reply without a message raises;
`ask_critic` turns that into a retry and, when retries run out, into the base-teacher fallback.
Per-attempt time limits and retries are `ask_critic`'s (revue.critic_timeout_s,
revue.critic_retries), so they are the same for every sender.

One `httpx.AsyncClient` per event loop (httpx clients cannot cross loops): the trainer asks the
critic from one background loop, so in practice it is one client for the run.

`ExchangeLog` writes every raw exchange `ask_critic` reports (request with images replaced by
their ids, raw reply text or None, error, attempt) as one JSON line, with the step and group.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx

from beacon.engines.openai import openai_message
from beacon.revue.critic import CriticRequest


class CriticHTTPError(RuntimeError):
    """The critic endpoint answered with an error status or a reply without message text."""


def critic_body(request: CriticRequest, model: str) -> dict[str, Any]:
    """The OpenAI chat-completions body of one critic request."""
    return {
        "model": model,
        "messages": [openai_message(m) for m in request.messages],
        "response_format": request.response_format,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }


def reply_text(body: Any) -> str:
    """The first choice's message content; raises `CriticHTTPError` when there is none."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise CriticHTTPError(
            f"critic reply has no choices[0].message: {str(body)[:300]}"
        ) from None
    if not isinstance(content, str):
        raise CriticHTTPError(f"critic reply content is {type(content).__name__}, not text")
    return content


class HttpCritic:
    """`send` for `ask_critic`: posts to an OpenAI-compatible endpoint (critic.base_url)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._clients: dict[int, httpx.AsyncClient] = {}

    def _client(self) -> httpx.AsyncClient:
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self._clients:
            # No httpx timeout: ask_critic's per-attempt wait_for is the one time limit.
            self._clients[loop_id] = httpx.AsyncClient(headers=self.headers, timeout=None)
        return self._clients[loop_id]

    async def __call__(self, request: CriticRequest) -> str:
        response = await self._client().post(self.url, json=critic_body(request, self.model))
        if response.status_code >= 400:
            raise CriticHTTPError(f"critic HTTP {response.status_code}: {response.text[:300]}")
        try:
            body = response.json()
        except ValueError:
            raise CriticHTTPError(f"critic reply is not JSON: {response.text[:300]}") from None
        return reply_text(body)

    async def aclose(self) -> None:
        """Close the client of the running loop (call from that loop)."""
        client = self._clients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()


class ExchangeLog:
    """Append-only JSONL of every raw critic exchange (thread-safe; one line per attempt)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def writer(self, **context: Any) -> Any:
        """An `on_exchange` callback that adds `context` (step, group) to every record."""

        def write(record: dict[str, Any]) -> None:
            line = json.dumps({**context, **record}, ensure_ascii=False, default=str)
            with self._lock, self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

        return write

"""One app factory for OpenAI-compatible servers that answer from a script, not a model.

The scripted synth expert (`beacon.data.scripted_expert`, also the demo's expert), the scripted
critic (`beacon.train.opd.scripted_critic`) and the test servers that play a judge or a failing
endpoint all speak the chat-completions protocol the way vLLM and `beacon serve` do;
`chat_app(reply, model_name)` serves its routes once, so each of them writes only its answer:

- ``GET /health`` (200) and ``GET /v1/models`` (one card named `model_name`);
- ``POST /v1/chat/completions``: `reply(body)` gets the parsed JSON body and returns a `str` or
  `ChatReply`, sent as a chat-completions body (with vLLM's `stop_reason`), or a starlette
  `Response`, sent as it is (fault tests: 500s, HTML, malformed bodies). It may be a coroutine
  function (to sleep, for timeout tests). A `KeyError`, `TypeError` or `ValueError` it raises,
  or a body that is not a JSON object, is an OpenAI-shaped 400 naming the problem.

Two options make one play a hosted API: `api_key` (every route but `/health` needs it as a
Bearer token, `beacon.engines.serve_guard.BearerAuth`) and `openai_fields_only` (a request field
outside `OPENAI_CHAT_FIELDS`, the public API's, is a 400 in OpenAI's words, "Unrecognized request
argument supplied: top_k").

`image_urls` and `decode_data_url` read the images a client sent in a request's messages.

Not `beacon serve`: that one serves a real engine behind vLLM's checks (API key, body and pixel
caps, weight pushes). These servers read no files and hold no secrets but a test's key; run them
with
`beacon.engines.serve.run_app_in_thread`, which binds to 127.0.0.1.
"""

from __future__ import annotations

import base64
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from PIL import Image

from beacon.engines.serve_guard import BearerAuth, error_response
from beacon.engines.serve_protocol import add_info_routes
from beacon.images import load_image


@dataclass(frozen=True)
class ChatReply:
    """What a scripted server says, and the stop string it stopped at (None: it just ended).

    As vLLM does, a matched stop string is left out of `text` and named in `stop_reason`.
    """

    text: str
    stop_reason: str | None = None


OPENAI_CHAT_FIELDS = frozenset(
    {
        "model", "messages", "temperature", "top_p", "n", "stop", "max_tokens",
        "max_completion_tokens", "seed", "logprobs", "top_logprobs", "response_format", "stream",
        "stream_options", "presence_penalty", "frequency_penalty", "logit_bias", "user", "tools",
        "tool_choice", "parallel_tool_calls", "metadata", "store", "service_tier", "modalities",
        "audio", "prediction", "reasoning_effort", "web_search_options", "functions",
        "function_call",
    }
)  # fmt: skip
"""The request fields of the public OpenAI chat-completions API."""

Answer = str | ChatReply | Response
ReplyFn = Callable[[dict[str, Any]], Answer | Awaitable[Answer]]


def chat_app(
    reply: ReplyFn,
    model_name: str,
    title: str | None = None,
    *,
    api_key: str | None = None,
    openai_fields_only: bool = False,
) -> FastAPI:
    """A FastAPI app serving `reply` as the OpenAI chat-completions protocol (module docstring)."""
    app = FastAPI(
        title=title or f"beacon {model_name}", docs_url=None, redoc_url=None, openapi_url=None
    )
    if api_key is not None:
        app.add_middleware(BearerAuth, api_key=api_key)

    add_info_routes(app, model_name)

    @app.post("/v1/chat/completions")
    async def chat(raw: Request) -> Response:
        try:
            body = await raw.json()
            if not isinstance(body, dict):
                raise TypeError(f"the body is a JSON {type(body).__name__}, not an object")
            unknown = sorted(set(body) - OPENAI_CHAT_FIELDS) if openai_fields_only else []
            if unknown:
                return error_response(f"Unrecognized request argument supplied: {unknown[0]}", 400)
            answer = reply(body)
            if inspect.isawaitable(answer):
                answer = await answer
        except (KeyError, TypeError, ValueError) as exc:
            return error_response(str(exc), 400)
        if isinstance(answer, Response):
            return answer
        if isinstance(answer, str):
            answer = ChatReply(answer)
        return JSONResponse(chat_completion(answer, body.get("model") or model_name))

    return app


def chat_completion(reply: ChatReply, model: str) -> dict[str, Any]:
    """An OpenAI chat-completions body holding `reply` (with vLLM's `stop_reason`)."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "logprobs": None,
                "finish_reason": "stop",
                "stop_reason": reply.stop_reason,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def image_urls(messages: list[dict[str, Any]]) -> list[str]:
    """The URLs of every image part of a chat, in order (the `openai` engine sends data URLs)."""
    urls = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "image_url":
                urls.append(part["image_url"]["url"])
    return urls


def decode_data_url(url: str) -> Image.Image:
    """The RGB image a base64 data URL carries (`beacon.images.load_image`'s pixel cap holds)."""
    return load_image(base64.b64decode(url.split(",", 1)[1]))

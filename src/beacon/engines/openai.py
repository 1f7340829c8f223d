"""The `openai` engine: any OpenAI-compatible chat endpoint (vLLM serve, SGLang, `beacon serve`,
hosted APIs), many requests at once.

- One `beacon.engines.http.HttpClient` (aiohttp, on its own event loop thread) for the engine's
  life, with at most `concurrency` requests in flight. `agenerate` (asyncio callers on any loop,
  e.g. the agent loop's episode tasks) and `generate` (blocking, any thread) both submit to it,
  so connections are reused across turns and episodes. `close()` closes it.
- Images go as base64 PNG data URLs inside the messages. Each image is encoded once and the URL
  cached for as long as the image lives: an episode resends its whole context every turn, and
  re-encoding the same pictures each time cost more than everything else the harness did. The
  PNG is `beacon.images.png_bytes`, shared with the image store, so an image the episode has
  stored is not encoded a second time for its first request.
- Each attempt has a `timeout_s` limit (None: none, for callers such as the critic that bound
  the attempt themselves). Connection errors, timeouts, HTTP 408/429/5xx, and malformed replies
  are retried up to `max_retries` times with exponential backoff and jitter (honouring
  `Retry-After`; `beacon.engines.http.with_retries`); other 4xx are not retried. A request that
  still fails becomes a result with finish_reason="error" and the reason; `generate` never
  raises.
- `GenerationRequest.response_format` (OpenAI's structured output, e.g. the critic's strict
  json_schema) is sent as it is.
- vLLM's extra request fields (`VLLM_FIELDS`: `return_token_ids`, `top_k`, a final message
  continued with `continue_final_message: true, add_generation_prompt: false`) are sent per
  `vllm_extensions`: "on" always, "off" never (a hosted API that refuses unknown fields), and
  "auto" (default) until the server answers 400 with a message that names one of them; then
  the engine logs one warning, resends that request without them, and sends none for the rest
  of its life. With "on", such a 400 is an error that says the server cannot give token ids
  (training rollouts need them; they use "on").

Text and ids: when the server returns token ids, `token_ids` are those ids (stop-string and
end-of-sequence tokens included, as vLLM returns them) and, if a local `tokenizer` is given,
`text = tokenizer.decode(token_ids)`, so text and ids always agree. Otherwise `text` is the
server's text and `token_ids` is empty. Servers leave a matched stop string out of the text by
default; when the reply names it (vLLM's `stop_reason`) and the text lacks it, it is appended,
so `text` always ends with the stop string that ended it, as with the local engines. A hosted API
that does not say which stop string matched gives the text as it came.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from beacon.engines.base import (
    DEFAULT_CONCURRENCY,
    ChatTokenizer,
    GenerationRequest,
    GenerationResult,
    Message,
    TopLogprob,
    VllmExtensions,
)
from beacon.engines.http import (
    Fatal,
    GaveUp,
    HttpClient,
    HttpReply,
    Retryable,
    RetryPolicy,
    with_retries,
)
from beacon.engines.tokenizer import is_image_part
from beacon.images import PerImage, encode_png, load_image, png_bytes

logger = logging.getLogger(__name__)

VLLM_FIELDS = (
    "return_token_ids",
    "return_tokens_as_token_ids",
    "top_k",
    "continue_final_message",
    "add_generation_prompt",
)
"""Request fields of vLLM's that the public OpenAI API does not define (`vllm_extensions`)."""


@dataclass
class _Reply:
    text: str
    finish_reason: str
    stop_reason: str | None
    token_ids: list[int] | None
    logprobs: list[float] | None
    prompt_ids: list[int] | None
    top_logprobs: list[list[TopLogprob]] | None = None


class OpenAIEngine:
    """Chat completions over HTTP; see the module docstring for retries and token ids."""

    name = "openai"
    remote = True  # the server batches continuously: the agent loop sends each turn at once

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        timeout_s: float | None = 300.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        tokenizer: ChatTokenizer | None = None,
        extra_body: dict[str, Any] | None = None,
        vllm_extensions: VllmExtensions = "auto",
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency} must be at least 1")
        if vllm_extensions not in ("auto", "on", "off"):
            raise ValueError(f"vllm_extensions={vllm_extensions!r}: choose auto, on or off")
        if max_retries < 0:
            raise ValueError(f"max_retries={max_retries} must be >= 0 (0 means one attempt)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retry = RetryPolicy(max_retries, backoff_s, max_backoff_s)
        self.tokenizer = tokenizer
        self.extra_body = dict(extra_body or {})
        self.vllm_extensions = vllm_extensions
        self._extensions_refused = False  # "auto" and the server refused one: none from now on
        self._urls: PerImage[str] = PerImage(_png_data_url)
        self._client: HttpClient | None = None
        self._client_lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Blocking `agenerate`; works from any thread, also one whose event loop is running."""
        bodies = [self._body_or_error(r) for r in requests]
        return self._http().run(self._all(bodies))

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order, at most `concurrency` requests in flight (engine-wide)."""
        bodies = [self._body_or_error(r) for r in requests]
        return await self._http().arun(self._all(bodies))

    def close(self) -> None:
        """Close the HTTP client and stop its event loop thread (a later call starts anew)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _http(self) -> HttpClient:
        with self._client_lock:
            if self._client is None:
                self._client = HttpClient(
                    self.base_url, self.api_key, self.timeout_s, self.concurrency
                )
                # an engine dropped without `close()` still closes its session (and stops its
                # thread) when collected or at exit, not with aiohttp's "Unclosed" warnings
                weakref.finalize(self, self._client.close)
            return self._client

    def _body_or_error(self, request: GenerationRequest) -> dict[str, Any] | GenerationResult:
        try:
            return self.request_body(request)
        except Exception as exc:  # e.g. an unreadable image: this request fails, not the batch
            return _error(f"cannot build the request: {type(exc).__name__}: {exc}")

    async def _all(self, bodies: list[dict[str, Any] | GenerationResult]) -> list[GenerationResult]:
        """Runs on the client thread's loop."""
        return list(await asyncio.gather(*(self._one(body) for body in bodies)))

    async def _one(self, body: dict[str, Any] | GenerationResult) -> GenerationResult:
        if isinstance(body, GenerationResult):
            return body
        client = self._client
        if client is None:
            raise RuntimeError("the openai engine was closed while a request was running")
        async with client.limit:
            try:
                return self._result(
                    await with_retries(lambda: self._post(client, body), self.retry, _log_retry)
                )
            except GaveUp as exc:
                return _error(str(exc))

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body for one request."""
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [openai_message(m, self._data_url) for m in request.messages],
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_new_tokens,
            "n": 1,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        if s.logprobs or s.top_logprobs:
            body["logprobs"] = True
        if s.top_logprobs:
            body["top_logprobs"] = s.top_logprobs
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if self.sends_extensions:
            body["return_token_ids"] = True
            if s.top_logprobs:  # alternatives as "token_id:<id>", so they map to ids exactly
                body["return_tokens_as_token_ids"] = True
            if s.top_k > 0:
                body["top_k"] = s.top_k
            if request.continue_final_message:
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
        body.update(self.extra_body)
        return body

    @property
    def sends_extensions(self) -> bool:
        """Whether a request built now carries `VLLM_FIELDS` (see `vllm_extensions`)."""
        return self.vllm_extensions == "on" or (
            self.vllm_extensions == "auto" and not self._extensions_refused
        )

    async def _post(self, client: HttpClient, body: dict[str, Any]) -> _Reply:
        if self._extensions_refused:  # a body built before the server refused them, or a retry
            body = {key: value for key, value in body.items() if key not in VLLM_FIELDS}
        reply = await client.post(f"{self.base_url}/chat/completions", json.dumps(body).encode())
        refused = _refused_fields(reply, body) if self.vllm_extensions != "off" else []
        if refused and self.vllm_extensions == "auto":
            self._refuse_extensions(refused, reply)
            return await self._post(client, body)
        if refused:
            raise Fatal(
                f"HTTP 400: {reply.error_message()} (the server does not take vLLM's request "
                f"field {refused[0]!r}, and this engine sends them because it needs token ids "
                "(vllm_extensions=on); serve the model with vLLM or beacon serve, or use "
                "vllm_extensions=auto/off where text-only replies will do)"
            )
        reply.raise_for_status()
        try:
            return parse_reply(reply.json())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise Retryable(f"malformed reply: {type(exc).__name__}: {exc}") from exc

    def _refuse_extensions(self, refused: list[str], reply: HttpReply) -> None:
        """Send no `VLLM_FIELDS` from now on; say so once (runs on the client's one loop)."""
        if self._extensions_refused:
            return
        self._extensions_refused = True
        logger.warning(
            "%s refused vLLM's request field %s (HTTP 400: %s); sending none of %s for the rest "
            "of this run: replies are text only (no token ids), top_k is not applied, and a "
            "continued turn starts a new message. Set vllm_extensions=off to skip the first try.",
            self.base_url,
            ", ".join(refused),
            reply.error_message()[:200],
            ", ".join(VLLM_FIELDS),
        )

    def _result(self, reply: _Reply) -> GenerationResult:
        token_ids = reply.token_ids or []
        if token_ids and self.tokenizer is not None:
            text = self.tokenizer.decode(token_ids)
        else:
            text = reply.text
            if reply.stop_reason and not text.endswith(reply.stop_reason):
                text += reply.stop_reason
        logprobs = reply.logprobs
        if token_ids and logprobs is not None and len(logprobs) != len(token_ids):
            logger.warning(
                "server returned %d log-probs for %d tokens; dropping them",
                len(logprobs),
                len(token_ids),
            )
            logprobs = None
        return GenerationResult(
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            top_logprobs=reply.top_logprobs,
            finish_reason="length" if reply.finish_reason == "length" else "stop",
            stop_reason=reply.stop_reason,
            prompt_ids=reply.prompt_ids,
        )

    def _data_url(self, source: Any) -> str:
        """A PIL image's URL is made once while the image lives; other sources (paths, bytes)
        are encoded every time: they are not what an episode resends."""
        if isinstance(source, Image.Image):
            return self._urls(source)
        return image_data_url(source)


def _refused_fields(reply: HttpReply, body: dict[str, Any]) -> list[str]:
    """The `VLLM_FIELDS` of `body` that a 400 reply names (OpenAI's words: "Unrecognized
    request argument supplied: top_k")."""
    if reply.status != 400:
        return []
    message = reply.error_message() + " " + reply.body[:2000].decode("utf-8", "replace")
    return [name for name in VLLM_FIELDS if name in body and name in message]


def parse_reply(body: Any) -> _Reply:
    """The parts of a chat-completions reply Beacon uses; KeyError/TypeError if malformed."""
    choice = body["choices"][0]
    finish = choice["finish_reason"]
    if finish not in ("stop", "length", "tool_calls", "eos"):
        raise ValueError(f"unexpected finish_reason {finish!r}")
    content = choice["message"].get("content") or ""
    if not isinstance(content, str):
        raise TypeError(f"message content is {type(content).__name__}, not a string")
    stop_reason = choice.get("stop_reason")
    logprobs = top = None
    if choice.get("logprobs") and choice["logprobs"].get("content") is not None:
        entries = choice["logprobs"]["content"]
        logprobs = [float(entry["logprob"]) for entry in entries]
        top = _top_logprobs(entries)
    token_ids = choice.get("token_ids")
    return _Reply(
        text=content,
        finish_reason=finish,
        stop_reason=stop_reason if isinstance(stop_reason, str) else None,
        token_ids=[int(t) for t in token_ids] if token_ids is not None else None,
        logprobs=logprobs,
        prompt_ids=body.get("prompt_token_ids"),
        top_logprobs=top,
    )


def _top_logprobs(entries: list[dict[str, Any]]) -> list[list[TopLogprob]] | None:
    """The alternatives of every position when the server named them by id ("token_id:<id>",
    vLLM's `return_tokens_as_token_ids`); None when it did not list them or named them by text
    (a text cannot be mapped back to one id)."""
    if not entries or not entries[0].get("top_logprobs"):
        return None
    out = []
    for entry in entries:
        position = []
        for alt in entry.get("top_logprobs") or []:
            token = str(alt["token"])
            if not token.startswith("token_id:"):
                return None
            position.append(TopLogprob(int(token.removeprefix("token_id:")), float(alt["logprob"])))
        out.append(position)
    return out


def openai_message(message: Message, data_url: Any = None) -> dict[str, Any]:
    """A Beacon message with its images as base64 PNG data URLs (`data_url(image)` makes one;
    the default encodes every time)."""
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    to_url = data_url or image_data_url
    parts = []
    for part in content:
        if is_image_part(part) and "image" in part:
            parts.append({"type": "image_url", "image_url": {"url": to_url(part["image"])}})
        else:
            parts.append(dict(part))
    return {**message, "content": parts}


def image_data_url(source: Any) -> str:
    """`data:image/png;base64,...` for a PIL image, path or bytes."""
    png = encode_png(load_image(source))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _png_data_url(image: Image.Image) -> str:
    """The data URL of an RGB image, from its shared PNG (`image_data_url` decodes and copies
    first, which `load_image` would do for an RGB image only to encode the same pixels)."""
    if image.mode != "RGB":
        return image_data_url(image)
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")


def _log_retry(delay: float, error: Exception) -> None:
    logger.info("retrying in %.2f s after: %s", delay, error)


def _error(message: str) -> GenerationResult:
    logger.warning("openai engine request failed: %s", message)
    return GenerationResult(text="", finish_reason="error", error=message)

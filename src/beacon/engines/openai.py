"""The `openai` engine: any OpenAI-compatible chat endpoint (vLLM serve, SGLang, `beacon serve`,
hosted APIs), many requests at once.

- One `aiohttp.ClientSession` for the engine's life, on the engine's own event loop thread,
  with at most `concurrency` requests in flight. `agenerate` (asyncio callers on any loop, e.g.
  the agent loop's episode tasks) and `generate` (blocking, any thread) both submit to it, so
  connections are reused across turns and episodes. `close()` closes the session. aiohttp, not
  httpx: a request with a 110 KB image cost the client 0.56 ms of CPU against httpx's 1.1 (at
  1 or 64 in flight, `benchmarks/eval_throughput.py` sends two per episode), and the harness's
  CPU is what limits an eval's episodes per second on a small machine.
- Images go as base64 PNG data URLs inside the messages. Each image is encoded once and the URL
  cached for as long as the image lives: an episode resends its whole context every turn, and
  re-encoding the same pictures each time cost more than everything else the harness did. The
  PNG is `beacon.images.png_bytes`, shared with the image store, so an image the episode has
  stored is not encoded a second time for its first request.
- Each attempt has a `timeout_s` limit. Connection errors, timeouts, HTTP 429 and 5xx, and
  malformed replies are retried up to `max_retries` times with exponential backoff and jitter
  (honouring `Retry-After`); other 4xx are not retried. A request that still fails becomes a
  result with finish_reason="error" and the reason; `generate` never raises.
- With `vllm_extensions=True` (default) the body asks for vLLM's `return_token_ids` and
  log-probs, and continues a final message with `continue_final_message: true,
  add_generation_prompt: false`. Set it False for hosted APIs that reject unknown fields.

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
import random
import threading
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from PIL import Image

from beacon.engines.base import (
    ChatTokenizer,
    GenerationRequest,
    GenerationResult,
    Message,
    TopLogprob,
)
from beacon.engines.tokenizer import is_image_part
from beacon.images import PerImage, png_bytes

logger = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_JSON_HEADERS = {"Content-Type": "application/json"}


class _Retryable(Exception):
    """A failure worth another attempt; `retry_after` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Fatal(Exception):
    """A failure another attempt would repeat (a 4xx other than 408/429)."""


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
        concurrency: int = 16,
        timeout_s: float = 300.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        tokenizer: ChatTokenizer | None = None,
        extra_body: dict[str, Any] | None = None,
        vllm_extensions: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency} must be at least 1")
        if max_retries < 0:
            raise ValueError(f"max_retries={max_retries} must be >= 0 (0 means one attempt)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.tokenizer = tokenizer
        self.extra_body = dict(extra_body or {})
        self.vllm_extensions = vllm_extensions
        self._urls: PerImage[str] = PerImage(_png_data_url)
        self._client: _ClientThread | None = None
        self._client_lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Blocking `agenerate`; works from any thread, also one whose event loop is running."""
        bodies = [self._body_or_error(r) for r in requests]
        return self._thread().submit(self._all(bodies)).result()

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order, at most `concurrency` requests in flight (engine-wide)."""
        bodies = [self._body_or_error(r) for r in requests]
        return await asyncio.wrap_future(self._thread().submit(self._all(bodies)))

    def close(self) -> None:
        """Close the HTTP client and stop its event loop thread (a later call starts anew)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.stop()

    def _thread(self) -> _ClientThread:
        with self._client_lock:
            if self._client is None:
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                proxy = env_proxy(self.base_url)
                self._client = _ClientThread(headers, self.timeout_s, self.concurrency, proxy)
                # an engine dropped without `close()` still closes its session (and stops its
                # thread) when collected or at exit, not with aiohttp's "Unclosed" warnings
                weakref.finalize(self, self._client.stop)
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
        client, limit = self._client_or_fail()
        attempt = 0
        async with limit:
            while True:
                try:
                    return self._result(await self._post(client, body))
                except _Fatal as exc:
                    return _error(str(exc))
                except _Retryable as exc:
                    if attempt >= self.max_retries:
                        return _error(f"{exc} (gave up after {attempt + 1} attempts)")
                    delay = self._delay(attempt, exc.retry_after)
                    logger.info("retrying in %.2f s after: %s", delay, exc)
                    await asyncio.sleep(delay)
                    attempt += 1

    def _client_or_fail(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        thread = self._client
        if thread is None:
            raise RuntimeError("the openai engine was closed while a request was running")
        return thread.session, thread.limit

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
        if self.vllm_extensions:
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

    async def _post(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> _Reply:
        url = f"{self.base_url}/chat/completions"
        try:
            async with session.post(url, data=json.dumps(body), headers=_JSON_HEADERS) as response:
                status, headers, raw = response.status, response.headers, await response.read()
        except asyncio.TimeoutError as exc:  # also aiohttp's own timeouts (its subclasses)
            raise _Retryable(f"timed out after {self.timeout_s} s: {type(exc).__name__}") from exc
        except aiohttp.ClientError as exc:
            raise _Retryable(f"connection error: {type(exc).__name__}: {exc}") from exc
        if status in RETRY_STATUS:
            raise _Retryable(f"HTTP {status}: {_error_message(raw)}", _retry_after(headers))
        if status >= 400:
            raise _Fatal(f"HTTP {status}: {_error_message(raw)}")
        try:
            return parse_reply(json.loads(raw))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable(f"malformed reply: {type(exc).__name__}: {exc}") from exc

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

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter in [50%, 100%]; a server's Retry-After wins if larger."""
        base = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        delay = base * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return delay


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


class _ClientThread:
    """An event loop in a daemon thread that owns one `aiohttp.ClientSession` and the in-flight
    limit; coroutines from any thread or loop run on it through `submit`."""

    def __init__(
        self, headers: dict[str, str], timeout_s: float, concurrency: int, proxy: str | None
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._stopped = False
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="beacon-openai", daemon=True
        )
        self._thread.start()

        async def open_session() -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
            session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                connector=aiohttp.TCPConnector(limit=concurrency),
                proxy=proxy,
            )
            return session, asyncio.Semaphore(concurrency)

        self.session, self.limit = self.submit(open_session()).result()

    def submit(self, coroutine: Any) -> Any:
        """A concurrent.futures.Future of `coroutine` run on this loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def stop(self) -> None:
        """Close the session and end the thread; a second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        if threading.current_thread() is self._thread:  # collected on its own loop: no waiting
            self.loop.create_task(self.session.close()).add_done_callback(
                lambda _: self.loop.stop()
            )
            return
        try:
            self.submit(self.session.close()).result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self.loop.close()


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (`HTTP_PROXY` / `HTTPS_PROXY`, unless
    `NO_PROXY` exempts its host), read once per client as httpx and the openai SDK do.
    aiohttp's own `trust_env` reads the environment and ~/.netrc again for every request:
    ~5% of the harness's CPU with 64 episodes in flight."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy is None or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy


def image_data_url(source: Any) -> str:
    """`data:image/png;base64,...` for a PIL image, path or bytes."""
    from beacon.images import encode_png, load_image

    png = encode_png(load_image(source))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _png_data_url(image: Image.Image) -> str:
    """The data URL of an RGB image, from its shared PNG (`image_data_url` decodes and copies
    first, which `load_image` would do for an RGB image only to encode the same pixels)."""
    if image.mode != "RGB":
        return image_data_url(image)
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")


def _error_message(raw: bytes) -> str:
    """The server's own message from an error reply's body (OpenAI's `{"error": {"message"}}`,
    else a `message` field), else the start of the body."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:500].decode("utf-8", "replace")
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message"))
    if isinstance(body, dict):
        return str(body.get("message", body))[:500]
    return str(body)[:500]


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error(message: str) -> GenerationResult:
    logger.warning("openai engine request failed: %s", message)
    return GenerationResult(text="", finish_reason="error", error=message)

"""Beacon's one HTTP client stack: an aiohttp session on an event loop thread of its own, and the
one retry loop.

Every client Beacon runs sends through `HttpClient`: the `openai` engine (served policies,
experts, critics, answer judges), the OPD teacher client and the weight push. aiohttp, not
httpx: a chat request with a 110 KB image cost aiohttp 0.56 ms of client CPU against httpx's
1.1 ms (at 1 or 64 requests in flight; `benchmarks/eval_throughput.py` sends two per episode),
and the harness's CPU is what limits an eval's episodes per second on a small machine. One stack
means one set of timeouts, proxy rules and error texts, and one dependency.

- The session lives on a daemon thread's event loop, so blocking callers in any thread
  (`HttpClient.run`) and coroutines on any other loop (`HttpClient.arun`) share its
  connections; `close()` (or garbage collection of the owner, see `OpenAIEngine`) ends it.
- `timeout_s` bounds each attempt as a whole (None: no limit, for callers that bound the
  attempt themselves). An API key goes as `Authorization: Bearer <key>` on every request.
- The proxy the environment names for the server (`HTTP_PROXY` / `HTTPS_PROXY`, unless
  `NO_PROXY` exempts its host) is read once per client, as httpx and the openai SDK do;
  aiohttp's own `trust_env` reads the environment and ~/.netrc for every request, ~5% of the
  harness's CPU with 64 episodes in flight.
- `with_retries` is the retry loop: connection errors, timeouts, HTTP 408/429/5xx and whatever
  the caller marks `Retryable` (a malformed reply) are retried up to `max_retries` times with
  exponential backoff and jitter, honouring `Retry-After`; other 4xx are `Fatal`.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""Statuses worth another attempt: the server was busy, slow or briefly down."""


class Retryable(Exception):
    """A failure worth another attempt; `retry_after` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Fatal(Exception):
    """A failure another attempt would repeat (a 4xx other than 408/429)."""


class GaveUp(Exception):
    """The request failed for good; the message says why and after how many attempts."""


@dataclass(frozen=True)
class HttpReply:
    """A reply as received: any status, the raw body (the caller decides what is an error)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)

    def error_message(self) -> str:
        """The server's own message from an error reply (OpenAI's `{"error": {"message"}}`,
        else a `message` field), else the start of the body."""
        try:
            body = self.json()
        except ValueError:
            return self.body[:500].decode("utf-8", "replace")
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            return str(body["error"].get("message"))
        if isinstance(body, dict):
            return str(body.get("message", body))[:500]
        return str(body)[:500]

    def raise_for_status(self) -> None:
        """`Retryable` for 408/429/5xx (with the server's Retry-After), `Fatal` for other 4xx."""
        if self.status in RETRY_STATUS:
            raise Retryable(
                f"HTTP {self.status}: {self.error_message()}", _retry_after(self.headers)
            )
        if self.status >= 400:
            raise Fatal(f"HTTP {self.status}: {self.error_message()}")


class HttpClient:
    """One aiohttp session and an in-flight limit on an event loop thread of their own; every
    Beacon HTTP client sends through one (see the module docstring)."""

    def __init__(
        self,
        server_url: str,
        api_key: str | None = None,
        timeout_s: float | None = 300.0,
        concurrency: int = 16,
    ) -> None:
        self.timeout_s = timeout_s
        self.loop = asyncio.new_event_loop()
        self._stopped = False
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="beacon-http", daemon=True
        )
        self._thread.start()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        proxy = env_proxy(server_url)

        async def open_session() -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
            session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                connector=aiohttp.TCPConnector(limit=concurrency),
                proxy=proxy,
            )
            return session, asyncio.Semaphore(concurrency)

        self.session, self.limit = self.run(open_session())

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Any:
        """A concurrent.futures.Future of `coroutine` run on this client's loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on this client's loop and wait for it (any thread, also one whose
        own event loop is running)."""
        return self.submit(coroutine).result()

    async def arun(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await `coroutine` run on this client's loop from any other loop; cancelling the
        caller cancels it there too."""
        return await asyncio.wrap_future(self.submit(coroutine))

    async def post(
        self, url: str, data: bytes, content_type: str = "application/json"
    ) -> HttpReply:
        """POST `data` (on this client's loop); `Retryable` on a timeout or connection error."""
        return await self._send("POST", url, data, {"Content-Type": content_type})

    def post_blocking(
        self, url: str, data: bytes, content_type: str = "application/json"
    ) -> HttpReply:
        """`post` from synchronous code; `Retryable` on a timeout or connection error."""
        return self.run(self.post(url, data, content_type))

    async def get(self, url: str) -> HttpReply:
        """GET `url` (on this client's loop); `Retryable` on a timeout or connection error."""
        return await self._send("GET", url, None, {})

    async def _send(
        self, method: str, url: str, data: bytes | None, headers: Mapping[str, str]
    ) -> HttpReply:
        try:
            async with self.session.request(method, url, data=data, headers=headers) as response:
                return HttpReply(response.status, response.headers, await response.read())
        except asyncio.TimeoutError as exc:  # also aiohttp's own timeouts (its subclasses)
            raise Retryable(f"timed out after {self.timeout_s} s: {type(exc).__name__}") from exc
        except aiohttp.ClientError as exc:
            raise Retryable(f"connection error: {type(exc).__name__}: {exc}") from exc

    def get_blocking(self, url: str) -> HttpReply:
        """`get` from synchronous code; `Retryable` on a timeout or connection error."""
        return self.run(self.get(url))

    def close(self) -> None:
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

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently `with_retries` tries again."""

    max_retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter in [50%, 100%]; a server's Retry-After wins if
        larger (capped at `max_backoff_s` too)."""
        base = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        delay = base * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return delay


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    on_retry: Callable[[float, Exception], None] | None = None,
) -> T:
    """`await attempt()` until it returns, retrying `Retryable` failures per `policy`.

    Raises `GaveUp` with the last failure's text: at once for `Fatal`, after
    ``1 + max_retries`` attempts for `Retryable`. `on_retry(delay, error)` hears of each retry.
    """
    tries = 0
    while True:
        try:
            return await attempt()
        except Fatal as exc:
            raise GaveUp(str(exc)) from exc
        except Retryable as exc:
            if tries >= policy.max_retries:
                raise GaveUp(f"{exc} (gave up after {tries + 1} attempts)") from exc
            delay = policy.delay(tries, exc.retry_after)
            if on_retry is not None:
                on_retry(delay, exc)
            await asyncio.sleep(delay)
            tries += 1


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (`HTTP_PROXY` / `HTTPS_PROXY`), or None when
    there is none or `NO_PROXY` exempts its host."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy is None or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None

"""`ShardedTransport`: an httpx transport whose connections sit in several small pools.

httpcore's connection pool walks all of its connections (a readability syscall for each idle
one) on every request and release, so its CPU per request grows with its size. Measured at 64
requests in flight against a local server: one pool of 64 connections cost ~12 ms of CPU per
request, eight pools of eight ~1.7 ms, about what a single request costs alone.
"""

from __future__ import annotations

from typing import Any

import httpx

POOL_CONNECTIONS = 8  # connections per httpcore pool


class ShardedTransport(httpx.AsyncBaseTransport):
    """Pools of at most `POOL_CONNECTIONS` connections for `connections` in all; a request goes
    to the pool with the fewest requests in flight (module docstring for why).

    Meant for one event loop (the openai engine's client thread), so the counts need no lock.
    """

    def __init__(self, connections: int) -> None:
        shards = -(-connections // POOL_CONNECTIONS)
        size = -(-connections // shards)  # shards x size >= connections: never a queue
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        self._pools = [httpx.AsyncHTTPTransport(limits=limits) for _ in range(shards)]
        self._busy = [0] * shards

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        shard = min(range(len(self._pools)), key=self._busy.__getitem__)
        self._busy[shard] += 1
        try:
            response = await self._pools[shard].handle_async_request(request)
        except BaseException:
            self._busy[shard] -= 1
            raise
        response.stream = _OnClose(response.stream, lambda: self._release(shard))
        return response

    def _release(self, shard: int) -> None:
        self._busy[shard] -= 1

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _OnClose(httpx.AsyncByteStream):
    """A response body that calls `on_close` once when closed (its connection is free then)."""

    def __init__(self, stream: Any, on_close: Any) -> None:
        self._stream, self._on_close = stream, on_close

    async def __aiter__(self) -> Any:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._on_close is not None:
                self._on_close, on_close = None, self._on_close
                on_close()

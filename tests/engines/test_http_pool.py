"""ShardedTransport: small connection pools, requests spread over them, counts released."""

from __future__ import annotations

import asyncio

import httpx

from beacon.engines.http_pool import POOL_CONNECTIONS, ShardedTransport
from beacon.engines.serve import run_app_in_thread


async def _slow_ok(scope: dict, receive: object, send: object) -> None:
    """A raw ASGI app: every request is answered after 0.5 s."""
    if scope["type"] != "http":
        return
    await asyncio.sleep(0.5)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_requests_spread_over_small_pools_and_release_them() -> None:
    handle = run_app_in_thread(_slow_ok)
    transport = ShardedTransport(20)

    async def main() -> tuple[list[httpx.Response], list[int]]:
        async with httpx.AsyncClient(transport=transport) as client:
            requests = [client.get(handle.base_url + "/x") for _ in range(20)]
            running = asyncio.gather(*requests)
            await asyncio.sleep(0.1)  # all 20 are waiting for their replies now
            in_flight = list(transport._busy)
            return await running, in_flight

    try:
        responses, in_flight = asyncio.run(main())
    finally:
        handle.stop()
    assert [r.text for r in responses] == ["ok"] * 20
    assert len(transport._pools) == 3  # 20 connections: 3 pools of 7, none over 8
    assert sorted(in_flight) == [6, 7, 7] and max(in_flight) <= POOL_CONNECTIONS
    assert transport._busy == [0, 0, 0]  # every response closed gave its slot back

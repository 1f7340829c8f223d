"""Rollouts on `beacon serve` servers: spread requests over them, push new weights to all.

`push_weights` serialises the trainer's state dict once as safetensors (tensors cloned to CPU,
so tied weights travel as two entries) and POSTs it to every server's
`/beacon/update_weights`; a server that refuses is an error naming it, since a stale server
would sample from an old policy. `SpreadEngine` hands each request to the next engine in turn,
so the agent loop sees one engine; an episode's turns may land on different servers, which is
fine because every server holds the same weights.

What is not covered: vLLM servers (they need vLLM's own weight-update path), sharded pushes of
models too large for one request body.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from beacon.engines.base import GenerationRequest, GenerationResult


def weights_payload(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """The state dict as safetensors bytes (contiguous CPU copies; shared storage split)."""
    from safetensors.torch import save

    return save({k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()})


def push_weights(base_urls: Sequence[str], payload: bytes, timeout_s: float = 300.0) -> None:
    """POST `payload` to every server (base URLs end in /v1, as the openai engine takes them)."""
    import httpx

    for base_url in base_urls:
        url = base_url.rstrip("/").removesuffix("/v1") + "/beacon/update_weights"
        reply = httpx.post(url, content=payload, timeout=timeout_s)
        if reply.status_code != 200:
            raise RuntimeError(
                f"weight push to {url} failed ({reply.status_code}: {reply.text[:300]}); the "
                "server would sample from a stale policy. Check rollout.servers and that each "
                "one is `beacon serve` with the hf engine"
            )


class SpreadEngine:
    """Round-robin over several engines (one per server), as one engine."""

    name = "spread"

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("SpreadEngine needs at least one engine (rollout.servers is empty)")
        self.engines = list(engines)
        self.tokenizer = self.engines[0].tokenizer
        self._next = itertools.cycle(self.engines)

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        chunks = await asyncio.gather(*(next(self._next).agenerate([r]) for r in requests))
        return [result for chunk in chunks for result in chunk]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return asyncio.run(self.agenerate(requests))

    def close(self) -> None:
        for engine in self.engines:
            engine.close()

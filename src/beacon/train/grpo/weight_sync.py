"""The rollout engine of `beacon train grpo`, and how new weights reach it.

`rollout_engine` builds the in-process `hf` engine (weights copied in with `load_weights`), or,
with `rollout.servers`, one `openai` engine per `beacon serve` process behind a `SpreadEngine`
(weights pushed over HTTP).

`push_weights` serialises the trainer's state dict once as safetensors (tensors cloned to CPU,
so tied weights travel as two entries) and POSTs it, as `application/octet-stream` with the
servers' API key (`rollout.server_api_key_env`), to every server's `/beacon/update_weights`
(servers started with `--allow-weight-updates`); a server that refuses is an error naming it,
since a stale server would sample from an old policy. `SpreadEngine` hands each request to the
next engine in turn, so the agent loop sees one engine; an episode's turns may land on different
servers, which is fine because every server holds the same weights.

What is not covered: vLLM servers (they need vLLM's own weight-update path), sharded pushes of
models too large for one request body.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from beacon.engines.base import GenerationRequest, GenerationResult

if TYPE_CHECKING:
    from beacon.train.grpo.config import GRPOConfig


def weights_payload(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """The state dict as safetensors bytes (contiguous CPU copies; shared storage split)."""
    from safetensors.torch import save

    return save({k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()})


def push_weights(
    base_urls: Sequence[str], payload: bytes, timeout_s: float = 300.0, api_key: str | None = None
) -> None:
    """POST `payload` to every server (base URLs end in /v1, as the openai engine takes them)."""
    import httpx

    headers = {"Content-Type": "application/octet-stream"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    for base_url in base_urls:
        url = base_url.rstrip("/").removesuffix("/v1") + "/beacon/update_weights"
        reply = httpx.post(url, content=payload, headers=headers, timeout=timeout_s)
        if reply.status_code != 200:
            raise RuntimeError(
                f"weight push to {url} failed ({reply.status_code}: {reply.text[:300]}); the "
                "server would sample from a stale policy. Check rollout.servers, "
                "rollout.server_api_key_env, and that each one is `beacon serve` with the hf "
                "engine and --allow-weight-updates"
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


def rollout_engine(cfg: GRPOConfig, device: str) -> tuple[Any, Callable[[dict[str, Any]], None]]:
    """The engine rollouts run on, and how new weights reach it."""
    if not cfg.rollout.servers:
        from beacon.engines.hf import HFEngine

        engine = HFEngine(cfg.model.path, device=device, batch_size=cfg.rollout.engine_batch_size)
        return engine, engine.load_weights
    from beacon.engines.openai import OpenAIEngine
    from beacon.engines.tokenizer import HFTokenizer

    tokenizer = HFTokenizer.from_pretrained(cfg.model.path)
    key = server_api_key(cfg.rollout.server_api_key_env)
    engines = [
        OpenAIEngine(
            base_url=url,
            model=cfg.rollout.server_model,
            api_key=key,
            tokenizer=tokenizer,
            concurrency=cfg.rollout.concurrency,
            timeout_s=cfg.rollout.server_timeout_s,
        )
        for url in cfg.rollout.servers
    ]
    servers, timeout = cfg.rollout.servers, cfg.rollout.server_timeout_s
    return SpreadEngine(engines), lambda sd: push_weights(
        servers, weights_payload(sd), timeout, key
    )


def server_api_key(env: str | None) -> str | None:
    """The key in environment variable `env` (None: no key); an unset variable is an error, as
    every request would then be refused with 401."""
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise ValueError(
            f"rollout.server_api_key_env={env!r} but ${env} is not set; export it with the key "
            "the servers were started with (beacon serve --api-key)"
        )
    return key

"""The rollout engine of `beacon train grpo`, and how new weights reach it.

`rollout_engine` builds the in-process `hf` engine (weights copied in with `load_weights`), or,
with `rollout.servers`, one `openai` engine per `beacon serve` process behind a
`beacon.engines.spread.SpreadEngine`, new weights pushed to every server with
`beacon.engines.weights.push_weights` and the servers' API key (`rollout.server_api_key_env`),
cast to each server's dtypes and in bodies of at most `rollout.push_chunk_mb` of tensors.

What is not covered: vLLM servers (they need vLLM's own weight-update path).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beacon.train.grpo.config import GRPOConfig


def rollout_engine(cfg: GRPOConfig, device: str) -> tuple[Any, Callable[[dict[str, Any]], None]]:
    """The engine rollouts run on, and how new weights reach it."""
    if not cfg.rollout.servers:
        from beacon.engines.hf import HFEngine

        engine = HFEngine(cfg.model.path, device=device, batch_size=cfg.rollout.engine_batch_size)
        return engine, engine.load_weights
    from beacon.engines.openai import OpenAIEngine
    from beacon.engines.spread import SpreadEngine
    from beacon.engines.tokenizer import HFTokenizer
    from beacon.engines.weights import push_weights

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
    chunk_bytes = cfg.rollout.push_chunk_mb << 20
    return SpreadEngine(engines), lambda sd: push_weights(servers, sd, timeout, key, chunk_bytes)


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

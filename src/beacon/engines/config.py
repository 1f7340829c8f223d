"""Settings of the engine that generates (the `engine:` section of every job's config).

No setting holds a key: a server's key comes from the environment variable `api_key_env` names,
or from a command's `--api-key` flag, so no config.yaml Beacon writes can hold one.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from beacon.config import StrictModel, env_var_name, refuse_secret
from beacon.engines.base import DEFAULT_CONCURRENCY, VllmExtensions
from beacon.engines.registry import TINY_MODEL, engine_names


class EngineConfig(StrictModel):
    """Which engine generates, and how to reach or load it (built by `build_engine`)."""

    name: str = Field(
        "hf", description="hf (transformers, local), openai (any compatible server), vllm"
    )
    model: str = Field(
        TINY_MODEL, description='local path or hub name; "tiny" builds the built-in tiny model'
    )
    base_url: str = Field(
        "http://127.0.0.1:8000/v1", description="openai engine: the server's /v1 address"
    )
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="openai engine: environment variable holding the server's API key (sent "
        "as a Bearer token; unset or null: no key); beacon eval/run --api-key wins over it",
    )
    vllm_extensions: VllmExtensions = Field(
        "auto",
        description="openai engine: send vLLM's extra fields (return_token_ids, top_k, "
        "continue_final_message): on, off (hosted APIs), auto (until a 400 names one)",
    )
    tokenizer: str | None = Field(
        None, description="openai engine: local processor path for token ids"
    )
    device: str = Field("auto", description="hf/vllm: cpu, cuda or auto")
    batch_size: int = Field(8, ge=1, description="hf: requests per forward batch")
    concurrency: int | None = Field(
        None,
        ge=1,
        description="openai: requests in flight; null: as many as the caller's episodes in "
        f"flight (beacon eval's concurrency), {DEFAULT_CONCURRENCY} where it has none",
    )
    timeout_s: float = Field(300.0, description="openai: per-request timeout")
    max_retries: int = Field(4, description="openai: retries on 5xx, 429 and connection errors")

    _env_name = field_validator("api_key_env")(env_var_name)

    @model_validator(mode="before")
    @classmethod
    def _no_key(cls, data: Any) -> Any:
        return refuse_secret(
            data,
            "export it in the variable this section's api_key_env names (OPENAI_API_KEY by "
            "default), or pass it to beacon eval / beacon run with --api-key",
        )

    @field_validator("name")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in engine_names():
            raise ValueError(f"unknown engine {value!r}; choose one of {', '.join(engine_names())}")
        return value

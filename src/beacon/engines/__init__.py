"""Generation engines behind one interface (`beacon.engines.base.Engine`).

`load_engine(name, model, **kw)` builds one by name: "hf" (transformers, CPU or GPU), "vllm"
(offline vLLM, GPU; needs `pip install beacon-vr[vllm]`) or "openai" (any OpenAI-compatible
endpoint; `model` is the served model name and `base_url` is required). Heavy libraries are
imported only when an engine is built, so `import beacon.engines` stays cheap and works without
vLLM.
"""

from __future__ import annotations

from typing import Any

from beacon.engines.base import (
    ChatTokenizer,
    Engine,
    GenerationRequest,
    GenerationResult,
    Message,
    SamplingParams,
)

ENGINES = ("hf", "vllm", "openai")

__all__ = [
    "ENGINES",
    "ChatTokenizer",
    "Engine",
    "GenerationRequest",
    "GenerationResult",
    "Message",
    "SamplingParams",
    "load_engine",
]


def load_engine(name: str, model: str, **kwargs: Any) -> Engine:
    """Build the engine `name` for `model` (a checkpoint path, or the served name for openai).

    Keyword arguments go to the engine's constructor (e.g. device, batch_size, base_url).
    """
    if name == "hf":
        from beacon.engines.hf import HFEngine

        return HFEngine(model, **kwargs)
    if name == "vllm":
        from beacon.engines.vllm import VLLMEngine

        return VLLMEngine(model, **kwargs)
    if name == "openai":
        from beacon.engines.openai import OpenAIEngine

        if "base_url" not in kwargs:
            raise ValueError(
                "the openai engine needs base_url, e.g. "
                "load_engine('openai', 'my-model', base_url='http://localhost:8000/v1')"
            )
        return OpenAIEngine(model=model, **kwargs)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")

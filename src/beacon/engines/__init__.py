"""Generation engines behind one interface (`beacon.engines.base.Engine`).

Engines are built through one registry (`beacon.engines.registry`): ``build_engine(cfg)`` from an
:class:`EngineConfig`, or ``load_engine(name, model, **kw)`` by name: "hf" (transformers, CPU or
GPU), "vllm" (offline vLLM, GPU; needs `pip install beacon-vr[vllm]`) or "openai" (any
OpenAI-compatible endpoint; `model` is the served model name and `base_url` is required). Heavy
libraries are imported only when an engine is built, so `import beacon.engines` stays cheap and
works without vLLM.
"""

from __future__ import annotations

from beacon.engines.base import (
    ChatTokenizer,
    Engine,
    GenerationRequest,
    GenerationResult,
    Message,
    SamplingParams,
)
from beacon.engines.config import TINY_MODEL, EngineConfig
from beacon.engines.registry import build_engine, engine_names, load_engine, register_engine

__all__ = [
    "TINY_MODEL",
    "ChatTokenizer",
    "Engine",
    "EngineConfig",
    "GenerationRequest",
    "GenerationResult",
    "Message",
    "SamplingParams",
    "build_engine",
    "engine_names",
    "load_engine",
    "register_engine",
]

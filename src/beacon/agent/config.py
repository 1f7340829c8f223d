"""Settings of the agent loop (the `agent:` section of every job's config)."""

from __future__ import annotations

from pydantic import Field, field_validator

from beacon.agent.formats import FORMATS
from beacon.config import StrictModel
from beacon.engines.config import EngineConfig


class GateConfig(StrictModel):
    """The inference gate of `gated` mode (beacon.agent.gate): p_tool decides the path."""

    threshold: float = Field(
        0.7, ge=0, le=1, description="gated: p_tool below this runs notool, at or above it tool"
    )
    engine: EngineConfig | None = Field(
        None,
        description="gated: a separate small model that scores p_tool (--set "
        "agent.gate.engine.model=PATH); null: the policy scores it",
    )


class AgentConfig(StrictModel):
    """Episode limits, sampling and the tool protocol."""

    format: str = Field(
        "thyme", description="tool protocol: thyme (<code> tags) or tool_call (Qwen JSON)"
    )
    max_turns: int = Field(
        6, ge=1, description="assistant generation turns per episode (a turn ends at a tool call)"
    )
    max_tool_calls: int = Field(
        4, ge=0, description="executed tool calls per episode; one more ends it (max_tool_calls)"
    )
    max_new_tokens_per_turn: int = Field(1024, ge=1, description="new tokens per generation turn")
    max_total_new_tokens: int = Field(
        4096, ge=1, description="new tokens per episode, all turns: generated ones (max_tokens)"
    )
    max_context_tokens: int | None = Field(
        None,
        ge=1,
        description="tokens of the whole episode: prompt, generated and observation tokens, "
        "images' tokens included; the episode ends when it is spent (context_length); null: no "
        "limit",
    )
    max_images: int | None = Field(
        None,
        ge=1,
        description="images in an episode's context, the input images included; a tool call "
        "whose images would pass it ends the episode unread (max_images); null: no limit",
    )
    temperature: float = Field(0.0, ge=0, description="sampling temperature of text; 0 is greedy")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    top_k: int = Field(0, ge=0, description="top-k sampling; 0 disables it")
    code_temperature: float | None = Field(
        None, ge=0, description="code segments' own temperature (GRPO-ATS: 0.0); null: temperature"
    )
    gate: GateConfig = Field(
        default_factory=GateConfig, description="the inference gate of gated mode"
    )
    freeze_heap: bool = Field(
        True,
        description="keep what is alive when episodes start streaming out of full garbage "
        "collections (gc.freeze) while they stream; false: every collection walks it "
        "(docs/agent.md, 'Throughput')",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"unknown format {value!r}; choose one of {sorted(FORMATS)}")
        return value

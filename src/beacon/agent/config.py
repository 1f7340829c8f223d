"""Settings of the agent loop (the `agent:` section of every job's config)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AgentConfig:
    """Episode limits, sampling and the tool protocol."""

    format: str = "thyme"  # tool protocol: thyme (<code> tags) or tool_call (Qwen JSON)
    max_turns: int = 6  # assistant generation turns per episode (a turn ends at a tool call)
    max_tool_calls: int = 4  # executed tool calls per episode; one more ends it (max_tool_calls)
    max_new_tokens_per_turn: int = 1024  # new tokens per generation turn
    max_total_new_tokens: int = 4096  # new tokens per episode, all turns together
    temperature: float = 0.0  # sampling temperature of reasoning text; 0 is greedy
    top_p: float = 1.0  # nucleus sampling
    top_k: int = 0  # top-k sampling; 0 disables it
    code_temperature: float | None = None  # code segments' own temperature (GRPO-ATS: 0.0)

    def validate(self) -> list[str]:
        """Cross-field problems, reported with every other config problem at once."""
        from beacon.agent.formats import FORMATS

        problems = []
        if self.format not in FORMATS:
            problems.append(
                f"format: unknown format {self.format!r}; choose one of {sorted(FORMATS)}"
            )
        for name in ("max_turns", "max_new_tokens_per_turn", "max_total_new_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.max_tool_calls < 0:
            problems.append(f"max_tool_calls: must be >= 0, got {self.max_tool_calls}")
        if self.temperature < 0 or (
            self.code_temperature is not None and self.code_temperature < 0
        ):
            problems.append("temperature and code_temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p: must be in (0, 1], got {self.top_p}")
        return problems

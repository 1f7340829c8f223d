"""The `beacon train grpo` config: model and optimisation (shared with SFT), rollouts, agent,
sandbox and the GRPO components' `rl:` section.

Every setting is declared once with its default and description (STYLE.md §5); `extra="forbid"`
turns a typo into an error naming the key.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from beacon.agent.config import AgentConfig
from beacon.config import StrictModel
from beacon.rl.config import RLConfig
from beacon.sandbox.config import SandboxConfig
from beacon.train.core.config import HealthConfig, ModelConfig, TrainConfig


class RolloutConfig(StrictModel):
    """Which prompts each step rolls out, and how many responses each gets."""

    benchmark: str = Field("synth", description="Registered benchmark the prompts come from.")
    path: str | None = Field(
        None, description="Local file or folder of the benchmark (None: hub, or generated)."
    )
    limit: int = Field(64, ge=1, description="Prompts in the RL set (the benchmark's first N).")
    data_seed: int = Field(0, description="Seed of the benchmark load (synth generation).")
    prompts_per_step: int = Field(4, ge=1, description="Prompts (groups) per optimizer step.")
    group_size: int = Field(8, ge=1, description="G: responses sampled per prompt.")
    concurrency: int = Field(32, ge=1, description="Episodes in flight in the agent loop.")
    engine_batch_size: int = Field(16, ge=1, description="In-process hf engine: rows per batch.")
    servers: list[str] = Field(
        default_factory=list,
        description="Base URLs (ending in /v1) of `beacon serve` processes to roll out on, "
        "requests spread over them, new weights pushed to each after every step; empty: an "
        "in-process hf engine.",
    )
    server_model: str = Field("beacon", description="Served model name of the servers.")
    server_timeout_s: float = Field(300.0, gt=0, description="Per-request timeout on servers.")
    server_api_key_env: str | None = Field(
        None,
        description="Environment variable holding the servers' API key (`beacon serve "
        "--api-key`), sent with every request and weight push; None: no key.",
    )
    push_chunk_mb: int = Field(
        512,
        ge=1,
        description="Weight pushes to rollout.servers: MiB of tensors per request body (a "
        "larger tensor goes alone); the server applies a push once all its bodies arrived.",
    )
    hints: str | None = Field(
        None,
        description="HGCE hint cache: JSONL of {benchmark, sample_id, hint} rows (the data "
        "pipeline writes it).",
    )
    synth_region_hints: bool = Field(
        True,
        description="HGCE without a cached hint: use the item's scripted answer-free hint "
        "(metadata['hint'] of synth_demo items; for synth, `synth_region_hint` naming the "
        "evidence region).",
    )

    @model_validator(mode="after")
    def _check(self) -> RolloutConfig:
        if self.group_size < 2:
            raise ValueError(
                f"rollout.group_size={self.group_size} gives every group zero advantage (GRPO "
                "needs >= 2 samples per prompt). Set --set rollout.group_size=8."
            )
        return self


class GRPOConfig(StrictModel):
    """GRPO with NAAR and HGCE (beacon.md §4). `train.global_batch_size` is not read: a step
    trains on the kept responses of `rollout.prompts_per_step` groups."""

    model: ModelConfig
    train: TrainConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollouts.")
    agent: AgentConfig = Field(
        default_factory=lambda: AgentConfig(temperature=1.0),
        description="Episode limits and sampling of the rollouts (temperature 1 by default).",
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Code sandbox.")
    rl: RLConfig = Field(default_factory=RLConfig, description="Rewards, filter, loss, HGCE.")
    health: HealthConfig = Field(default_factory=HealthConfig, description="Health alarms.")

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.rl.loss.kl_coef > 0:
            raise ValueError(
                f"rl.loss.kl_coef={self.rl.loss.kl_coef}: the GRPO recipe has no reference model "
                "yet; set --set rl.loss.kl_coef=0 (the paper's setting)"
            )
        return self

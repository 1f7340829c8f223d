"""The `beacon train grpo` config: model and optimisation (shared with SFT), rollouts, agent,
sandbox and the GRPO components' `rl:` section.

Every setting is declared once with its default and description (STYLE.md §5); `extra="forbid"`
turns a typo into an error naming the key.
`RLConfig` is the `rl:` section; `--set rl.naar.code_reward=0.5` overrides one value.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from beacon.agent.config import AgentConfig
from beacon.config import StrictModel
from beacon.sandbox.config import SandboxConfig
from beacon.train.core.config import (
    HealthConfig,
    ModelConfig,
    ServedRolloutConfig,
    TrainConfig,
)
from beacon.train.grpo.rewards import REWARDS


class NAARConfig(StrictModel):
    """The necessity-aware adaptive reward (docs/rl.md, NAAR): what a correct tool episode earns
    when a text-only answer in its group was also right."""

    code_reward: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="R_adaptive of a correct code-using response when some text-only response "
        "of its group is correct (paper: 0.25).",
    )


class BlogConfig(StrictModel):
    """The blog reward's bonuses and penalty by item difficulty and mode (docs/rl.md)."""

    alpha: float = Field(0.5, ge=0.0, description="α: bonus for easy ∧ no tool ∧ correct.")
    beta: float = Field(0.5, ge=0.0, description="β: bonus for hard ∧ tool ∧ correct.")
    gamma: float = Field(
        0.2,
        ge=0.0,
        description="γ: penalty for easy ∧ tool (any correctness); large values cause 'tool "
        "phobia' (watch P[tool | hard]).",
    )


class FilterConfig(StrictModel):
    """Which groups carry no learning signal and are dropped before the loss."""

    rule: FilterRule = Field(
        "adaptive",
        description="adaptive: drop groups whose adaptive rewards are all equal (all wrong, or "
        "all correct in one mode); strict: drop when either the accuracy or the mode signal is "
        "missing; off: keep every group that has reward variance.",
    )


class LossConfig(StrictModel):
    """The clipped policy-gradient loss: clip range, KL and how token losses are averaged."""

    clip_eps: float = Field(0.2, gt=0.0, description="ε of the clipped ratio, lower side.")
    clip_eps_high: float | None = Field(
        None, gt=0.0, description="ε of the upper side (DAPO's clip-higher); None = clip_eps."
    )
    kl_coef: float = Field(
        0.0, ge=0.0, description="β of the k3 KL penalty to the reference model; 0 = off."
    )
    aggregation: Aggregation = Field(
        "sequence_mean",
        description="sequence_mean: GRPO's 1/G Σ_i 1/|o_i| Σ_t (DeepSeekMath Eq. 3); "
        "token_mean: Σ over all tokens / token count (DAPO).",
    )


class HGCEConfig(StrictModel):
    """Hint-guided rollouts for all-wrong groups (HGCE), and the checks on the hints."""

    enabled: bool = Field(False, description="Rescue all-wrong groups with an answer-free hint.")
    check_leaks: bool = Field(
        True, description="Refuse hints that contain the reference answer (hint_leaks)."
    )


class RLConfig(StrictModel):
    """The `rl:` section: reward, group filter, loss and HGCE, shared by every RL trainer."""

    reward: str = Field("naar", description="Reward variant: naar (paper), binary, blog.")
    format_weight: float = Field(
        0.1, ge=0.0, le=1.0, description="w_f in R = w_f·R_format + (1 - w_f)·R_adaptive."
    )
    naar: NAARConfig = Field(default_factory=NAARConfig, description="NAAR constants.")
    blog: BlogConfig = Field(default_factory=BlogConfig, description="Blog variant α, β, γ.")
    filter: FilterConfig = Field(default_factory=FilterConfig, description="Group filtering.")
    advantage_eps: float = Field(
        1e-6, gt=0.0, description="ε in (r - mean) / (std + ε) of the group advantage."
    )
    loss: LossConfig = Field(default_factory=LossConfig, description="Clipped GRPO objective.")
    hgce: HGCEConfig = Field(default_factory=HGCEConfig, description="Hint-guided expansion.")
    truncated: Truncated = Field(
        "wrong",
        description="A response a budget cut off before it answered (max_turns, max_tool_calls, "
        "max_tokens, context_length, max_images): 'wrong' scores it as a wrong answer (the "
        "paper); 'mask' leaves it out of its group's rewards, advantages and loss (Mini-o3's "
        "over-turn masking), so long explorations are not punished for the budget.",
    )

    @model_validator(mode="after")
    def _known_reward(self) -> RLConfig:

        if self.reward not in REWARDS:
            raise ValueError(
                f"rl.reward={self.reward!r} is not a registered reward; choose one of "
                f"{sorted(REWARDS)} (--set rl.reward=naar)"
            )
        return self


class RolloutConfig(ServedRolloutConfig):
    """Which prompts each step rolls out, how many responses each gets, and on which engine
    (`ServedRolloutConfig`)."""

    benchmark: str = Field("synth", description="Registered benchmark the prompts come from.")
    path: str | None = Field(
        None, description="Local file or folder of the benchmark (None: hub, or generated)."
    )
    limit: int = Field(64, ge=1, description="Prompts in the RL set (the benchmark's first N).")
    data_seed: int = Field(0, description="Seed of the benchmark load (synth generation).")
    prompts_per_step: int = Field(4, ge=1, description="Prompts (groups) per optimizer step.")
    group_size: int = Field(8, ge=1, description="G: responses sampled per prompt.")
    engine_batch_size: int = Field(16, ge=1, description="In-process hf engine: rows per batch.")
    hints: str | None = Field(
        None,
        description="HGCE hint cache: JSONL of {benchmark, sample_id, hint} rows (`beacon "
        "data hints` writes it); a row with accepted false or a null hint is never shown.",
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


Aggregation = Literal["sequence_mean", "token_mean"]
FilterRule = Literal["adaptive", "strict", "off"]
Truncated = Literal["wrong", "mask"]

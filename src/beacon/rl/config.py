"""Settings of the GRPO components (the `rl:` section of a GRPO training config).

Pydantic v2 models with `extra="forbid"`: an unknown key is an error, and each
`Field(description=...)` is the setting's documentation. The trainer nests `RLConfig` in its own
config; `--set rl.naar.code_reward=0.5` overrides one value.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from beacon.config import StrictModel

Aggregation = Literal["sequence_mean", "token_mean"]
FilterRule = Literal["adaptive", "strict", "off"]
Truncated = Literal["wrong", "mask"]


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
        from beacon.rl.rewards import REWARDS

        if self.reward not in REWARDS:
            raise ValueError(
                f"rl.reward={self.reward!r} is not a registered reward; choose one of "
                f"{sorted(REWARDS)} (--set rl.reward=naar)"
            )
        return self

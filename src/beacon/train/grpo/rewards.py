"""Rewards of one rollout group: NAAR (the paper), accuracy-only ("binary") and the blog variant.

Every variant is a function `(group, config) -> list[float]` registered by name (`REWARDS`), and
the trainer picks one with `rl.reward=naar|binary|blog`. All of them return the total reward

    R(y_i; G) = w_f · R_format(y_i) + (1 - w_f) · R_adaptive(y_i; G)        (paper, §3 Eq. 1)

with w_f = `rl.format_weight` (0.1 in the paper), so the ablations differ in R_adaptive only.

Deviations and choices:

1. The blog (seed 001, "NAAR 奖励函数") has no format term; we keep the paper's 0.1 / 0.9 mix for
   the blog variant too. Set `rl.format_weight=0` for the blog's formula verbatim.
2. "binary" (the ablation "GRPO only") is accuracy-only: R_adaptive = 1 if correct else 0.
3. `naar_rewards(correct, used_tool, format_ok)` is the public entry point with the paper's
   constants (0.1 / 0.9, code reward 0.25).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from beacon.train.core.outcomes import Difficulty, GroupOutcomes

if TYPE_CHECKING:
    from beacon.train.grpo.config import RLConfig

FORMAT_WEIGHT = 0.1  # the paper's w_f in R = 0.1·R_format + 0.9·R_adaptive
NAAR_CODE_REWARD = 0.25  # the paper's reward of a correct code-using response when text suffices

RewardFn = Callable[[GroupOutcomes, "RLConfig"], list[float]]
REWARDS: dict[str, RewardFn] = {}


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: make a group reward selectable as `rl.reward=<name>`."""

    def add(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        return fn

    return add


def get_reward(name: str) -> RewardFn:
    """The registered reward `name` (naar, binary, blog); an unknown name says what to set."""
    if name not in REWARDS:
        raise ValueError(
            f"unknown reward {name!r}; choose one of {sorted(REWARDS)} (--set rl.reward=naar)"
        )
    return REWARDS[name]


def total_reward(
    format_ok: Sequence[bool], adaptive: Sequence[float], format_weight: float
) -> list[float]:
    """R = w_f · R_format + (1 - w_f) · R_adaptive per response (paper §3, Eq. 1)."""
    return [
        format_weight * float(ok) + (1.0 - format_weight) * a
        for ok, a in zip(format_ok, adaptive, strict=True)
    ]


def naar_adaptive(
    correct: Sequence[bool], used_tool: Sequence[bool], code_reward: float = NAAR_CODE_REWARD
) -> list[float]:
    """R_adaptive of NAAR for one group (paper §3 "Necessity-Aware Adaptive Reward").

    If some text-only response of the group is correct (text suffices): correct text-only -> 1,
    correct code-using -> `code_reward` (0.25). Otherwise correct code-using -> 1. Wrong -> 0.
    """
    text_suffices = any(c and not u for c, u in zip(correct, used_tool, strict=True))
    tool_value = code_reward if text_suffices else 1.0
    return [
        (tool_value if u else 1.0) if c else 0.0 for c, u in zip(correct, used_tool, strict=True)
    ]


def naar_rewards(
    correct: Sequence[bool], used_tool: Sequence[bool], format_ok: Sequence[bool]
) -> list[float]:
    """The paper's total reward R = 0.1·R_format + 0.9·R_adaptive of each response of one group.

    Three equal-length boolean sequences, one entry per response of the group (paper §3, Eq. 1
    with NAAR as R_adaptive). Raises ValueError when the lengths differ.
    """
    group = GroupOutcomes.of(correct, used_tool, format_ok)
    return total_reward(
        group.format_ok, naar_adaptive(group.correct, group.used_tool), FORMAT_WEIGHT
    )


def blog_reward(
    correct: bool,
    used_tool: bool,
    label: Difficulty,
    alpha: float = 0.5,
    beta: float = 0.5,
    gamma: float = 0.2,
) -> float:
    """The blog's R_NAAR(u, c, h) (seed 001, "数学细节"), checked in the blog's order.

    R_base = +1 if correct else -1; then the first matching case applies:
    h = easy, no tool, correct -> R_base + α; h = hard, tool, correct -> R_base + β;
    h = easy, tool (any correctness) -> R_base - γ; otherwise R_base.
    """
    base = 1.0 if correct else -1.0
    if label == "easy" and not used_tool and correct:
        return base + alpha
    if label == "hard" and used_tool and correct:
        return base + beta
    if label == "easy" and used_tool:
        return base - gamma
    return base


@register_reward("naar")
def naar_group_rewards(group: GroupOutcomes, config: RLConfig) -> list[float]:
    """NAAR with the configured code reward and format weight (paper §3)."""
    adaptive = naar_adaptive(group.correct, group.used_tool, config.naar.code_reward)
    return total_reward(group.format_ok, adaptive, config.format_weight)


@register_reward("binary")
def binary_group_rewards(group: GroupOutcomes, config: RLConfig) -> list[float]:
    """Accuracy only, R_adaptive = 1[correct]: the "GRPO only" ablation of the paper."""
    adaptive = [float(c) for c in group.correct]
    return total_reward(group.format_ok, adaptive, config.format_weight)


@register_reward("blog")
def blog_group_rewards(group: GroupOutcomes, config: RLConfig) -> list[float]:
    """The blog's α/β/γ reward with the item's difficulty label (seed 001)."""
    if group.label is None:
        raise ValueError(
            "rl.reward=blog needs a difficulty label per item (easy/hard) and this group has "
            "none; label the RL set first (beacon.train.core.outcomes) or use --set rl.reward=naar."
        )
    blog = config.blog
    adaptive = [
        blog_reward(c, u, group.label, blog.alpha, blog.beta, blog.gamma)
        for c, u in zip(group.correct, group.used_tool, strict=True)
    ]
    return total_reward(group.format_ok, adaptive, config.format_weight)

"""One step's scoring, from group outcomes to per-response advantages, as the paper orders it.

rewards (the configured variant) -> group filter -> group-relative advantages -> step stats.
The recipe calls `score_groups` once per step; every formula lives in the modules it calls.
Advantages are computed per group, so dropping a group never changes another group's values.

Over-turn masking (Mini-o3, `rl.truncated: mask`): a response a budget cut off is left out of
its group before rewards, the filter and the advantages, so it neither trains nor moves the
group's mean and std; a group with no complete response is dropped ("all_truncated"). The step
statistics still see every response as the policy produced it (a cut-off response is wrong).

Advantages: Group-relative advantages (GRPO) and the group filter of the paper (§3 "策略优化").

Notation: group g holds rewards r_1..r_G of the G responses to one prompt.

    A_i = (r_i - mean_g(r)) / (std_g(r) + ε)                                   (GRPO, Eq. 2)

std is the population standard deviation (ddof = 0): the G rewards are the whole group, and a
group of 2 then gets advantages ±1 rather than ±0.71. (TRL uses the sample std, ddof = 1; the
difference is a per-group scale factor sqrt(G / (G - 1)).)

Filtering: Which rollout groups train (beacon.md §4 "Group filtering"; paper §3, last sentence).

The paper drops groups that give "no accuracy advantage (all right or all wrong) or no adaptive
advantage (all responses in the same reasoning mode)". Read literally ("strict"), that also drops
every all-code group with mixed correctness, the groups that teach the hard items. beacon.md §4
resolves it: by default ("adaptive") a group is dropped when its NAAR adaptive rewards are all
equal, i.e. all wrong, or all correct in one mode. Mixed correctness, or all correct with both
modes present, is kept. The format term alone never keeps a group.

Under every rule a group whose total rewards are all equal is dropped too ("no_reward_variance"):
its advantages are all zero, so it would only cost compute (e.g. "binary" with all correct).

Drop reasons, checked in this order (the first that applies is counted):
  all_truncated        every response cut off by a budget   (rl.truncated: mask, `score_groups`)
  all_wrong            every response wrong                           (adaptive, strict)
  all_correct_one_mode every response correct, all in one mode        (adaptive, strict)
  all_correct          every response correct, both modes             (strict only)
  one_mode             mixed correctness, all in one mode             (strict only)
  no_reward_variance   every total reward equal                       (every rule)

Stats: The per-step statistics of GRPO in one place (issue 11, "Logged every step").

Computed over the step's **un-hinted** groups: they show the policy's own behaviour. Hinted groups
(HGCE) were sampled with a hint the policy will not see at test time, so they only count as
`groups_hinted`, `groups_rescued` (hinted groups the filter kept) and `hinted_accuracy` (whether
the hints help at all: the feasibility study's miniature HGCE solved 1 of 96 hinted samples).

Easy / hard is decided per group from its own rollouts: a group is easy when some text-only
response in it is correct (NAAR's branch test). Note the bias this carries: an easy group has at
least one text-only response by construction, so P[tool | easy] < 1 always; treat it as a trend
signal, not the evaluation MA (which labels items by a separate notool run, `beacon.metrics`).

    P[tool | easy] = mean over easy groups of the group's tool-use rate   (likewise for hard)
    MA = ½ (P[no tool | easy] + P[tool | hard])                      (beacon.md §1, via metrics)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import Tensor

from beacon.metrics.adaptivity import ItemOutcomes, mode_adaptiveness
from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import FilterRule, RLConfig
from beacon.train.grpo.rewards import get_reward


@dataclass(frozen=True)
class GroupScores:
    """Scores of one step's groups, responses laid out group after group.

    rewards: per group, per response. advantages: float64 [N], 0 for responses of dropped
    groups. keep: bool per response (False for dropped groups), to select what trains.
    """

    rewards: list[list[float]]
    advantages: Tensor
    keep: list[bool]
    verdict: GroupFilter
    stats: StepStats


def score_groups(groups: Sequence[GroupOutcomes], config: RLConfig) -> GroupScores:
    """Rewards, filter verdict, advantages and step statistics of `groups` under `config`."""
    reward_fn = get_reward(config.reward)
    rewards = [reward_fn(group, config) for group in groups]
    if config.truncated == "mask":
        return _masked_scores(groups, rewards, config)
    verdict = filter_groups(groups, rewards, config.filter.rule)
    flat = flat_rewards(rewards)
    keep = verdict.response_mask([g.size for g in groups])
    advantages = group_advantages(flat.rewards, flat.group_ids, config.advantage_eps)
    advantages = advantages * advantages.new_tensor(keep)
    return GroupScores(rewards, advantages, keep, verdict, step_stats(groups, rewards, verdict))


def _masked_scores(
    groups: Sequence[GroupOutcomes], rewards: list[list[float]], config: RLConfig
) -> GroupScores:
    """`score_groups` with every group scored over its complete responses only (module
    docstring); `rewards` (of the whole groups) feed the statistics."""
    reward_fn = get_reward(config.reward)
    complete = [g.complete for g in groups]
    parts = [g.select(idx) if idx else None for g, idx in zip(groups, complete, strict=True)]
    part_rewards = [reward_fn(p, config) if p else [] for p in parts]
    verdict = GroupFilter(
        tuple(
            drop_reason(p, r, config.filter.rule) if p else "all_truncated"
            for p, r in zip(parts, part_rewards, strict=True)
        )
    )
    flat = flat_rewards(part_rewards)
    part_adv = iter(group_advantages(flat.rewards, flat.group_ids, config.advantage_eps).tolist())
    advantages, keep = [], []
    for g, group in enumerate(groups):
        taken = {i: next(part_adv) for i in complete[g]}  # laid out group after group
        kept = verdict.keep[g]
        keep += [kept and i in taken for i in range(group.size)]
        advantages += [taken.get(i, 0.0) if kept else 0.0 for i in range(group.size)]
    stats = step_stats(groups, rewards, verdict)
    return GroupScores(rewards, flat.rewards.new_tensor(advantages), keep, verdict, stats)


@dataclass(frozen=True)
class FlatRewards:
    """Rewards of all groups laid end to end: rewards [N] float64, group_ids [N] long."""

    rewards: Tensor
    group_ids: Tensor


def flat_rewards(rewards: Sequence[Sequence[float]]) -> FlatRewards:
    """Per-group reward lists laid end to end, the input `group_advantages` takes."""
    values = [r for group in rewards for r in group]
    ids = [g for g, group in enumerate(rewards) for _ in group]
    return FlatRewards(
        torch.tensor(values, dtype=torch.float64), torch.tensor(ids, dtype=torch.long)
    )


def group_advantages(rewards: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """A_i = (r_i - mean_g) / (std_g + ε) for each response i of group g = group_ids[i].

    rewards: float [N]; group_ids: int [N] (any labels, groups need not be contiguous). Returns
    [N] in the dtype of `rewards`; a group with constant rewards gets exactly zeros. Vectorized:
    group sums by index_add, no Python loop over groups.
    """
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must both "
            "be 1-D with one entry per response"
        )
    _, index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(index.max()) + 1 if index.numel() else 0
    zeros = rewards.new_zeros(num_groups)
    counts = zeros.index_add(0, index, torch.ones_like(rewards))
    mean = zeros.index_add(0, index, rewards) / counts
    centered = rewards - mean[index]
    std = (zeros.index_add(0, index, centered**2) / counts).sqrt()
    # A constant group is exactly zero, even with ε = 0 or a mean that is one ulp off.
    high = rewards.new_full((num_groups,), -torch.inf).scatter_reduce(0, index, rewards, "amax")
    low = rewards.new_full((num_groups,), torch.inf).scatter_reduce(0, index, rewards, "amin")
    constant = (high == low)[index]
    advantages = centered / (std[index] + eps)
    return torch.where(constant, torch.zeros_like(advantages), advantages)


DROP_REASONS = (
    "all_truncated",
    "all_wrong",
    "all_correct_one_mode",
    "all_correct",
    "one_mode",
    "no_reward_variance",
)


@dataclass(frozen=True)
class GroupFilter:
    """The filter's verdict: `reasons[g]` is why group g is dropped, None when it is kept."""

    reasons: tuple[str | None, ...]

    @property
    def keep(self) -> tuple[bool, ...]:
        return tuple(r is None for r in self.reasons)

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped groups by reason, every key of DROP_REASONS present (stable log columns)."""
        return count_reasons(self.reasons)

    @property
    def num_kept(self) -> int:
        return sum(self.keep)

    @property
    def num_dropped(self) -> int:
        return len(self.keep) - self.num_kept

    def response_mask(self, group_sizes: Sequence[int]) -> list[bool]:
        """keep expanded to one flag per response, groups laid out one after another."""
        return [k for k, size in zip(self.keep, group_sizes, strict=True) for _ in range(size)]


def drop_reason(group: GroupOutcomes, rewards: Sequence[float], rule: FilterRule) -> str | None:
    """Why `group` is dropped under `rule`, or None when it trains (see the module docstring)."""
    one_mode = len(set(group.used_tool)) == 1
    if rule != "off":
        if group.all_wrong:
            return "all_wrong"
        if all(group.correct) and one_mode:
            return "all_correct_one_mode"
    if rule == "strict":
        if all(group.correct):
            return "all_correct"
        if one_mode:
            return "one_mode"
    if max(rewards) == min(rewards):
        return "no_reward_variance"
    return None


def filter_groups(
    groups: Sequence[GroupOutcomes],
    rewards: Sequence[Sequence[float]],
    rule: FilterRule = "adaptive",
) -> GroupFilter:
    """Keep mask over `groups` and dropped counts by reason (rule: adaptive | strict | off).

    `rewards[g]` are the total rewards of group g, as the reward function returned them.
    """
    if len(groups) != len(rewards):
        raise ValueError(f"{len(groups)} groups but {len(rewards)} reward lists")
    return GroupFilter(tuple(drop_reason(g, r, rule) for g, r in zip(groups, rewards, strict=True)))


def count_reasons(reasons: Sequence[str | None]) -> dict[str, int]:
    """{reason: count} over DROP_REASONS (zeros included) for the dropped entries of `reasons`."""
    counts = Counter(r for r in reasons if r is not None)
    return {name: counts.get(name, 0) for name in DROP_REASONS}


@dataclass(frozen=True)
class StepStats:
    """One GRPO step's numbers; NaN where a quantity has no groups to average over."""

    reward_mean: float
    accuracy: float
    tool_rate: float
    format_rate: float
    p_tool_easy: float
    p_tool_hard: float
    mode_adaptiveness: float
    response_tokens_mean: float
    groups: int
    groups_easy: int
    groups_kept: int
    groups_dropped: int
    groups_hinted: int
    groups_rescued: int
    hinted_accuracy: float
    truncated: int = 0  # responses a budget cut off before they answered
    decision_rate: float = math.nan  # un-hinted responses whose first crop is the decision box
    decision_rollouts: int = 0  # un-hinted responses of items that name a decision box
    dropped_by_reason: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | int]:
        """Flat keys for metrics.jsonl: reasons become `groups_dropped/<reason>`."""
        out = asdict(self)
        reasons = out.pop("dropped_by_reason")
        out.update({f"groups_dropped/{k}": v for k, v in reasons.items()})
        return out


def step_stats(
    groups: Sequence[GroupOutcomes], rewards: Sequence[Sequence[float]], verdict: GroupFilter
) -> StepStats:
    """Statistics of one step from its groups, their total rewards and the filter's verdict.

    `groups`, `rewards` and `verdict.keep` are aligned; hinted groups may be among them.
    """
    if not len(groups) == len(rewards) == len(verdict.keep):
        raise ValueError(
            f"{len(groups)} groups, {len(rewards)} reward lists and {len(verdict.keep)} filter "
            "flags must be aligned"
        )
    own = [i for i, g in enumerate(groups) if not g.hinted]
    flat = [(groups[i], j) for i in own for j in range(groups[i].size)]
    easy = np.array([float(groups[i].text_only_correct) for i in own])
    used = np.array([float(np.mean(groups[i].used_tool)) for i in own])
    accuracy = np.array([float(np.mean(groups[i].correct)) for i in own])
    # The group's own easy flag stands in for p_notool: MA reads only `easy` and `used_tool`.
    # Empty sets give NaN there (no groups, no easy or no hard group).
    ma = mode_adaptiveness(ItemOutcomes(easy, accuracy, used, easy), np.ones(len(own)))
    lengths = [g.response_tokens[j] for g, j in flat if g.response_tokens]
    hinted = [i for i, g in enumerate(groups) if g.hinted]
    decisions = [d for i in own for d in groups[i].decision]
    kept_own = sum(verdict.keep[i] for i in own)
    return StepStats(
        reward_mean=_mean([rewards[i][j] for i in own for j in range(groups[i].size)]),
        accuracy=_mean([g.correct[j] for g, j in flat]),
        tool_rate=_mean([g.used_tool[j] for g, j in flat]),
        format_rate=_mean([g.format_ok[j] for g, j in flat]),
        p_tool_easy=1.0 - float(ma.p_notool_given_easy),
        p_tool_hard=float(ma.p_tool_given_hard),
        mode_adaptiveness=float(ma.mode_adaptiveness),
        response_tokens_mean=_mean(lengths),
        groups=len(own),
        groups_easy=int(easy.sum()),
        groups_kept=kept_own,
        groups_dropped=len(own) - kept_own,
        groups_hinted=len(hinted),
        groups_rescued=sum(verdict.keep[i] for i in hinted),
        hinted_accuracy=_mean([c for i in hinted for c in groups[i].correct]),
        truncated=sum(sum(groups[i].truncated) for i in own),
        decision_rate=_mean(decisions),
        decision_rollouts=len(decisions),
        dropped_by_reason=count_reasons([verdict.reasons[i] for i in own]),
    )


def _mean(values: Sequence[float | bool]) -> float:
    return float(np.mean(np.asarray(values, dtype=float))) if len(values) else math.nan

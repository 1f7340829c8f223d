"""One step's scoring, from group outcomes to per-response advantages, as the paper orders it.

rewards (the configured variant) -> group filter -> group-relative advantages -> step stats.
The recipe calls `score_groups` once per step; every formula lives in the modules it calls.
Advantages are computed per group, so dropping a group never changes another group's values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from beacon.rl.advantages import flat_rewards, group_advantages
from beacon.rl.config import RLConfig
from beacon.rl.filtering import GroupFilter, filter_groups
from beacon.rl.groups import GroupOutcomes
from beacon.rl.rewards import get_reward
from beacon.rl.stats import StepStats, step_stats


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
    verdict = filter_groups(groups, rewards, config.filter.rule)
    flat = flat_rewards(rewards)
    keep = verdict.response_mask([g.size for g in groups])
    advantages = group_advantages(flat.rewards, flat.group_ids, config.advantage_eps)
    advantages = advantages * advantages.new_tensor(keep)
    return GroupScores(rewards, advantages, keep, verdict, step_stats(groups, rewards, verdict))

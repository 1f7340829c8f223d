"""One step's scoring, from group outcomes to per-response advantages, as the paper orders it.

rewards (the configured variant) -> group filter -> group-relative advantages -> step stats.
The recipe calls `score_groups` once per step; every formula lives in the modules it calls.
Advantages are computed per group, so dropping a group never changes another group's values.

Over-turn masking (Mini-o3, `rl.truncated: mask`): a response a budget cut off is left out of
its group before rewards, the filter and the advantages, so it neither trains nor moves the
group's mean and std; a group with no complete response is dropped ("all_truncated"). The step
statistics still see every response as the policy produced it (a cut-off response is wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from beacon.rl.advantages import flat_rewards, group_advantages
from beacon.rl.config import RLConfig
from beacon.rl.filtering import GroupFilter, drop_reason, filter_groups
from beacon.rl.format import format_check
from beacon.rl.groups import Difficulty, GroupOutcomes
from beacon.rl.rewards import get_reward
from beacon.rl.stats import StepStats, step_stats
from beacon.types import Trajectory


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


def group_outcomes(
    trajectories: Sequence[Trajectory], correct: Sequence[bool], label: Difficulty | None = None
) -> GroupOutcomes:
    """One group's record from its G trajectories and the verifier's verdicts on them.

    Mode: a response is code-using when it wrote a tool call (`Trajectory.tool_calls`, executed
    or not). NAAR contrasts text-only with code-based responses; a malformed call is not text
    only, and counting it as text would let it flip its group into the "text suffices" branch.
    (Evaluation's `used_tool` counts executed calls only; with well-formed calls they agree.)
    Format is `format_check`; the group is hinted when its trajectories were sampled in mode
    "hinted" (they must agree).
    """
    modes = {t.mode == "hinted" for t in trajectories}
    if len(modes) > 1:
        raise ValueError("a group mixes hinted and un-hinted trajectories; keep HGCE groups apart")
    return GroupOutcomes.of(
        correct,
        [t.attempted_tool_calls > 0 for t in trajectories],
        [format_check(t).ok for t in trajectories],
        label=label,
        hinted=modes == {True},
        response_tokens=[t.response_tokens for t in trajectories],
        truncated=[t.truncated for t in trajectories],
    )


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

"""Which rollout groups train (beacon.md §4 "Group filtering"; paper §3, last sentence).

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from beacon.rl.config import FilterRule
from beacon.rl.groups import GroupOutcomes

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

"""The per-step statistics of GRPO in one place (issue 11, "Logged every step").

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from beacon.metrics.adaptivity import ItemOutcomes, mode_adaptiveness
from beacon.rl.filtering import GroupFilter, count_reasons
from beacon.rl.groups import GroupOutcomes


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
        dropped_by_reason=count_reasons([verdict.reasons[i] for i in own]),
    )


def _mean(values: Sequence[float | bool]) -> float:
    return float(np.mean(np.asarray(values, dtype=float))) if len(values) else math.nan

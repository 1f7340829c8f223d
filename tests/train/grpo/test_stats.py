"""Per-step statistics from hand-built groups."""

from __future__ import annotations

import math

import pytest

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.group_scoring import filter_groups, step_stats
from beacon.train.grpo.rewards import get_reward

NAAR = get_reward("naar")


def _step(groups):
    rewards = [NAAR(g, RLConfig()) for g in groups]
    return step_stats(groups, rewards, filter_groups(groups, rewards)), rewards


def test_hand_computed_step() -> None:
    groups = [
        # easy (a text-only response is correct); tool rate 1/4
        GroupOutcomes.of(
            [True, False, True, True], [False, False, True, False], response_tokens=[10, 20, 30, 40]
        ),
        # hard, all code, mixed correctness; tool rate 1
        GroupOutcomes.of([True, False, False, False], [True] * 4, response_tokens=[50] * 4),
        # hard, all wrong, tool rate 1/2, one bad format
        GroupOutcomes.of(
            [False] * 4,
            [True, True, False, False],
            [True, True, True, False],
            response_tokens=[60] * 4,
        ),
    ]
    stats, rewards = _step(groups)
    flat = [r for rs in rewards for r in rs]
    assert stats.reward_mean == pytest.approx(sum(flat) / 12)
    assert stats.accuracy == pytest.approx(4 / 12)
    assert stats.tool_rate == pytest.approx((1 + 4 + 2) / 12)
    assert stats.format_rate == pytest.approx(11 / 12)
    assert stats.p_tool_easy == pytest.approx(0.25)
    assert stats.p_tool_hard == pytest.approx((1.0 + 0.5) / 2)
    # MA = ½ (P[no tool | easy] + P[tool | hard]) = ½ (0.75 + 0.75)
    assert stats.mode_adaptiveness == pytest.approx(0.75)
    assert stats.response_tokens_mean == pytest.approx((100 + 200 + 240) / 12)
    assert (stats.groups, stats.groups_easy, stats.groups_kept, stats.groups_dropped) == (
        3,
        1,
        2,
        1,
    )
    assert stats.dropped_by_reason["all_wrong"] == 1
    assert (stats.groups_hinted, stats.groups_rescued) == (0, 0)
    assert math.isnan(stats.hinted_accuracy)


def test_hinted_groups_count_only_as_hinted_and_rescued() -> None:
    own = GroupOutcomes.of([False, False], [True, True])
    rescued = GroupOutcomes.of([True, False], [True, True], hinted=True)
    failed = GroupOutcomes.of([False, False], [True, True], hinted=True)
    stats, _ = _step([own, rescued, failed])
    assert stats.groups == 1 and stats.accuracy == 0.0
    assert (stats.groups_hinted, stats.groups_rescued) == (2, 1)
    assert stats.hinted_accuracy == pytest.approx(1 / 4)
    assert stats.groups_dropped == 1 and stats.dropped_by_reason["all_wrong"] == 1


def test_empty_conditions_are_nan() -> None:
    stats, _ = _step([GroupOutcomes.of([True, False], [True, True])])  # no easy group
    assert math.isnan(stats.p_tool_easy) and math.isnan(stats.mode_adaptiveness)
    assert stats.p_tool_hard == 1.0
    assert math.isnan(stats.response_tokens_mean)  # no lengths given


def test_as_dict_flattens_reasons() -> None:
    stats, _ = _step([GroupOutcomes.of([False], [False])])
    row = stats.as_dict()
    assert row["groups_dropped/all_wrong"] == 1 and "dropped_by_reason" not in row
    assert {"reward_mean", "accuracy", "tool_rate", "p_tool_easy", "p_tool_hard"} <= set(row)


def test_misaligned_inputs_are_an_error() -> None:
    group = GroupOutcomes.of([True], [True])
    verdict = filter_groups([group], [[1.0]])
    with pytest.raises(ValueError, match="aligned"):
        step_stats([group, group], [[1.0]], verdict)


def test_only_hinted_groups_leave_own_stats_nan() -> None:
    stats, _ = _step([GroupOutcomes.of([True, False], [True, True], hinted=True)])
    assert stats.groups == 0 and math.isnan(stats.accuracy) and math.isnan(stats.p_tool_hard)
    assert stats.groups_rescued == 1

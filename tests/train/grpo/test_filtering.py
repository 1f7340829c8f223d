"""Group filtering (beacon.md §4): the default rule, the strict rule, and the drop counts."""

from __future__ import annotations

import pytest

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.group_scoring import DROP_REASONS, filter_groups
from beacon.train.grpo.rewards import get_reward

NAAR = get_reward("naar")

# (name, correct, used_tool, format_ok, reason under adaptive, reason under strict)
CASES = [
    ("all wrong", [0, 0, 0], [0, 1, 1], [1, 1, 1], "all_wrong", "all_wrong"),
    (
        "all correct, text only",
        [1, 1],
        [0, 0],
        [1, 1],
        "all_correct_one_mode",
        "all_correct_one_mode",
    ),
    (
        "all correct, code only",
        [1, 1],
        [1, 1],
        [1, 1],
        "all_correct_one_mode",
        "all_correct_one_mode",
    ),
    ("all correct, both modes", [1, 1, 1], [0, 1, 1], [1, 1, 1], None, "all_correct"),
    ("mixed, code only", [1, 0, 1], [1, 1, 1], [1, 1, 1], None, "one_mode"),
    ("mixed, text only", [1, 0], [0, 0], [1, 1], None, "one_mode"),
    ("mixed, both modes", [1, 0, 0], [0, 1, 0], [1, 1, 1], None, None),
    # the format term alone does not keep a group
    ("all wrong, formats differ", [0, 0], [0, 0], [1, 0], "all_wrong", "all_wrong"),
    (
        "all correct text, formats differ",
        [1, 1],
        [0, 0],
        [1, 0],
        "all_correct_one_mode",
        "all_correct_one_mode",
    ),
]


def _group(correct, used, fmt) -> GroupOutcomes:
    return GroupOutcomes.of(
        [bool(c) for c in correct], [bool(u) for u in used], [bool(f) for f in fmt]
    )


@pytest.mark.parametrize(("name", "correct", "used", "fmt", "adaptive", "strict"), CASES)
def test_drop_reasons(name, correct, used, fmt, adaptive, strict) -> None:
    group = _group(correct, used, fmt)
    rewards = [NAAR(group, RLConfig())]
    assert filter_groups([group], rewards, "adaptive").reasons == (adaptive,)
    assert filter_groups([group], rewards, "strict").reasons == (strict,)


def test_default_rule_equals_all_adaptive_rewards_equal() -> None:
    # beacon.md §4: dropped by default <=> the NAAR adaptive rewards are all equal
    config = RLConfig(format_weight=0.0)
    for _, correct, used, fmt, adaptive, _ in CASES:
        group = _group(correct, used, fmt)
        adaptive_rewards = NAAR(group, config)
        all_equal = len(set(adaptive_rewards)) == 1
        assert (adaptive is not None) == all_equal


def test_off_rule_drops_only_zero_variance() -> None:
    groups = [_group([0, 0], [0, 0], [1, 0]), _group([1, 1], [0, 0], [1, 1])]
    rewards = [NAAR(g, RLConfig()) for g in groups]
    assert filter_groups(groups, rewards, "off").reasons == (None, "no_reward_variance")


def test_binary_all_correct_both_modes_has_no_variance() -> None:
    group = _group([1, 1], [0, 1], [1, 1])
    rewards = [get_reward("binary")(group, RLConfig())]
    assert filter_groups([group], rewards).reasons == ("no_reward_variance",)


def test_counts_by_reason_and_masks() -> None:
    groups = [
        _group([0, 0], [1, 1], [1, 1]),
        _group([1, 0], [1, 1], [1, 1]),
        _group([0, 0], [0, 1], [1, 1]),
        _group([1, 1], [1, 1], [1, 1]),
        _group([1, 1, 0], [0, 1, 1], [1, 1, 1]),
    ]
    verdict = filter_groups(groups, [NAAR(g, RLConfig()) for g in groups])
    assert verdict.keep == (False, True, False, False, True)
    assert verdict.num_kept == 2 and verdict.num_dropped == 3
    assert set(verdict.dropped) == set(DROP_REASONS)
    assert verdict.dropped["all_wrong"] == 2 and verdict.dropped["all_correct_one_mode"] == 1
    assert sum(verdict.dropped.values()) == 3
    mask = verdict.response_mask([g.size for g in groups])
    assert mask == [False, False, True, True, False, False, False, False, True, True, True]


def test_misaligned_inputs_are_an_error() -> None:
    with pytest.raises(ValueError, match="2 groups but 1 reward lists"):
        filter_groups([_group([1], [1], [1])] * 2, [[1.0]])

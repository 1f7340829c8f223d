"""Contract over every registered reward, and the rl config."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from beacon.rl import REWARDS, GroupOutcomes, RLConfig, get_reward

GROUPS = [
    GroupOutcomes.of([True, False, True, False], [False, False, True, True], label="easy"),
    GroupOutcomes.of([False, False], [True, True], [True, False], label="hard"),
    GroupOutcomes.of([True], [True], label="hard"),
]


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_every_reward_gives_one_finite_value_per_response(name: str) -> None:
    for group in GROUPS:
        rewards = get_reward(name)(group, RLConfig(reward=name))
        assert len(rewards) == group.size
        assert all(isinstance(r, float) and math.isfinite(r) for r in rewards)


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_every_reward_prefers_correct_over_wrong_in_the_same_mode(name: str) -> None:
    group = GroupOutcomes.of([True, False], [True, True], label="hard")
    right, wrong = get_reward(name)(group, RLConfig(reward=name))
    assert right > wrong


def test_registry_holds_the_three_variants() -> None:
    assert {"naar", "binary", "blog"} <= set(REWARDS)


def test_unknown_reward_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match=r"rl\.reward='naar2'"):
        RLConfig(reward="naar2")
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("naar2")


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ValidationError, match="code_rewrd"):
        RLConfig(naar={"code_rewrd": 0.3})


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ValidationError):
        RLConfig(format_weight=1.5)
    with pytest.raises(ValidationError):
        RLConfig(loss={"aggregation": "sum"})

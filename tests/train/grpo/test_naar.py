"""NAAR (paper §3, beacon.md §4): exact rewards for hand-built groups, every branch."""

from __future__ import annotations

import pytest

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.rewards import get_reward, naar_adaptive, naar_rewards


def test_text_suffices_branch_correct_code_gets_quarter() -> None:
    # text-correct, code-correct, text-wrong, code-wrong; all well formatted
    # R_adaptive = [1, 0.25, 0, 0] -> R = 0.1 + 0.9 * R_adaptive
    rewards = naar_rewards([True, True, False, False], [False, True, False, True], [True] * 4)
    assert rewards == pytest.approx([1.0, 0.325, 0.1, 0.1], abs=1e-12)


def test_no_text_only_correct_branch_correct_code_gets_full() -> None:
    # the only text-only response is wrong, so correct code-using responses earn 1.0
    rewards = naar_rewards([False, True, True, False], [False, True, True, True], [True] * 4)
    assert rewards == pytest.approx([0.1, 1.0, 1.0, 0.1], abs=1e-12)


def test_all_code_group_correct_code_gets_full() -> None:
    rewards = naar_rewards([True, False], [True, True], [True, True])
    assert rewards == pytest.approx([1.0, 0.1], abs=1e-12)


def test_all_wrong_group_gets_only_the_format_term() -> None:
    rewards = naar_rewards([False] * 3, [False, True, True], [True, False, True])
    assert rewards == pytest.approx([0.1, 0.0, 0.1], abs=1e-12)


def test_all_correct_text_only() -> None:
    assert naar_rewards([True, True], [False, False], [True, True]) == pytest.approx([1.0, 1.0])


def test_format_term_weights_point_one() -> None:
    # correct text-only with a broken format: 0.9; wrong with a good format: 0.1
    assert naar_rewards([True, False], [False, False], [False, True]) == pytest.approx([0.9, 0.1])


def test_text_suffices_ignores_the_format_of_the_text_response() -> None:
    # the paper's branch test is on correctness and mode only: a correct text-only response with
    # a broken format still makes text "sufficient", so correct code earns 0.25
    rewards = naar_rewards([True, True], [False, True], [False, True])
    assert rewards == pytest.approx([0.9, 0.1 + 0.9 * 0.25], abs=1e-12)


def test_single_response_group() -> None:
    assert naar_rewards([True], [True], [True]) == pytest.approx([1.0])
    assert naar_rewards([True], [False], [True]) == pytest.approx([1.0])


def test_adaptive_part_alone() -> None:
    assert naar_adaptive([True, True, False], [False, True, True]) == [1.0, 0.25, 0.0]
    assert naar_adaptive([True, True], [False, True], code_reward=0.5) == [1.0, 0.5]


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="one correct / used_tool / format_ok flag"):
        naar_rewards([True, False], [True], [True, True])


def test_empty_group_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one response"):
        naar_rewards([], [], [])


def test_registered_naar_uses_the_config() -> None:
    group = GroupOutcomes.of([True, True], [False, True])
    config = RLConfig(format_weight=0.0, naar={"code_reward": 0.5})
    assert get_reward("naar")(group, config) == pytest.approx([1.0, 0.5])
    assert get_reward("naar")(group, RLConfig()) == pytest.approx(
        naar_rewards([True, True], [False, True], [True, True])
    )


def test_binary_is_accuracy_only() -> None:
    group = GroupOutcomes.of([True, True, False], [False, True, True], [True, True, False])
    assert get_reward("binary")(group, RLConfig()) == pytest.approx([1.0, 1.0, 0.0])

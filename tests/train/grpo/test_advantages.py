"""Group-relative advantages A = (r - mean) / (std + ε) (GRPO), population std."""

from __future__ import annotations

import math

import pytest
import torch

from beacon.train.grpo.group_scoring import flat_rewards, group_advantages


def test_hand_computed_values() -> None:
    # rewards [0, 1, 1, 1]: mean 0.75, population std sqrt(0.1875) = 0.4330127
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    adv = group_advantages(rewards, torch.zeros(4, dtype=torch.long), eps=0.0)
    std = math.sqrt(0.1875)
    expected = [-0.75 / std, 0.25 / std, 0.25 / std, 0.25 / std]
    assert adv.tolist() == pytest.approx(expected, abs=1e-12)
    assert adv.tolist() == pytest.approx([-math.sqrt(3), 1 / math.sqrt(3)] + [1 / math.sqrt(3)] * 2)


def test_two_responses_give_plus_minus_one() -> None:
    adv = group_advantages(
        torch.tensor([1.0, 0.1], dtype=torch.float64), torch.tensor([7, 7]), 1e-6
    )
    assert adv.tolist() == pytest.approx([0.45 / (0.45 + 1e-6), -0.45 / (0.45 + 1e-6)], abs=1e-12)


def test_zero_mean_and_unit_std_per_group() -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=gen, dtype=torch.float64)
    groups = torch.arange(3).repeat_interleave(8)
    adv = group_advantages(rewards, groups, eps=0.0)
    for g in range(3):
        part = adv[groups == g]
        assert part.mean().item() == pytest.approx(0.0, abs=1e-12)
        assert part.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-12)


def test_constant_group_gives_zeros() -> None:
    rewards = torch.tensor([0.325, 0.325, 0.325, 1.0, 0.0], dtype=torch.float64)
    adv = group_advantages(rewards, torch.tensor([0, 0, 0, 1, 1]))
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    # also with ε = 0, where 0 / 0 would otherwise be NaN (or ±1 from a mean one ulp off)
    thirds = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64)
    assert group_advantages(thirds, torch.zeros(3, dtype=torch.long), eps=0.0).tolist() == [0.0] * 3


def test_interleaved_group_ids_equal_contiguous() -> None:
    rewards = torch.tensor([1.0, 5.0, 0.0, 3.0, 0.5, 4.0], dtype=torch.float64)
    interleaved = group_advantages(rewards, torch.tensor([10, 20, 10, 20, 10, 20]))
    first = group_advantages(rewards[0::2], torch.zeros(3, dtype=torch.long))
    second = group_advantages(rewards[1::2], torch.zeros(3, dtype=torch.long))
    assert torch.allclose(interleaved[0::2], first) and torch.allclose(interleaved[1::2], second)


def test_single_response_group_is_zero() -> None:
    assert group_advantages(torch.tensor([0.7]), torch.tensor([0])).tolist() == [0.0]


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="one entry per response"):
        group_advantages(torch.zeros(3), torch.zeros(2, dtype=torch.long))


def test_flat_rewards_feed_group_advantages() -> None:
    flat = flat_rewards([[1.0, 0.0], [0.5, 0.5, 0.5]])
    assert flat.group_ids.tolist() == [0, 0, 1, 1, 1]
    assert flat.rewards.dtype == torch.float64
    adv = group_advantages(flat.rewards, flat.group_ids, eps=0.0)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0])


def test_invariant_to_shift_and_positive_scale() -> None:
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(12, generator=gen, dtype=torch.float64)
    groups = torch.arange(3).repeat_interleave(4)
    base = group_advantages(rewards, groups, eps=0.0)
    moved = group_advantages(3.0 * rewards - 7.0, groups, eps=0.0)
    assert torch.allclose(base, moved, atol=1e-12)

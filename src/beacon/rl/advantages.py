"""Group-relative advantages (GRPO) and the group filter of the paper (§3 "策略优化").

Notation: group g holds rewards r_1..r_G of the G responses to one prompt.

    A_i = (r_i - mean_g(r)) / (std_g(r) + ε)                                   (GRPO, Eq. 2)

std is the population standard deviation (ddof = 0): the G rewards are the whole group, and a
group of 2 then gets advantages ±1 rather than ±0.71. (TRL uses the sample std, ddof = 1; the
difference is a per-group scale factor sqrt(G / (G - 1)).)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


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

"""Padding training sequences into one batch, and laying groups out as flat tensors.

Right padding: position t of row b is token t of sequence b, so `token_logprobs` and the loss
masks line up without offsets; padded positions have attention 0 and loss mask 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from beacon.rl.sequences import TrainingSequence


@dataclass(frozen=True)
class SequenceBatch:
    """B training sequences padded to the longest, L.

    input_ids: long [B, L]; attention_mask, loss_mask: long [B, L]; sampler_logprobs: float
    [B, L] (0 off the generated tokens), or None when some sequence has none.
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    sampler_logprobs: Tensor | None


def collate(sequences: Sequence[TrainingSequence], pad_id: int) -> SequenceBatch:
    """Right-pad `sequences` (their training ids, HGCE prompt already swapped) into a batch."""
    if not sequences:
        raise ValueError("cannot collate an empty list of sequences")
    length = max(len(s.token_ids) for s in sequences)

    def pad(rows: list[list], value, dtype: torch.dtype) -> Tensor:
        return torch.tensor([row + [value] * (length - len(row)) for row in rows], dtype=dtype)

    have_logprobs = all(s.sampler_logprobs is not None for s in sequences)
    return SequenceBatch(
        input_ids=pad([s.token_ids for s in sequences], pad_id, torch.long),
        attention_mask=pad([[1] * len(s.token_ids) for s in sequences], 0, torch.long),
        loss_mask=pad([s.loss_mask for s in sequences], 0, torch.long),
        sampler_logprobs=(
            pad([s.sampler_logprobs for s in sequences], 0.0, torch.float32)
            if have_logprobs
            else None
        ),
    )


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

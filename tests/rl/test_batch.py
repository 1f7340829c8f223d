"""Collating training sequences and flattening group rewards."""

from __future__ import annotations

import pytest
import torch

from beacon.rl import collate, flat_rewards, group_advantages
from beacon.rl.sequences import TrainingSequence


def _seq(ids, mask, logprobs) -> TrainingSequence:
    return TrainingSequence(
        token_ids=ids,
        loss_mask=mask,
        sampling_ids=ids,
        prompt_length=1,
        sampling_prompt_length=1,
        sampler_logprobs=logprobs,
        images=[],
        hinted=False,
    )


def test_collate_right_pads() -> None:
    batch = collate([_seq([1, 2, 3], [0, 1, 1], [0, -1, -2]), _seq([4, 5], [0, 1], [0, -3])], 0)
    assert batch.input_ids.tolist() == [[1, 2, 3], [4, 5, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch.loss_mask.tolist() == [[0, 1, 1], [0, 1, 0]]
    assert batch.sampler_logprobs.tolist() == [[0, -1, -2], [0, -3, 0]]


def test_collate_without_logprobs_and_empty() -> None:
    assert collate([_seq([1, 2], [0, 1], None)], 0).sampler_logprobs is None
    with pytest.raises(ValueError, match="empty"):
        collate([], 0)


def test_flat_rewards_feed_group_advantages() -> None:
    flat = flat_rewards([[1.0, 0.0], [0.5, 0.5, 0.5]])
    assert flat.group_ids.tolist() == [0, 0, 1, 1, 1]
    adv = group_advantages(flat.rewards, flat.group_ids, eps=0.0)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0])
    assert flat.rewards.dtype == torch.float64

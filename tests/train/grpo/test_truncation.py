"""Over-turn masking (Mini-o3; `rl.truncated`): a response a budget cut off is left out of its
group's rewards, advantages and loss under "mask", and scored as wrong under "wrong"."""

from __future__ import annotations

import torch

from beacon.train.core.outcomes import GroupOutcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.group_scoring import group_advantages, score_groups
from beacon.types import TRUNCATED, Trajectory


def group(correct: list[bool], truncated: list[bool]) -> GroupOutcomes:
    return GroupOutcomes.of(correct, [True] * len(correct), truncated=truncated)


def test_masked_truncated_responses_train_nothing_and_leave_the_others_as_without_them() -> None:
    cfg = RLConfig(reward="binary", truncated="mask")
    g = group([True, False, False, True], truncated=[False, False, True, False])
    scores = score_groups([g], cfg)
    assert scores.keep == [True, True, False, True]
    assert scores.advantages[2] == 0.0
    # the complete responses get exactly the advantages of the group without the cut-off one
    rewards = torch.tensor([scores.rewards[0][i] for i in (0, 1, 3)], dtype=torch.float64)
    alone = group_advantages(rewards, torch.zeros(3, dtype=torch.long))
    assert torch.equal(scores.advantages[[0, 1, 3]], alone)
    assert scores.stats.truncated == 1
    assert scores.stats.accuracy == 0.5  # statistics see the cut-off response as wrong


def test_wrong_scores_a_truncated_response_as_a_wrong_answer() -> None:
    g = group([True, False, False, True], truncated=[False, False, True, False])
    scores = score_groups([g], RLConfig(reward="binary", truncated="wrong"))
    assert scores.keep == [True] * 4 and scores.advantages[2] < 0


def test_a_group_cut_off_entirely_is_dropped_and_named() -> None:
    cfg = RLConfig(reward="binary", truncated="mask")
    groups = [group([False, False], [True, True]), group([True, False], [False, False])]
    scores = score_groups(groups, cfg)
    assert scores.verdict.reasons == ("all_truncated", None)
    assert scores.keep == [False, False, True, True]
    assert scores.stats.dropped_by_reason["all_truncated"] == 1
    # one complete response left: no variance, dropped as such (its advantage would be 0)
    one_left = score_groups([group([True, False], [False, True])], cfg)
    assert one_left.keep == [False, False]


def test_budget_finish_reasons_are_the_truncated_ones() -> None:
    assert {
        "max_turns",
        "max_tool_calls",
        "max_tokens",
        "context_length",
        "max_images",
    } == TRUNCATED
    traj = Trajectory(sample_id="s", mode="tool", format="thyme", finish_reason="max_turns")
    assert traj.truncated
    assert not Trajectory(
        sample_id="s", mode="tool", format="thyme", finish_reason="stop"
    ).truncated

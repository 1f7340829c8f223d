"""HGCE's report lines from hand-built cases: the hinted-row log-ratio sums (`hint_ratio_sums`),
the crop coordinates they are split on (`code_digit_mask`), and the un-hinted decision rate
(`decided`, `rl/decision_rate`)."""

from __future__ import annotations

import math

import pytest
import torch

from beacon.benchmarks.synth_keys import generate
from beacon.train.core.encode import code_digit_mask
from beacon.train.core.outcomes import GroupOutcomes, decided, group_outcomes, item_decision_box
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.group_scoring import filter_groups, step_stats
from beacon.train.grpo.policy import HintRatio, hint_ratio_sums
from beacon.train.grpo.rewards import get_reward
from beacon.types import ImageCrop, Segment, ToolCall, Trajectory


def test_hinted_log_ratio_means_and_clipped_shares_by_hand() -> None:
    """Rows: hinted success (A = +1), hinted failure (A = -1), un-hinted (A = +1, left out).
    Position 0 is the prompt (mask 0); coordinate tokens at position 2 of rows 0 and 1."""
    logp = torch.log(
        torch.tensor([[1.0, 0.5, 0.9, 0.6], [1.0, 0.8, 0.5, 0.5], [1.0, 0.1, 0.1, 0.1]])
    )
    old = torch.log(
        torch.tensor([[1.0, 0.5, 0.3, 0.9], [1.0, 0.1, 0.5, 0.9], [1.0, 0.9, 0.9, 0.9]])
    )
    mask = torch.tensor([[0.0, 1, 1, 1], [0.0, 1, 1, 1], [0.0, 1, 1, 1]])
    coords = torch.tensor([[False, False, True, False], [False, False, True, False], [True] * 4])
    rows = (torch.tensor([1.0, -1.0, 1.0]), mask, torch.tensor([True, True, False]), coords)
    sums = hint_ratio_sums(logp, old, *rows, clip_eps=0.2)
    # log r: row 0 = 0, log 3, log(2/3); row 1 = log 8, 0, log(5/9)
    logs = [0.0, math.log(3), math.log(2 / 3), math.log(8), 0.0, math.log(5 / 9)]
    metrics = sums.as_metrics()
    assert metrics["rl/hint_log_ratio"] == pytest.approx(sum(logs) / 6)
    assert metrics["rl/hint_log_ratio_coords"] == pytest.approx(math.log(3) / 2)
    # A > 0: r = 3 > 1.2 is cut (1 of 3); A < 0: r = 5/9 < 0.8 is cut, r = 8 is not (1 of 3)
    assert metrics["rl/hint_clipped_pos"] == pytest.approx(1 / 3)
    assert metrics["rl/hint_clipped_neg"] == pytest.approx(1 / 3)
    assert (metrics["rl/hint_tokens"], metrics["rl/hint_tokens_coords"]) == (6, 2)

    # a wider upper bound keeps r = 3 unclipped; sums add and survive a reduction's list
    wide = hint_ratio_sums(logp, old, *rows, clip_eps=0.2, clip_eps_high=5.0)
    assert wide.clipped_pos == 0
    total = HintRatio.from_list(sums.as_list())
    total.add(wide)
    assert total.tokens == 12 and total.clipped_neg == 2
    assert math.isnan(HintRatio().as_metrics()["rl/hint_log_ratio"])  # no hinted row


def _segment(role: str, ids: list[int], kind: str = "text") -> Segment:
    return Segment(role=role, text="", token_ids=ids, kind=kind)


def test_code_digits_are_marked_on_the_unhinted_layout() -> None:
    """A hinted trajectory trains after its original prompt: the mask follows that layout."""
    text = {1: "a", 2: "crop((", 3: "12", 4: ",", 5: "7", 6: "))", 7: "Key 3"}
    traj = Trajectory(
        sample_id="0",
        mode="hinted",
        format="thyme",
        segments=[
            _segment("prompt", [1, 1, 1, 1]),  # the hinted prompt, longer
            _segment("generated", [7], "text"),  # a digit outside code is no coordinate
            _segment("generated", [2, 3, 4, 5, 6], "code"),
            _segment("observation", [3]),
        ],
        original_prompt=_segment("prompt", [1, 1]),
    )
    mask = code_digit_mask(traj, lambda ids: text[ids[0]])
    assert mask == [False, False, False, False, True, False, True, False, False]


def _traj(*boxes: tuple[int, int, int, int] | None, mode: str = "tool") -> Trajectory:
    """An episode whose tool calls returned one image each, cropped at `boxes` (None: unknown)."""
    calls = [
        ToolCall(code="", executed=True, image_crops=[None if b is None else ImageCrop(0, b)])
        for b in boxes
    ]
    return Trajectory(sample_id="0", mode=mode, format="thyme", tool_calls=calls)


KEY = (204, 200, 244, 248)


def test_first_crop_of_the_decision_box() -> None:
    assert decided(_traj(KEY, (55, 50, 95, 98)), KEY)
    assert decided(_traj((200, 190, 250, 250)), KEY)  # a padded crop of the box
    assert not decided(_traj((55, 50, 95, 98), KEY), KEY)  # the key second
    assert not decided(_traj(), KEY)  # no crop
    assert decided(_traj(None, KEY), KEY)  # an image the sandbox cannot place is no crop
    assert not decided(_traj((0, 0, 448, 448)), KEY)  # the whole image holds it, decides nothing
    assert not decided(_traj((204, 200, 244, 240)), KEY)  # cuts the box


def test_decision_rate_counts_unhinted_rollouts_of_items_with_a_box() -> None:
    keyed = generate(0, 0, "keyed")
    box = item_decision_box(keyed.metadata)
    assert box == keyed.metadata["key_box"] == list(KEY)
    assert (
        item_decision_box(generate(0, 0, "told").metadata)
        == generate(0, 0, "told").metadata["key_box"]
    )
    assert item_decision_box(generate(0, 0, "marked").metadata) is None
    other = tuple(keyed.metadata["cell_boxes"][0])
    plain = group_outcomes(
        [_traj(KEY), _traj(other, KEY), _traj(), _traj(KEY, other)], [False] * 4, None, box
    )
    hinted = group_outcomes([_traj(KEY, mode="hinted")] * 2, [True, False], None, box)
    no_box = group_outcomes([_traj(KEY), _traj(KEY)], [True, False])  # a `marked` item
    assert plain.decision == (True, False, False, True) and no_box.decision == ()
    groups = [plain, hinted, no_box]
    naar = get_reward("naar")
    rewards = [naar(g, RLConfig()) for g in groups]
    stats = step_stats(groups, rewards, filter_groups(groups, rewards))
    assert stats.decision_rate == pytest.approx(2 / 4) and stats.decision_rollouts == 4
    assert plain.select([1, 3]).decision == (False, True)
    with pytest.raises(ValueError, match="one correct"):
        GroupOutcomes.of([True, False], [True, True], decision=[True])
    empty = step_stats([no_box], rewards[2:], filter_groups([no_box], rewards[2:]))
    assert math.isnan(empty.decision_rate) and empty.decision_rollouts == 0

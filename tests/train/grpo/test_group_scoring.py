"""score_groups: rewards -> filter -> advantages -> stats, on hand-built groups."""

from __future__ import annotations

import math

import pytest

from beacon.train.core.outcomes import GroupOutcomes, group_outcomes
from beacon.train.grpo.config import RLConfig
from beacon.train.grpo.group_scoring import score_groups
from beacon.types import Segment, ToolCall, Trajectory


def _traj(mode: str, tool: bool, answer: str | None) -> Trajectory:
    segments = [Segment(role="prompt", text="q", token_ids=[1])]
    calls = []
    if tool:
        segments += [
            Segment(role="generated", text="<code>c</code>", token_ids=[2, 3]),
            Segment(role="observation", text="<sandbox_output>1</sandbox_output>", token_ids=[4]),
        ]
        calls = [ToolCall(code="c", executed=True, ok=True)]
    segments.append(Segment(role="generated", text=f"<answer>{answer}</answer>", token_ids=[5]))
    return Trajectory(
        sample_id="s",
        mode=mode,
        format="thyme",
        segments=segments,
        tool_calls=calls,
        final_answer=answer,
        finish_reason="answer" if answer is not None else "stop",
    )


def test_group_outcomes_from_trajectories() -> None:
    group = group_outcomes(
        [_traj("tool", True, "3"), _traj("tool", False, "4"), _traj("tool", False, None)],
        [True, False, False],
        label="hard",
    )
    assert group.used_tool == (True, False, False)
    assert group.format_ok == (True, True, False)
    assert group.response_tokens == (3, 1, 1)
    assert group.label == "hard" and not group.hinted
    assert group_outcomes([_traj("hinted", True, "3")], [True]).hinted
    # a malformed call (never executed) still makes the response code-using, not text-only
    malformed = _traj("tool", True, "3")
    malformed.tool_calls = [ToolCall(code="c", executed=False, error="empty")]
    assert group_outcomes([malformed], [True]).used_tool == (True,)
    with pytest.raises(ValueError, match="mixes hinted"):
        group_outcomes([_traj("hinted", True, "3"), _traj("tool", True, "3")], [True, True])


def test_one_step_by_hand() -> None:
    groups = [
        GroupOutcomes.of([True, True], [False, True]),  # text suffices: R = [1.0, 0.325]
        GroupOutcomes.of([False, False], [True, True]),  # all wrong: dropped
        GroupOutcomes.of([True, False], [True, True]),  # all code, mixed: R = [1.0, 0.1]
    ]
    scores = score_groups(groups, RLConfig())
    assert scores.rewards == [pytest.approx([1.0, 0.325]), [0.1, 0.1], pytest.approx([1.0, 0.1])]
    assert scores.keep == [True, True, False, False, True, True]
    # two responses per kept group: advantages ±d/(d + ε) with d the half-gap
    plus = lambda d: d / (d + 1e-6)  # noqa: E731
    expected = [plus(0.3375), -plus(0.3375), 0.0, 0.0, plus(0.45), -plus(0.45)]
    assert scores.advantages.tolist() == pytest.approx(expected, abs=1e-12)
    assert scores.verdict.dropped["all_wrong"] == 1
    assert scores.stats.groups_kept == 2 and scores.stats.accuracy == pytest.approx(3 / 6)


def test_binary_ablation_drops_what_naar_keeps() -> None:
    # all correct in both modes: NAAR separates the modes, accuracy-only has nothing to learn
    group = GroupOutcomes.of([True, True], [False, True])
    assert score_groups([group], RLConfig()).keep == [True, True]
    binary = score_groups([group], RLConfig(reward="binary"))
    assert binary.keep == [False, False]
    assert binary.verdict.reasons == ("no_reward_variance",)
    assert binary.stats.groups_easy == 1
    assert math.isnan(binary.stats.mode_adaptiveness)  # no hard group this step

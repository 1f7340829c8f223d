"""R_format over the segment structure (paper §3): code -> observation, then <answer>."""

from __future__ import annotations

from dataclasses import replace

import pytest

from beacon.train.core.outcomes import format_check, format_reward
from beacon.types import Segment, ToolCall, Trajectory

CODE = "<code>\n```python\nprint(image.size)\n```\n</code>"


def _trajectory(*parts: tuple[str, str], calls: int | None = None, **kwargs) -> Trajectory:
    segments = [Segment(role="prompt", text="user: q", token_ids=[1, 2])]
    segments += [Segment(role=role, text=text, token_ids=[3]) for role, text in parts]
    n_obs = sum(role == "observation" for role, _ in parts)
    tool_calls = [ToolCall(code="print(1)", executed=True, ok=True)] * (
        n_obs if calls is None else calls
    )
    defaults = {"final_answer": "3", "finish_reason": "answer"}
    defaults.update(kwargs)
    return Trajectory(
        sample_id="s",
        mode="tool",
        format="thyme",
        segments=segments,
        tool_calls=tool_calls,
        **defaults,
    )


def test_text_only_answer_passes() -> None:
    traj = _trajectory(("generated", "It is 3. <answer>3</answer>"))
    assert format_check(traj).ok and format_reward(traj) == 1.0


def test_code_then_observation_then_answer_passes() -> None:
    traj = _trajectory(
        ("generated", "Let me look. " + CODE),
        ("observation", "<sandbox_output>(8, 8)</sandbox_output>"),
        ("generated", "<answer>3</answer>"),
    )
    assert format_reward(traj) == 1.0


def test_split_code_segments_pass() -> None:
    # with code_temperature set, the tag stays in the text segment and the code is its own segment
    traj = _trajectory(
        ("generated", "Look. <code>"),
        ("generated", "\n```python\nprint(1)\n```\n</code>"),
        ("observation", "<sandbox_output>1</sandbox_output>"),
        ("generated", "<answer>3</answer>"),
    )
    assert format_reward(traj) == 1.0


def test_no_closed_answer_fails() -> None:
    traj = _trajectory(("generated", "It is 3."), final_answer=None, finish_reason="stop")
    assert format_reward(traj) == 0.0
    assert "no closed <answer>" in format_check(traj).problem


def test_answer_cut_by_limit_fails() -> None:
    traj = _trajectory(("generated", "<answer>3"), final_answer=None, finish_reason="max_tokens")
    assert format_reward(traj) == 0.0


def test_code_block_without_observation_fails() -> None:
    # notool mode: the model wrote code anyway; it was recorded as attempted, never observed
    traj = _trajectory(("generated", CODE + " <answer>3</answer>"), calls=0)
    traj.tool_calls = [ToolCall(code="print(1)", executed=False)]
    traj.mode = "notool"
    assert format_reward(traj) == 0.0


def test_unclosed_code_block_before_the_answer_fails() -> None:
    traj = _trajectory(("generated", "<code>print(1) <answer>3</answer>"))
    check = format_check(traj)
    assert not check.ok and "1 code blocks opened" in check.problem


def test_malformed_call_fails_even_with_an_error_observation() -> None:
    traj = _trajectory(
        ("generated", "<code></code>"),
        ("observation", "<sandbox_output>Error: the code block is empty</sandbox_output>"),
        ("generated", "<answer>3</answer>"),
    )
    traj.tool_calls = [ToolCall(code="<code></code>", executed=False, error="empty")]
    assert format_reward(traj) == 0.0


def test_ending_on_an_observation_fails() -> None:
    traj = _trajectory(
        ("generated", CODE),
        ("observation", "<sandbox_output>1</sandbox_output>"),
    )
    assert format_reward(traj) == 0.0


def test_failed_episode_fails() -> None:
    traj = _trajectory(("generated", "<answer>3</answer>"), error="engine error")
    assert format_reward(traj) == 0.0


def test_tool_call_format_counts_its_own_tag() -> None:
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    traj = _trajectory(
        ("generated", call),
        ("observation", "<tool_response>1</tool_response>"),
        ("generated", "<answer>3</answer>"),
    )
    assert format_reward(traj) == 0.0  # a thyme trajectory never opened <code>
    assert format_reward(replace(traj, format="tool_call")) == 1.0


def test_unknown_format_names_the_setting() -> None:
    traj = replace(_trajectory(("generated", "<answer>3</answer>")), format="nope")
    with pytest.raises(ValueError, match=r"agent\.format"):
        format_check(traj)

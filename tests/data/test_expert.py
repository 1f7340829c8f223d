"""Which expert episodes become training data: verified answers that used a tool."""

from __future__ import annotations

from beacon.data.eval_stages import RunTrajectory, expert_drop_reason
from beacon.types import ToolCall, Trajectory


def episode(correct: bool, tool: bool, error: str | None = None) -> RunTrajectory:
    traj = Trajectory(sample_id="0", mode="tool", format="thyme")
    if tool:
        traj.tool_calls = [ToolCall(code="print(1)", executed=True, ok=True)]
    return RunTrajectory({"correct": correct, "error": error}, traj)


def test_kept_only_when_verified_and_code_assisted():
    assert expert_drop_reason(episode(correct=True, tool=True)) is None
    assert expert_drop_reason(episode(correct=False, tool=True)) == "wrong_answer"
    assert expert_drop_reason(episode(correct=True, tool=False)) == "no_tool_call"
    assert expert_drop_reason(episode(True, True, error="HTTP 500")) == "failed"


def test_tool_requirement_can_be_dropped_for_rft():
    assert expert_drop_reason(episode(correct=True, tool=False), require_tool=False) is None
    assert expert_drop_reason(episode(False, False), require_tool=False) == "wrong_answer"

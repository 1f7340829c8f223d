"""R_format of the paper: every code block is followed by an observation, and the final answer is
inside <answer>…</answer> (paper §3 "策略优化", the text under Eq. 1).

Read from the trajectory's structure, never by re-parsing answers (the agent's Format is the one
owner of answer extraction). What this relies on:

1. `Trajectory.final_answer` is set by the agent (only when an <answer>…</answer> was closed) and
   `finish_reason == "answer"` means the episode ended on it;
2. each tool call the agent recognised is one `ToolCall`, and each executed or rejected call got
   exactly one observation segment, directly after the generated segment that wrote it;
3. the format's own `call_open` tag (`beacon.agent.formats`) marks each code block the model
   opened, so a block that never got an observation (notool mode, an unclosed block before the
   answer) shows as more openings than observations.

A response passes when all of these hold; `format_check` also says which rule failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from beacon.agent.formats import get_format
from beacon.types import Trajectory


@dataclass(frozen=True)
class FormatCheck:
    """Whether a trajectory earns R_format = 1, and the first rule it broke if not."""

    ok: bool
    problem: str | None = None


def format_check(trajectory: Trajectory) -> FormatCheck:
    """Check the paper's format rules on the segment structure (module docstring)."""
    if trajectory.error is not None:
        return FormatCheck(False, f"the episode failed: {trajectory.error}")
    if trajectory.finish_reason != "answer" or trajectory.final_answer is None:
        return FormatCheck(False, f"no closed <answer> (finish_reason={trajectory.finish_reason})")
    segments = trajectory.segments
    observations = [i for i, s in enumerate(segments) if s.role == "observation"]
    for i in observations:
        if i == 0 or segments[i - 1].role != "generated":
            return FormatCheck(False, f"observation segment {i} does not follow a code block")
    if segments[-1].role != "generated":
        return FormatCheck(False, "the trajectory ends on an observation, not on the answer")
    calls = trajectory.tool_calls
    if any(not c.executed for c in calls):
        return FormatCheck(False, "a code block could not be run (malformed, or notool mode)")
    opened = trajectory.generated_text.count(get_format(trajectory.format).call_open)
    if not opened == len(calls) == len(observations):
        return FormatCheck(
            False,
            f"{opened} code blocks opened, {len(calls)} calls run, {len(observations)} "
            "observations: every code block must be followed by its observation",
        )
    return FormatCheck(True)


def format_reward(trajectory: Trajectory) -> float:
    """R_format ∈ {0, 1} (paper §3): 1 when `format_check` passes."""
    return 1.0 if format_check(trajectory).ok else 0.0

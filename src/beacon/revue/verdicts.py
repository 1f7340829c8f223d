"""Answer verification per group (Algorithm 2): binary labels and the group's kind.

The answer is the text inside the trajectory's `<answer>...</answer>` (`Trajectory.final_answer`,
set by the agent loop's format, the one owner of that tag); missing or empty is wrong without
asking anyone. Otherwise the project's verifier decides (`beacon.verify.verify`: answer prefixes
stripped, option letters, numbers, symbolic math through math-verify) and, where its rules cannot
decide, the text-only answer judge when one is given. A judge that is unavailable or gives no
verdict leaves the rule verdict, which is wrong for an answer the rules could not accept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from beacon.types import Sample, Trajectory
from beacon.verify import Judge, Verdict, verify

GroupKind = Literal["all_correct", "mixed", "all_wrong"]


@dataclass
class GroupVerdict:
    """Correctness labels c_i of one group (trajectory order) and what kind of group it is."""

    labels: list[bool]
    kind: GroupKind
    verdicts: list[Verdict | None]  # None where no answer span existed


def group_kind(labels: Sequence[bool]) -> GroupKind:
    """all_correct / mixed / all_wrong from per-trajectory correctness."""
    if not labels:
        raise ValueError("a group needs at least one trajectory to classify (rollout.group_size).")
    if all(labels):
        return "all_correct"
    return "all_wrong" if not any(labels) else "mixed"


def verify_trajectory(
    trajectory: Trajectory, sample: Sample, judge: Judge | None
) -> Verdict | None:
    """The verdict on one trajectory's answer span, or None when it has no non-empty span."""
    answer = (trajectory.final_answer or "").strip()
    if not answer:
        return None
    return verify(f"<answer>{answer}</answer>", sample, judge=judge)


def verify_group(
    trajectories: Sequence[Trajectory], sample: Sample, judge: Judge | None = None
) -> GroupVerdict:
    """VerifyAnswers (Algorithm 2) for the M trajectories of one query."""
    verdicts = [verify_trajectory(t, sample, judge) for t in trajectories]
    labels = [v is not None and v.correct for v in verdicts]
    return GroupVerdict(labels, group_kind(labels), verdicts)

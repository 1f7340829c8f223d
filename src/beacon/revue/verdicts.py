"""The kind of a group by its correctness labels (Algorithm 2's output): all-correct, mixed or
all-wrong, which picks the critic's prompt variant and how Algorithm 4 assembles.

The labels c_i themselves are the benchmark's verdicts (`beacon.rollout.score`, through
`beacon.rollout.Rollouts`), the verdict `beacon eval` and GRPO use. Deviation, stated:
Algorithm 2 reads only the `<answer>` span (missing or empty is wrong); the benchmark's scorer
reads that span first and, where a response has none, its fallbacks (`\\boxed{}`, an "answer
is" phrase, the last line), so a distillation result and an RL result are scored alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

GroupKind = Literal["all_correct", "mixed", "all_wrong"]


def group_kind(labels: Sequence[bool]) -> GroupKind:
    """all_correct / mixed / all_wrong from per-trajectory correctness."""
    if not labels:
        raise ValueError("a group needs at least one trajectory to classify (rollout.group_size).")
    if all(labels):
        return "all_correct"
    return "all_wrong" if not any(labels) else "mixed"

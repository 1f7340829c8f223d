"""OPD's health numbers (docs/train.md, "Guard rails"): per trajectory, sums over its
supervised tokens; per step, their means.

    health/sampler_logprob_gap   mean |log π_sampler(y_t) − log π_student(y_t)|
    health/entropy               mean entropy of the student's next-token distribution
    health/teacher_student_gap   mean log π_student(y_t) − log q^0(y_t), the base teacher

The teacher-student gap is the k1 estimate of the reverse KL(π ‖ q^0) on the student's own
samples, over the full vocabulary (the loss sees only the teacher's top-K support): it falls as
the student learns the teacher, and a rise means the student drifts away from it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from beacon.revue import TeacherScores
from beacon.rl import TokenHealth, logprob_gap_sum, training_sequence
from beacon.train.core.encode import EncodedTrajectory
from beacon.train.opd.score import StudentScores, supervised_positions
from beacon.types import Trajectory


def trajectory_health(
    traj: Trajectory, encoded: EncodedTrajectory, student: StudentScores, base: TeacherScores
) -> list[float]:
    """Sums over the supervised tokens: |sampler − student| log-prob, entropy, and student −
    base-teacher log-prob (the teacher-student gap), with their token counts (`TokenHealth`
    order, then the gap's two)."""
    positions = supervised_positions(encoded)
    logp = student.sampled_logprob.cpu()
    sampler = training_sequence(traj).sampler_logprobs
    sampled = torch.full_like(logp, float("nan"))
    if sampler is not None:
        sampled = torch.tensor(sampler, dtype=logp.dtype)[positions]
    on = torch.ones_like(logp, dtype=torch.bool)
    gap, gap_tokens = logprob_gap_sum(logp, sampled, on)
    teacher = base.sampled_logprob.to(logp)
    health = TokenHealth(gap, gap_tokens, float(student.entropy.sum()), len(logp))
    return [*health.as_list(), float((logp - teacher).sum()), len(logp)]


def health_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """`health/sampler_logprob_gap`, `health/entropy` and `health/teacher_student_gap` (mean
    over supervised tokens of log π_student − log q^0_teacher of the sampled token) of the
    step's trajectories."""
    sums = [sum(r["health"][k] for r in records) for k in range(6)]
    gap = sums[4] / sums[5] if sums[5] else math.nan
    return {**TokenHealth.from_list(sums[:4]).as_metrics(), "health/teacher_student_gap": gap}

"""Episodes and groups of episodes, built, seeded, scored and filtered one way for every job.

- episodes: `episode_spec` (the benchmark's prompt, one seed rule), `score` (the benchmark's
  scorer), `failed_outside_model` and the finish reasons behind it;
- groups: `Rollouts.groups`, G scored responses per prompt for the trainers, failures dropped
  and counted;
- checks: `check_trajectory`, whether a trajectory is what the engine sampled (images, ids).

Below `eval`, `data` and `train`, above `agent` and `benchmarks`.
"""

from beacon.rollout.checks import (
    CHECK_REASONS,
    Inconsistency,
    TrajectoryCheck,
    check_trajectory,
    image_runs,
)
from beacon.rollout.episodes import (
    FAILED_OUTSIDE_MODEL,
    RETRIED,
    episode_seed,
    episode_spec,
    failed_outside_model,
    sample_key,
    score,
)
from beacon.rollout.groups import Group, Rollouts, RolloutStats

__all__ = [
    "CHECK_REASONS",
    "FAILED_OUTSIDE_MODEL",
    "RETRIED",
    "Group",
    "Inconsistency",
    "RolloutStats",
    "Rollouts",
    "TrajectoryCheck",
    "check_trajectory",
    "episode_seed",
    "episode_spec",
    "failed_outside_model",
    "image_runs",
    "sample_key",
    "score",
]
